// The golden op suite (tests/cpp/op_suite.h) on real mpirun ranks: every operation, every suite
// dtype, on the configured backend (Engine.*: "mpi" here; the cross-host runs filter this test
// and pass COLLOPS_TEST_BACKEND / COLLOPS_TEST_RANK_TABLE) and on a communicator the application
// made itself and handed over (MpiAdopted.*); Engine.RandomSchedule runs a random sequence of
// calls (tests/cpp/random_schedule.h) on the configured backend; EngineQuantised.AllReduceSuite the
// quantised AllReduce suite (tests/cpp/quant_suite.h) alone.
#include <mpi.h>

#include <gtest/gtest.h>

#include <memory>

#include "collops/context.h"
#include "collops/mpi_communicator.h"
#include "first_call_failure_suite.h"
#include "mpi_job.h"
#include "op_suite.h"
#include "p2p_refusal_suite.h"
#include "quant_suite.h"
#include "random_schedule.h"

namespace collops {
namespace testing {
namespace {

/// This rank's job on the configured backend (COLLOPS_TEST_BACKEND, COLLOPS_TEST_RANK_TABLE).
SuiteJob EngineJob(const std::string& domain) {
  SuiteJob job;
  job.rank = WorldRank();
  job.rankSize = WorldSize();
  job.backend = TestBackend();
  job.commDomain = domain;
  job.rankTableFile = TestRankTable();
  job.markerTag = JobTag() + "-" + domain;
  return job;
}

TEST(Engine, EveryOpEveryDtype) {
  const SuiteJob job = EngineJob("engine-suite");
  for (DataType dtype : SuiteDtypes()) {
    SCOPED_TRACE(DataTypeName(dtype));
    RunEveryOp(job, dtype);
    // The other dtypes would repeat the failure: a bad rank table fails every call, each after
    // exchanging the hosts again, which across hosts multiplies the run's time by the dtypes.
    if (HasFailure()) break;
  }
}

/// One rank of a pair refusing its own tensors makes its peer fail at once naming it
/// (p2p_refusal_suite.h); well within COLLOPS_TIMEOUT (30 s under ctest).
TEST(Engine, PointToPointRefusals) { RunPointToPointRefusals(EngineJob("engine-refusals"), 10); }

/// A rank whose first call fails its own checks, before its communicator exists, makes its peers
/// fail at once naming it (first_call_failure_suite.h); well within COLLOPS_TIMEOUT (30 s under
/// ctest).
TEST(Engine, FirstCallFailures) { RunFirstCallFailures(EngineJob("engine-first-call"), 10); }

/// The quantised AllReduce suite alone (RunEveryOp runs it with int8 too): the ctest at 7 ranks
/// filters this, where the whole op suite would take minutes.
TEST(EngineQuantised, AllReduceSuite) {
  const SuiteJob job = EngineJob("engine-quant");
  RunQuantAllReduceCases(job);
  RunQuantAllReduceErrors(job);
}

/// Calls of every kind one after another (tests/cpp/random_schedule.h) on the configured backend.
TEST(Engine, RandomSchedule) {
  std::shared_ptr<Communicator> comm =
      DefaultContext().Communicators().Get(EngineJob("engine-schedule").Comm());
  RunRandomSchedule(*comm, 500 + WorldSize(), 40);
}

/// World split by parity with MPI_Comm_split, adopted with MakeMpiCommunicator: the even ranks
/// and the odd ranks each run the suite on their own communicator.
TEST(MpiAdopted, EveryOpEveryDtype) {
  // The application's own MPI_COMM_WORLD; this initialises MPI unless main already did.
  std::shared_ptr<Communicator> world = MakeMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_EQ(world->Size(), WorldSize());
  EXPECT_EQ(world->Rank(), WorldRank());
  MPI_Comm half = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, WorldRank() % 2, WorldRank(), &half), MPI_SUCCESS);
  std::shared_ptr<Communicator> adopted = MakeMpiCommunicator(half);
  // The library works on its own duplicate: the application may free its handle at once.
  MPI_Comm_free(&half);
  SuiteJob job;
  job.rank = WorldRank() / 2;
  job.rankSize = (WorldSize() + 1 - WorldRank() % 2) / 2;
  job.comm = adopted.get();
  job.markerTag = JobTag() + "-adopted" + std::to_string(WorldRank() % 2);
  ASSERT_EQ(adopted->Size(), job.rankSize);
  ASSERT_EQ(adopted->Rank(), job.rank);
  for (DataType dtype : SuiteDtypes()) {
    SCOPED_TRACE(DataTypeName(dtype));
    RunEveryOp(job, dtype);
  }
}

}  // namespace
}  // namespace testing
}  // namespace collops
