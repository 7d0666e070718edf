// ChooseCrossMemoryPolicy (core/comm/shm/cross_memory_policy.h): COLLOPS_SHM_CMA_BYTES wins and
// stops the measurement; otherwise the kernel copy is measured once, turned off for everything on
// an oversubscribed communicator where it costs more than two user copies, for AllReduce wherever
// it costs more than 2.2, and for the other collectives' pieces below one core's L2 cache where
// it costs more than 3.5; the measurement itself does not depend on the heap's pages.
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
#include <tuple>

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

constexpr uint64_t kL2 = 1 << 20;  // one core's L2 cache, as the tests below have it

/// The policy as (minBytes, allReduce, pieceMinBytes), for EXPECT_EQ.
std::tuple<uint64_t, bool, uint64_t> Choose(std::optional<uint64_t> configured, bool oversubscribed,
                                            Ratio ratio, uint64_t l2Bytes = kL2) {
  const CrossMemoryPolicy p = ChooseCrossMemoryPolicy(configured, oversubscribed, l2Bytes, ratio);
  return {p.minBytes, p.allReduce, p.pieceMinBytes};
}

using Policy = std::tuple<uint64_t, bool, uint64_t>;

TEST(CrossMemoryPolicy, AConfiguredThresholdIsTakenAsItIsWithoutMeasuring) {
  int calls = 0;
  EXPECT_EQ(Choose(uint64_t{4096}, true, Ratio{9.0, &calls}), Policy(4096, true, 4096));
  EXPECT_EQ(Choose(uint64_t{0}, false, Ratio{0.5, &calls}), Policy(0, false, 0));
  EXPECT_EQ(Choose(uint64_t{1} << 20, false, Ratio{9.0, &calls}), Policy(1 << 20, true, 1 << 20));
  EXPECT_EQ(calls, 0);
}

TEST(CrossMemoryPolicy, WithACpuPerRankAllReduceAndPiecesInCacheDependOnTheKernelCopy) {
  int calls = 0;
  constexpr uint64_t kMin = kCrossMemoryMinBytes;
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{1.7, &calls}), Policy(kMin, true, kMin));
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{2.2, &calls}), Policy(kMin, true, kMin));
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{2.4, &calls}), Policy(kMin, false, kMin));
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{3.5, &calls}), Policy(kMin, false, kMin));
  // A dearer kernel copy loses to the staged copies while they stay in the L2 cache.
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{4.5, &calls}), Policy(kMin, false, kL2));
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{INFINITY, &calls}), Policy(kMin, false, kL2));
  EXPECT_EQ(calls, 6);
}

TEST(CrossMemoryPolicy, PiecesOfADearKernelCopyStartAtTheCacheOrTheDefaultWhereItIsUnknown) {
  int calls = 0;
  constexpr uint64_t kMin = kCrossMemoryMinBytes;
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{4.5, &calls}, 2 << 20), Policy(kMin, false, 2 << 20));
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{4.5, &calls}, 0),
            Policy(kMin, false, kMinChunkBytes));
  // Never below the threshold every single copy has.
  EXPECT_EQ(Choose(std::nullopt, false, Ratio{4.5, &calls}, 4096), Policy(kMin, false, kMin));
  EXPECT_EQ(calls, 3);
}

TEST(CrossMemoryPolicy, OversubscribedTheSingleCopyGoesOffWhereTheKernelCopyCostsMoreThanTwo) {
  int calls = 0;
  constexpr uint64_t kMin = kCrossMemoryMinBytes;
  EXPECT_EQ(Choose(std::nullopt, true, Ratio{2.6, &calls}), Policy(0, false, 0));
  EXPECT_EQ(Choose(std::nullopt, true, Ratio{INFINITY, &calls}), Policy(0, false, 0));
  EXPECT_EQ(Choose(std::nullopt, true, Ratio{1.2, &calls}), Policy(kMin, true, kMin));
  EXPECT_EQ(Choose(std::nullopt, true, Ratio{2.0, &calls}), Policy(kMin, true, kMin));
  EXPECT_EQ(calls, 4);
}

TEST(CrossMemoryPolicy, AutomaticRulesTakePiecesFromTheirThresholdAndForcedCmaFromTheLowerOne) {
  ShmPolicy policy;
  policy.rankSize = 2;
  policy.cpus = 2;
  policy.crossMemoryMinBytes = kCrossMemoryMinBytes;
  policy.crossMemoryPieceMinBytes = kL2;
  policy.crossMemoryMaxBytes = kCrossMemoryMaxBytes;
  EXPECT_EQ(CrossMemoryPieceFrom(policy, kAlgoAuto), kL2);
  EXPECT_EQ(CrossMemoryPieceFrom(policy, kAlgoCrossMemory), kCrossMemoryMinBytes);
  // AllGather of 2 ranks: an input of 512 KiB stays staged, one of 1 MiB is read in place.
  EXPECT_FALSE(CrossMemoryInput(policy, kAlgoAuto, 2, kL2 / 2, kL2));
  EXPECT_TRUE(CrossMemoryInput(policy, kAlgoAuto, 2, kL2, 2 * kL2));
  EXPECT_TRUE(CrossMemoryInput(policy, kAlgoCrossMemory, 2, 64 << 10, 128 << 10));
  EXPECT_FALSE(CrossMemoryInput(policy, kAlgoStaged, 2, kL2, 2 * kL2));
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
