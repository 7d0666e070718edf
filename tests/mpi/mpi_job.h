// What one rank of an mpirun job knows before MPI is initialised (mpirun's environment), and
// the settings the cross-host runs pass in (helper scripts reuse collops_mpi_tests with another
// backend and a rank table).
#pragma once

#include <string>

namespace collops {
namespace testing {

/// OMPI_COMM_WORLD_RANK / _SIZE; 0 and 1 outside mpirun (an MPI singleton).
int WorldRank();
int WorldSize();
/// COLLOPS_TEST_BACKEND, default "mpi" (the cross-host runs pass "hccl").
std::string TestBackend();
/// COLLOPS_TEST_RANK_TABLE, default "" (no rank table).
std::string TestRankTable();
/// The same on every rank of one mpirun job, different across jobs (PMIX_NAMESPACE).
std::string JobTag();

/// How main() started: true when the application (main) initialised MPI itself, false when it
/// left that to the library (COLLOPS_TEST_MPI_INIT=app selects the first).
bool ApplicationInitialisedMpi();
/// Whether MPI was initialised when main() started (false unless something else initialised it).
bool MpiInitialisedAtStart();
/// MPI_Finalize called by a test in the application's place (COLLOPS_TEST_MPI_INIT=app): main()
/// then leaves MPI alone, and the run passes or fails on its tests alone.
void FinaliseMpiAsTheApplication();

}  // namespace testing
}  // namespace collops
