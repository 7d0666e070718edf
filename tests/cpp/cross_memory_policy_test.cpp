// ChooseCrossMemoryPolicy (core/comm/shm/cross_memory_policy.h): COLLOPS_SHM_CMA_BYTES wins and
// stops the measurement; otherwise the kernel copy is measured once, turned off for everything on
// an oversubscribed communicator where it costs more than two user copies, and for AllReduce
// wherever it costs more than 2.2.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <utility>

#include "core/comm/shm/cross_memory_policy.h"

namespace collops {
namespace shm {
namespace {

struct Ratio {
  double value;
  int* calls;
  double operator()() const {
    ++*calls;
    return value;
  }
};

/// The policy as (minBytes, allReduce), for EXPECT_EQ.
std::pair<uint64_t, bool> Choose(std::optional<uint64_t> configured, bool oversubscribed,
                                 Ratio ratio) {
  const CrossMemoryPolicy p = ChooseCrossMemoryPolicy(configured, oversubscribed, ratio);
  return {p.minBytes, p.allReduce};
}

using Policy = std::pair<uint64_t, bool>;

TEST(CrossMemoryPolicy, AConfiguredThresholdIsTakenAsItIsWithoutMeasuring) {
  int calls = 0;
  EXPECT_EQ(Choose(uint64_t{4096}, true, Ratio{9.0, &calls}), Policy(4096, true));
  EXPECT_EQ(Choose(uint64_t{0}, false, Ratio{0.5, &calls}), Policy(0, false));
  EXPECT_EQ(Choose(uint64_t{1} << 20, false, Ratio{9.0, &calls}), Policy(1 << 20, true));
  EXPECT_EQ(calls, 0);
}

TEST(CrossMemoryPolicy, WithACpuPerRankOnlyAllReduceDependsOnTheKernelCopy) {
  int calls = 0;
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{1.7, &calls}), Policy(kCrossMemoryMinBytes, true));
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{2.2, &calls}), Policy(kCrossMemoryMinBytes, true));
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{2.4, &calls}), Policy(kCrossMemoryMinBytes, false));
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{INFINITY, &calls}),
            Policy(kCrossMemoryMinBytes, false));
  EXPECT_EQ(calls, 4);
}

TEST(CrossMemoryPolicy, OversubscribedTheSingleCopyGoesOffWhereTheKernelCopyCostsMoreThanTwo) {
  int calls = 0;
  EXPECT_EQ(Choose(std::nullopt, true, Ratio{2.6, &calls}), Policy(0, false));
  EXPECT_EQ(Choose(std::nullopt, true, Ratio{INFINITY, &calls}), Policy(0, false));
  EXPECT_EQ(Choose(std::nullopt, true, Ratio{1.2, &calls}), Policy(kCrossMemoryMinBytes, true));
  EXPECT_EQ(Choose(std::nullopt, true, Ratio{2.0, &calls}), Policy(kCrossMemoryMinBytes, true));
  EXPECT_EQ(calls, 4);
}

TEST(CrossMemoryPolicy, TheMeasuredRatioIsAFiniteCostOnThisMachine) {
  // This process may always read itself, so the ratio is finite. Bounds wide enough for the
  // sanitizer builds, whose instrumented user copy is slower than the kernel's: a copy measured
  // as free or 100x a memcpy means the timing is broken, not the machine.
  const double ratio = KernelCopyCostRatio();
  EXPECT_TRUE(std::isfinite(ratio));
  EXPECT_GT(ratio, 0.01);
  EXPECT_LT(ratio, 100.0);
}

}  // namespace
}  // namespace shm
}  // namespace collops
