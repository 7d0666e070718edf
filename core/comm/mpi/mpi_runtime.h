// The MPI runtime as the "mpi" backend sees it: who initialised MPI, whether calls must be
// serialised, and the library's private copy of MPI_COMM_WORLD. Internal header.
//
// Rule: the library initialises MPI only when the application has not (MPI_Init_thread asking
// for MPI_THREAD_MULTIPLE) and then finalises it at process exit (atexit). An application that
// initialised MPI itself keeps full ownership: the library never finalises it.
#pragma once

#include <mpi.h>

#include <mutex>
#include <optional>

namespace collops {
namespace mpi {

/// Initialises MPI unless the application (or an earlier call) already has; thread-safe.
/// Throws Error(ERROR_BACKEND_UNAVAILABLE) once MPI has been finalised, or when MPI_Init_thread
/// fails.
void EnsureMpi();

/// True when EnsureMpi() called MPI_Init_thread (so the library finalises MPI at exit).
bool LibraryInitialisedMpi();

/// A lock held around every MPI call when the thread level MPI provides is below
/// MPI_THREAD_MULTIPLE (the calls are then serialised); an empty lock otherwise.
std::unique_lock<std::mutex> SerialiseMpi();
/// SerialiseMpi() for a communicator's primitive `primitive`: first throws
/// ERROR_BACKEND_UNAVAILABLE when the application has already finalised MPI (any MPI call would
/// then abort the process).
std::unique_lock<std::mutex> EnterMpi(const char* primitive);
/// Whether MPI_Finalize has run in this process.
bool MpiFinalized();
/// SerialiseMpi() that never waits: nothing when another thread holds the lock (that thread is
/// inside MPI, driving its progress already).
std::optional<std::unique_lock<std::mutex>> TrySerialiseMpi();

/// The library's duplicate of MPI_COMM_WORLD (MPI_ERRORS_RETURN set on it), made on first use:
/// the first call is collective over MPI_COMM_WORLD. The application's MPI_COMM_WORLD and its
/// error handler are never touched. Call with SerialiseMpi() held.
MPI_Comm PrivateWorld();

}  // namespace mpi
}  // namespace collops
