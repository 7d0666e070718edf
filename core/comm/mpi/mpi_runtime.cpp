#include "core/comm/mpi/mpi_runtime.h"

#include <atomic>
#include <cstdlib>

#include "collops/status.h"
#include "core/comm/mpi/mpi_types.h"

namespace collops {
namespace mpi {
namespace {

struct Runtime {
  std::mutex initMutex;                // guards every field below but callMutex
  bool ready = false;                  // EnsureMpi() has run to completion
  bool ownsMpi = false;                // we called MPI_Init_thread, so we finalise
  std::atomic<bool> serialise{false};  // provided thread level < MPI_THREAD_MULTIPLE
  std::mutex callMutex;                // held around MPI calls when serialise
  MPI_Comm world = MPI_COMM_NULL;
};

Runtime& TheRuntime() {
  static Runtime* runtime = new Runtime;  // never destroyed: the atexit handler uses it
  return *runtime;
}

/// Registered right after our MPI_Init_thread, so it runs before the destructors of statics
/// made earlier and after those made later (C++ interleaves both in reverse order). Cached
/// communicators of the default context are never destroyed; any communicator destroyed after
/// this sees MPI_Finalized and skips MPI_Comm_free.
void FinalizeAtExit() {
  Runtime& r = TheRuntime();
  std::lock_guard<std::mutex> lock(r.callMutex);
  if (MpiFinalized()) return;  // the application finalised "our" MPI itself: nothing left to do
  MPI_Finalize();              // also releases the private world, the 2-byte type and the user ops
}

}  // namespace

bool MpiFinalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

std::unique_lock<std::mutex> EnterMpi(const char* primitive) {
  if (MpiFinalized()) {
    Fail(ERROR_BACKEND_UNAVAILABLE, "mpi ", primitive,
         ": MPI has been finalised in this process; call MPI_Finalize only after the last "
         "collops operation");
  }
  return SerialiseMpi();
}

void EnsureMpi() {
  Runtime& r = TheRuntime();
  std::lock_guard<std::mutex> lock(r.initMutex);
  if (MpiFinalized()) {
    Fail(ERROR_BACKEND_UNAVAILABLE, "mpi backend: MPI has already been finalised in this process");
  }
  if (r.ready) return;
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    CheckMpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  } else {
    CheckMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    r.ownsMpi = true;
    std::atexit(&FinalizeAtExit);
  }
  r.serialise = provided < MPI_THREAD_MULTIPLE;
  r.ready = true;
}

bool LibraryInitialisedMpi() {
  Runtime& r = TheRuntime();
  std::lock_guard<std::mutex> lock(r.initMutex);
  return r.ownsMpi;
}

std::unique_lock<std::mutex> SerialiseMpi() {
  Runtime& r = TheRuntime();
  return r.serialise ? std::unique_lock<std::mutex>(r.callMutex) : std::unique_lock<std::mutex>();
}

std::optional<std::unique_lock<std::mutex>> TrySerialiseMpi() {
  Runtime& r = TheRuntime();
  if (!r.serialise) return std::unique_lock<std::mutex>();
  std::unique_lock<std::mutex> lock(r.callMutex, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return lock;
}

MPI_Comm PrivateWorld() {
  Runtime& r = TheRuntime();
  std::lock_guard<std::mutex> lock(r.initMutex);
  if (r.world == MPI_COMM_NULL) {
    MPI_Comm world = MPI_COMM_NULL;
    CheckMpi(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
    CheckMpi(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    r.world = world;
  }
  return r.world;
}

}  // namespace mpi
}  // namespace collops
