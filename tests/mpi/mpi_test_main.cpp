// main() of collops_mpi_tests, run by mpirun. Two modes, because who initialises MPI is what the
// init/finalise rule is about:
//   default                   main never touches MPI: the library initialises it on first use and
//                             must have finalised it by the time our atexit check runs (that
//                             check was registered first, so it runs after the library's);
//   COLLOPS_TEST_MPI_INIT=app main initialises MPI (MPI_THREAD_SERIALIZED), and the library must
//                             leave it alone: MPI is still initialised after every test, and
//                             main finalises it.
// The exit code is nonzero when any test failed on this rank, so mpirun fails for any rank.
#include <mpi.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/comm/mpi/mpi_runtime.h"
#include "mpi_job.h"

namespace collops {
namespace testing {
namespace {

bool gAppInit = false;
bool gInitialisedAtStart = false;
bool gTestFinalisedMpi = false;

int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? std::atoi(text) : fallback;
}

std::string EnvString(const char* name, const char* fallback) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? text : fallback;
}

void CheckLibraryFinalisedMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (mpi::LibraryInitialisedMpi() && !finalized) {
    std::fprintf(stderr, "rank %d: the library initialised MPI but did not finalise it at exit\n",
                 WorldRank());
    std::fflush(stderr);
    _exit(3);
  }
}

}  // namespace

int WorldRank() { return EnvInt("OMPI_COMM_WORLD_RANK", 0); }
int WorldSize() { return EnvInt("OMPI_COMM_WORLD_SIZE", 1); }
std::string TestBackend() { return EnvString("COLLOPS_TEST_BACKEND", "mpi"); }
std::string TestRankTable() { return EnvString("COLLOPS_TEST_RANK_TABLE", ""); }
std::string JobTag() { return "mpi-" + EnvString("PMIX_NAMESPACE", "singleton"); }
bool ApplicationInitialisedMpi() { return gAppInit; }
bool MpiInitialisedAtStart() { return gInitialisedAtStart; }
void FinaliseMpiAsTheApplication() {
  gTestFinalisedMpi = true;
  MPI_Finalize();
}

}  // namespace testing
}  // namespace collops

int main(int argc, char** argv) {
  using namespace collops::testing;
  ::testing::InitGoogleTest(&argc, argv);
  int initialized = 0;
  MPI_Initialized(&initialized);
  gInitialisedAtStart = initialized != 0;
  gAppInit = EnvString("COLLOPS_TEST_MPI_INIT", "") == "app";
  if (gAppInit) {
    int provided = 0;
    // Below MPI_THREAD_MULTIPLE, so the library's serialised-calls path runs too.
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return 2;
  } else {
    std::atexit(&CheckLibraryFinalisedMpi);
  }
  // Tests that must run alone in a job of their own (they end the job, or finalise MPI) run only
  // when a --gtest_filter names them: ctest's `standalone` entries.
  if (GTEST_FLAG_GET(filter) == "*") GTEST_FLAG_SET(filter, "-*Standalone.*");
  const int failed = RUN_ALL_TESTS();
  if (gAppInit && !gTestFinalisedMpi) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
      std::fprintf(stderr, "rank %d: the library finalised the application's MPI\n", WorldRank());
      return 3;
    }
    MPI_Finalize();
  }
  return failed;
}
