// SharedHeap: the allocator behind ProcessCommunicator::AllocateShared — one rank's heap inside the
// lccl segment (process_segment.h), which every peer has mapped too. A collective whose input or
// output lies in a heap moves those pieces with one copy (the peer reads or writes them in place)
// instead of two through the staging slots.
//
// Only the owning rank allocates from its heap, so the bookkeeping is process-local. Pages are
// allocated in the memfd when a range is handed out (fallocate: no memory means nullptr here,
// never a SIGBUS on first touch). A freed range keeps its pages, up to a cache limit
// (COLLOPS_SHM_HEAP_CACHE_BYTES), as a caching allocator does: giving them back (hole punch)
// unmaps them in every rank, and the next allocation of that range would fault every page in
// again in every rank that touched it, which costs a caller that allocates its outputs here on
// every call (OperationTorch.execute) many times the collective itself. Beyond the limit, and when
// the system has no memory for a new range, pages go back to the system.
//
// A child of fork() inherits the heap's mapping, which stays MAP_SHARED with the memfd: a hole
// it punched, or a range it handed out, would be the parent's pages. So in a child (another fork
// generation than the one that called Reset) the heap does nothing at all: Allocate gives
// nullptr and Free leaves the pages, which the parent still uses, to the parent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/comm/shm/fork_guard.h"

namespace collops {
namespace shm {

class SharedHeap {
 public:
  /// Empty until Reset(): Allocate() returns nullptr.
  SharedHeap() = default;
  SharedHeap(const SharedHeap&) = delete;
  SharedHeap& operator=(const SharedHeap&) = delete;

  /// Manages the heap of `bytes` bytes mapped at `base`, at `fileOffset` in the memfd `fd` (not
  /// owned), keeping the pages of at most `cacheBytes` freed bytes; forgets earlier allocations.
  void Reset(int fd, uint8_t* base, uint64_t fileOffset, uint64_t bytes, uint64_t cacheBytes);
  /// At least `bytes` bytes, page aligned, not initialised (new pages are zero; a reused range
  /// holds what this rank last wrote there); nullptr when the heap has no free range that large,
  /// the system no memory for it, or this is a child of fork().
  void* Allocate(size_t bytes);
  /// Returns an Allocate()d range; false (and nothing happens) when `p` is not one. In a child of
  /// fork() nothing happens either: true for any address inside the heap.
  bool Free(void* p);
  /// Offset in the heap of [p, p + bytes) when it lies wholly inside the heap, else -1.
  int64_t OffsetOf(const void* p, size_t bytes) const {
    const auto at = reinterpret_cast<uintptr_t>(p);
    const auto base = reinterpret_cast<uintptr_t>(base_);
    if (base_ == nullptr || at < base || at - base > bytes_ || bytes > bytes_ - (at - base)) {
      return -1;
    }
    return static_cast<int64_t>(at - base);
  }
  /// Whether this process is a child of fork() of the one that called Reset(): its pages are the
  /// parent's. No lock: a mutex another thread held at the fork stays locked in the child.
  bool InForkedChild() const { return forkGeneration_ != ForkGeneration(); }
  /// Bytes currently handed out (tests).
  uint64_t AllocatedBytes() const;
  /// Bytes free but keeping their pages (tests).
  uint64_t CachedBytes() const;

 private:
  /// Removes [offset, offset + length) from cached_ and returns the parts of it that were not
  /// cached (those need pages). Caller holds mutex_.
  std::vector<std::pair<uint64_t, uint64_t>> TakeCached(uint64_t offset, uint64_t length);
  /// Allocates the pages of [offset, offset + length) in the memfd; false when the system has
  /// no memory for them. Caller holds mutex_.
  bool Back(uint64_t offset, uint64_t length);
  /// Gives the pages of [offset, offset + length) back to the system. Caller holds mutex_.
  void Punch(uint64_t offset, uint64_t length);

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t fileOffset_ = 0;
  uint64_t bytes_ = 0;
  uint64_t cacheLimit_ = 0;
  uint64_t cachedBytes_ = 0;
  uint64_t forkGeneration_ = ForkGeneration();  ///< of the process that called Reset()
  mutable std::mutex mutex_;
  std::map<uint64_t, uint64_t> free_;    ///< offset -> length of each free range, never adjacent
  std::map<uint64_t, uint64_t> used_;    ///< offset -> length of each allocation
  std::map<uint64_t, uint64_t> cached_;  ///< offset -> length of free ranges that keep pages
};

}  // namespace shm
}  // namespace collops
