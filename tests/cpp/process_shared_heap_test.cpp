// The allocator of the multi-process lccl communicator's shared heap (shm::SharedHeap), on a
// memfd of the test's own: pages given back to the system or kept up to the cache limit, ranges
// it cannot back, merging of freed neighbours, a forked child, and OffsetOf.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "collops/communicator.h"
#include "core/comm/shm/process_fd.h"
#include "core/comm/shm/process_heap.h"

namespace collops {
namespace testing {
namespace {

constexpr uint64_t kPage = 4096;

/// A heap over a memfd of its own, so the test can see the pages come and go.
class SharedHeap : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_.Reset(memfd_create("heap-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    ASSERT_TRUE(fd_.Valid());
    ASSERT_EQ(ftruncate(fd_.Get(), kBytes + kPage), 0);
    void* base = mmap(nullptr, kBytes + kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.Get(), 0);
    ASSERT_NE(base, MAP_FAILED);
    base_ = static_cast<uint8_t*>(base);
    ResetWithCache(0);  // the fixture's heap caches nothing
  }
  /// Starts over with a cache of `cacheBytes`. The heap starts a page into the file, as a rank's
  /// heap starts inside the segment.
  void ResetWithCache(uint64_t cacheBytes) {
    heap_.Reset(fd_.Get(), base_ + kPage, kPage, kBytes, cacheBytes);
  }
  void TearDown() override {
    if (base_ != nullptr) munmap(base_, kBytes + kPage);
  }
  uint64_t ResidentBytes() const {
    struct stat st{};
    fstat(fd_.Get(), &st);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  static constexpr uint64_t kBytes = 64 * kPage;
  shm::UniqueFd fd_;
  uint8_t* base_ = nullptr;
  shm::SharedHeap heap_;
};

TEST_F(SharedHeap, WithoutACacheFreedPagesGoBackToTheSystem) {
  EXPECT_EQ(ResidentBytes(), 0u);
  auto* a = static_cast<uint8_t*>(heap_.Allocate(10 * kPage + 1));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kPage, 0u);
  EXPECT_EQ(heap_.AllocatedBytes(), 11 * kPage);
  EXPECT_EQ(ResidentBytes(), 11 * kPage);  // allocated up front: no SIGBUS on first touch
  std::memset(a, 0x5a, 11 * kPage);
  EXPECT_TRUE(heap_.Free(a));
  EXPECT_EQ(ResidentBytes(), 0u);
  EXPECT_EQ(heap_.AllocatedBytes(), 0u);
  auto* again = static_cast<uint8_t*>(heap_.Allocate(kPage));
  ASSERT_EQ(again, a);  // first fit: the freed range comes back, zeroed
  for (uint64_t i = 0; i < kPage; ++i) ASSERT_EQ(again[i], 0) << i;
}

TEST_F(SharedHeap, FreedPagesStayUpToTheCacheLimit) {
  ResetWithCache(16 * kPage);
  auto* a = static_cast<uint8_t*>(heap_.Allocate(11 * kPage));
  ASSERT_NE(a, nullptr);
  std::memset(a, 0x5a, 11 * kPage);
  EXPECT_TRUE(heap_.Free(a));
  EXPECT_EQ(heap_.CachedBytes(), 11 * kPage);
  EXPECT_EQ(ResidentBytes(), 11 * kPage);  // kept: no unmapping, no faulting in again
  // A range partly cached: its first 11 pages are reused as they are, 5 more are allocated.
  auto* b = static_cast<uint8_t*>(heap_.Allocate(16 * kPage));
  ASSERT_EQ(b, a);
  EXPECT_EQ(b[0], 0x5a);  // not cleared: the data is this rank's own, as malloc's would be
  EXPECT_EQ(b[11 * kPage], 0);
  EXPECT_EQ(heap_.CachedBytes(), 0u);
  EXPECT_EQ(ResidentBytes(), 16 * kPage);
  // A middle piece of a cached range: the cached pieces on either side stay cached.
  EXPECT_TRUE(heap_.Free(b));
  auto* c = static_cast<uint8_t*>(heap_.Allocate(4 * kPage));
  ASSERT_EQ(c, b);
  EXPECT_EQ(heap_.CachedBytes(), 12 * kPage);
  EXPECT_EQ(ResidentBytes(), 16 * kPage);
  EXPECT_TRUE(heap_.Free(c));
  EXPECT_EQ(heap_.CachedBytes(), 16 * kPage);
  // Beyond the limit a freed range goes back to the system.
  auto* d = static_cast<uint8_t*>(heap_.Allocate(40 * kPage));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(heap_.CachedBytes(), 0u);
  EXPECT_EQ(ResidentBytes(), 40 * kPage);
  EXPECT_TRUE(heap_.Free(d));
  EXPECT_EQ(heap_.CachedBytes(), 0u);
  EXPECT_EQ(ResidentBytes(), 0u);
}

TEST_F(SharedHeap, RangeTheSystemCannotBackGivesNullAndKeepsNoPages) {
  // The file ends 8 pages into the heap and may not grow: pages past that cannot be allocated,
  // as when the system is out of memory. The cache is let go first, then the range itself.
  ASSERT_EQ(ftruncate(fd_.Get(), 9 * kPage), 0);
  ASSERT_EQ(fcntl(fd_.Get(), F_ADD_SEALS, F_SEAL_GROW), 0);
  ResetWithCache(kBytes);
  void* a = heap_.Allocate(6 * kPage);
  ASSERT_NE(a, nullptr);
  void* b = heap_.Allocate(kPage);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(heap_.Free(a));
  EXPECT_EQ(heap_.CachedBytes(), 6 * kPage);
  EXPECT_EQ(heap_.Allocate(10 * kPage), nullptr);  // offset 7: 3 pages past the end
  EXPECT_EQ(heap_.CachedBytes(), 0u);
  EXPECT_EQ(ResidentBytes(), kPage);        // b only
  EXPECT_EQ(heap_.Allocate(6 * kPage), a);  // the freed range still works
  EXPECT_EQ(ResidentBytes(), 7 * kPage);
}

TEST_F(SharedHeap, FullHeapGivesNullAndFreedNeighboursMerge) {
  void* a = heap_.Allocate(16 * kPage);
  void* b = heap_.Allocate(16 * kPage);
  void* c = heap_.Allocate(32 * kPage);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(heap_.Allocate(1), nullptr);
  EXPECT_TRUE(heap_.Free(a));
  EXPECT_TRUE(heap_.Free(b));
  EXPECT_EQ(heap_.Allocate(33 * kPage), nullptr);
  void* ab = heap_.Allocate(32 * kPage);  // needs a and b merged
  EXPECT_EQ(ab, a);
  EXPECT_FALSE(heap_.Free(static_cast<uint8_t*>(c) + 1));  // not an allocation
  int local = 0;
  EXPECT_FALSE(heap_.Free(&local));
  EXPECT_TRUE(heap_.Free(c));
  EXPECT_FALSE(heap_.Free(c));  // twice
}

/// In a child of fork() the heap does nothing: the child shares the heap's pages with its parent
/// (the memfd is mapped MAP_SHARED), so its frees would punch them out of the parent's buffers (a
/// torch tensor's deleter at the child's exit zeroing the parent's tensor) and its allocations
/// would be the parent's next ones.
TEST_F(SharedHeap, AForkedChildNeitherFreesNorAllocatesTheParentsPages) {
  auto* a = static_cast<uint8_t*>(heap_.Allocate(2 * kPage));
  ASSERT_NE(a, nullptr);
  std::memset(a, 0x5a, 2 * kPage);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool freed = heap_.Free(a);  // nothing happens, but `a` is the heap's
    const void* got = heap_.Allocate(kPage);
    _exit(freed && got == nullptr ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's heap refused the free or handed out memory";
  EXPECT_EQ(ResidentBytes(), 2 * kPage);
  uint64_t changed = 0;
  for (uint64_t i = 0; i < 2 * kPage; ++i) changed += a[i] != 0x5a;
  EXPECT_EQ(changed, 0u) << "the child's free reached the parent's pages";
  EXPECT_EQ(heap_.Allocate(kPage), a + 2 * kPage);  // the parent's heap carries on
  EXPECT_TRUE(heap_.Free(a));
}

TEST_F(SharedHeap, OffsetOfAcceptsOnlyRangesInside) {
  auto* a = static_cast<uint8_t*>(heap_.Allocate(kPage));
  EXPECT_EQ(heap_.OffsetOf(a, kPage), 0);
  EXPECT_EQ(heap_.OffsetOf(a + 100, 8), 100);
  EXPECT_EQ(heap_.OffsetOf(a, kBytes), 0);
  EXPECT_EQ(heap_.OffsetOf(a, kBytes + 1), -1);
  EXPECT_EQ(heap_.OffsetOf(base_, 1), -1);  // the page before the heap
  EXPECT_EQ(heap_.OffsetOf(a + kBytes, 0), static_cast<int64_t>(kBytes));
  EXPECT_EQ(heap_.OffsetOf(a + kBytes, 1), -1);
}

}  // namespace
}  // namespace testing
}  // namespace collops
