// ChooseCrossMemoryMinBytes (core/comm/shm/cross_memory_policy.h): COLLOPS_SHM_CMA_BYTES wins
// and stops the measurement; otherwise the kernel copy is measured only for an oversubscribed
// communicator, and turned off there when it costs more than two user copies.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

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

TEST(CrossMemoryPolicy, AConfiguredThresholdIsTakenAsItIsWithoutMeasuring) {
  int calls = 0;
  EXPECT_EQ(ChooseCrossMemoryMinBytes(uint64_t{4096}, true, Ratio{9.0, &calls}), 4096u);
  EXPECT_EQ(ChooseCrossMemoryMinBytes(uint64_t{0}, false, Ratio{0.5, &calls}), 0u);
  EXPECT_EQ(ChooseCrossMemoryMinBytes(uint64_t{1} << 20, true, Ratio{0.5, &calls}), 1u << 20);
  EXPECT_EQ(calls, 0);
}

TEST(CrossMemoryPolicy, WithACpuPerRankTheSingleCopyStaysOnWithoutMeasuring) {
  int calls = 0;
  EXPECT_EQ(ChooseCrossMemoryMinBytes(std::nullopt, false, Ratio{9.0, &calls}),
            kCrossMemoryMinBytes);
  EXPECT_EQ(calls, 0);
}

TEST(CrossMemoryPolicy, OversubscribedTheSingleCopyGoesOffWhereTheKernelCopyCostsMoreThanTwo) {
  int calls = 0;
  EXPECT_EQ(ChooseCrossMemoryMinBytes(std::nullopt, true, Ratio{2.6, &calls}), 0u);
  EXPECT_EQ(ChooseCrossMemoryMinBytes(std::nullopt, true, Ratio{INFINITY, &calls}), 0u);
  EXPECT_EQ(ChooseCrossMemoryMinBytes(std::nullopt, true, Ratio{1.2, &calls}),
            kCrossMemoryMinBytes);
  EXPECT_EQ(ChooseCrossMemoryMinBytes(std::nullopt, true, Ratio{2.0, &calls}),
            kCrossMemoryMinBytes);
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
