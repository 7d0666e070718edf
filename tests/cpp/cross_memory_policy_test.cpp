// ChooseCrossMemoryPolicy (core/comm/shm/cross_memory_policy.h): COLLOPS_SHM_CMA_BYTES wins and
// stops the measurement; otherwise the kernel copy is measured once, turned off for everything on
// an oversubscribed communicator where it costs more than two user copies, and for AllReduce
// wherever it costs more than 2.2.
#include <gtest/gtest.h>

#include <malloc.h>
#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
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

/// The huge pages of the mapping that holds `address` (AnonHugePages in /proc/self/smaps), in kB.
long HugePagesAround(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && line.find('-') < 17) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::strtol(line.c_str() + 14, nullptr, 10);
    }
  }
  return 0;
}

TEST(CrossMemoryPolicy, TheRatioDoesNotDependOnWhatTheHeapHandsOut) {
  // A process whose allocator holds freed memory that was advised into huge pages hands it to
  // its next allocations, and the kernel copies huge pages several times as fast as 4 KiB ones:
  // a ratio measured on such buffers would say "cma" for an AllReduce that then runs at half the
  // staged speed on ordinary buffers. Here the next 1 MiB from the heap lands on huge pages
  // (checked in /proc/self/smaps; skipped where the allocator or the kernel does not allow it).
  const double ordinary = KernelCopyCostRatio();
  constexpr size_t kHuge = 2 << 20, kBytes = 16 << 20, kProbe = 1 << 20;
  // Large blocks come from the heap and stay there once freed.
  if (mallopt(M_MMAP_THRESHOLD, 64 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 64 << 20) != 1) {
    GTEST_SKIP() << "this allocator does not take glibc's mallopt";
  }
  void* block = nullptr;
  ASSERT_EQ(posix_memalign(&block, kHuge, kBytes), 0);
  const bool advised = madvise(block, kBytes, MADV_HUGEPAGE) == 0;
  std::memset(block, 1, kBytes);
  std::free(block);
  // The free memory below the block, left by its alignment, is taken first, so that the next
  // allocations start where the block did.
  void* below = std::malloc(kProbe);
  void* filler = nullptr;
  const auto gap = reinterpret_cast<uintptr_t>(block) - reinterpret_cast<uintptr_t>(below);
  if (below < block && gap > 64) {
    std::free(below);
    below = nullptr;
    filler = std::malloc(gap - 32);
  }
  void* landing = std::malloc(kProbe);
  const long planted = advised ? HugePagesAround(static_cast<char*>(landing) + kProbe / 2) : 0;
  std::free(landing);
  const double afterHugePages = planted > 0 ? KernelCopyCostRatio() : 0.0;
  std::free(filler);
  std::free(below);
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
  if (planted == 0) GTEST_SKIP() << "the kernel gave the heap no huge pages";
  // The same machine and the same kind of pages: the two differ by the timing's noise only,
  // where buffers from the heap would measure a fraction of the ratio.
  EXPECT_LT(afterHugePages, ordinary * 2) << "ordinary pages " << ordinary;
  EXPECT_GT(afterHugePages, ordinary / 2) << "ordinary pages " << ordinary;
}

}  // namespace
}  // namespace shm
}  // namespace collops
