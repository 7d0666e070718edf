// The benchmarks' warm-up (bench/bench_common.h WarmUp): the calls asked for, more until the
// settle time has passed, and every rank stopping when rank 0 says so, whatever its own clock
// says; a rank that went on alone would call a collective its peers never enter.
#include <gtest/gtest.h>

#include <vector>

#include "bench/bench_common.h"

namespace collops_bench {
namespace {

Options WithWarmUp(int calls, double settleSeconds) {
  Options o;
  o.warmup = calls;
  o.settleSeconds = settleSeconds;
  return o;
}

TEST(BenchWarmUp, WithoutASettleTimeItMakesExactlyTheCallsAskedForAndNeverVotes) {
  int calls = 0, votes = 0;
  WarmUp(WithWarmUp(5, 0), [&] { ++calls; }, [&](bool) { return ++votes, true; });
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(votes, 0);
}

TEST(BenchWarmUp, GoesOnInBatchesUntilTheSettleTimeHasPassed) {
  int calls = 0;
  std::vector<bool> said;
  const double start = NowSeconds();
  WarmUp(
      WithWarmUp(3, 0.02), [&] { ++calls; }, [&](bool mine) { return said.push_back(mine), mine; });
  EXPECT_GE(NowSeconds() - start, 0.02);
  ASSERT_FALSE(said.empty());
  EXPECT_FALSE(said.back());  // the vote that ended it
  EXPECT_EQ(calls, 3 * static_cast<int>(said.size()));
}

TEST(BenchWarmUp, StopsWhenRankZeroSaysSoEvenIfThisRanksClockWantsMore) {
  int calls = 0, votes = 0;
  WarmUp(
      WithWarmUp(2, 60), [&] { ++calls; },
      [&](bool mine) {
        EXPECT_TRUE(mine);  // 60 s have not passed here
        return ++votes < 3;
      });
  EXPECT_EQ(votes, 3);
  EXPECT_EQ(calls, 2 + 2 * 2);
}

TEST(BenchWarmUp, GoesOnWhenRankZeroSaysSoEvenIfThisRanksClockIsDone) {
  int calls = 0, votes = 0;
  WarmUp(WithWarmUp(0, 1e-9), [&] { ++calls; }, [&](bool) { return ++votes < 4; });
  EXPECT_EQ(votes, 4);
  EXPECT_EQ(calls, 3);  // one call per batch when no calls were asked for
}

}  // namespace
}  // namespace collops_bench
