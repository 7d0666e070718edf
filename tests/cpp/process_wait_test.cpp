// The wait budget of the multi-process lccl communicator (COLLOPS_SHM_SPIN_US,
// COLLOPS_SHM_YIELD_US, read by rank 0): bad values are rejected by name, and every phase of a wait
// (pure spin, spin that yields, futex sleep) delivers the same results.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "idle_hook_check.h"
#include "process_ranks.h"

namespace collops {
namespace {

using testing::ProcessRanksOptions;
using testing::RunProcessRanks;

using testing::MakeLcclComm;

TEST(ProcessWait, RejectsBadBudgetsByName) {
  for (const char* name : {"COLLOPS_SHM_SPIN_US", "COLLOPS_SHM_YIELD_US", "COLLOPS_SHM_BIND"}) {
    for (const char* value : {"-1", "abc", "5us", "10000001"})
      testing::ExpectEnvRejected(name, value);
  }
}

TEST(ProcessWait, RejectsBadStreamThresholdByName) {
  for (const char* value : {"-1", "abc", "2 MiB", "2mb"})
    testing::ExpectEnvRejected("COLLOPS_SHM_STREAM_BYTES", value);
}

/// A name that is not an algorithm of that op (each op has its own list: `staged` is no AllReduce
/// algorithm, `rsag` no AllGather one).
TEST(ProcessWait, RejectsUnknownAlgorithmsByName) {
  testing::ExpectEnvRejected("COLLOPS_ALGO_ALLREDUCE", "staged");
  testing::ExpectEnvRejected("COLLOPS_ALGO_ALLREDUCE", "ring");
  testing::ExpectEnvRejected("COLLOPS_ALGO_ALLGATHER", "rsag");
  testing::ExpectEnvRejected("COLLOPS_ALGO_BROADCAST", "CMA");
}

/// Ranks that arrive at different times, so waits run into each phase of the budget.
void StaggeredAllReduces(int rank, int size) {
  auto comm = MakeLcclComm(rank, size, "staggered");
  for (int i = 0; i < 6; ++i) {
    if (rank == i % size) usleep(2000);  // outlasts a small spin budget: the peers sleep
    std::vector<int32_t> in(1000 + i, rank + 1), out(in.size(), 0);
    comm->AllReduce(in.data(), out.data(), in.size(), ACL_INT32, ReduceOp::kSum);
    for (size_t j = 0; j < out.size(); ++j) {
      ASSERT_EQ(out[j], size * (size + 1) / 2) << "call " << i << " element " << j;
    }
    comm->Barrier();
  }
}

TEST(ProcessWait, EveryWaitPhaseGivesTheSameResults) {
  const struct {
    const char* spinUs;
    const char* yieldUs;
  } budgets[] = {{"0", "0"}, {"0", "300"}, {"300", "0"}, {"100000", "0"}};
  for (const auto& budget : budgets) {
    SCOPED_TRACE(std::string("spin ") + budget.spinUs + " us, yield " + budget.yieldUs + " us");
    ProcessRanksOptions options;
    options.env["COLLOPS_SHM_SPIN_US"] = budget.spinUs;
    options.env["COLLOPS_SHM_YIELD_US"] = budget.yieldUs;
    RunProcessRanks(3, [](int rank) { StaggeredAllReduces(rank, 3); }, options);
  }
}

TEST(ProcessWait, IdleHookRunsWhileAWaitSleeps) {
  RunProcessRanks(2, [](int rank) {
    auto comm = MakeLcclComm(rank, 2, "idle-hook");
    testing::ExpectIdleHookRunsWhileWaiting(*comm, rank);
  });
}

/// The CPUs this thread may run on, in order.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

TEST(ProcessWait, BindPinsRankToItsOwnCpuOnlyWhenAskedAndThereAreEnough) {
  const std::vector<int> before = AllowedCpus();
  if (before.size() < 2) GTEST_SKIP() << "needs two CPUs";
  for (const char* bind : {"0", "1"}) {
    ProcessRanksOptions options;
    options.env["COLLOPS_SHM_BIND"] = bind;
    RunProcessRanks(
        2,
        [&](int rank) {
          auto comm = MakeLcclComm(rank, 2, "bind");
          const std::vector<int> after = AllowedCpus();
          if (std::string(bind) == "1") {
            EXPECT_EQ(after, std::vector<int>{before[rank]}) << "rank " << rank;
          } else {
            EXPECT_EQ(after, before) << "rank " << rank;
          }
          comm->Barrier();
        },
        options);
  }
  // More ranks than CPUs: nobody is pinned (two ranks on one CPU would halve both).
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BIND"] = "1";
  const int ranks = static_cast<int>(before.size()) + 1;
  if (ranks > 8) return;
  RunProcessRanks(
      ranks,
      [&](int rank) {
        auto comm = MakeLcclComm(rank, ranks, "bind-over");
        EXPECT_EQ(AllowedCpus(), before) << "rank " << rank;
        comm->Barrier();
      },
      options);
}

}  // namespace
}  // namespace collops
