#include "core/comm/shm/process_heap.h"

#include <fcntl.h>

#include <algorithm>
#include <iterator>
#include <limits>

namespace collops {
namespace shm {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

void SharedHeap::Reset(int fd, uint8_t* base, uint64_t fileOffset, uint64_t bytes,
                       uint64_t cacheBytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = fd;
  base_ = base;
  fileOffset_ = fileOffset;
  bytes_ = bytes;
  cacheLimit_ = cacheBytes;
  cachedBytes_ = 0;
  forkGeneration_ = ForkGeneration();
  free_.clear();
  used_.clear();
  cached_.clear();
  if (bytes_ != 0) free_[0] = bytes_;
}

std::vector<std::pair<uint64_t, uint64_t>> SharedHeap::TakeCached(uint64_t offset,
                                                                  uint64_t length) {
  const uint64_t end = offset + length;
  std::vector<std::pair<uint64_t, uint64_t>> uncached;
  uint64_t at = offset;
  auto it = cached_.upper_bound(offset);
  if (it != cached_.begin() && std::prev(it)->first + std::prev(it)->second > offset) --it;
  while (it != cached_.end() && it->first < end) {
    const uint64_t start = it->first, stop = it->first + it->second;
    if (start > at) uncached.emplace_back(at, start - at);
    // Keep the parts of this cached range outside [offset, end).
    const uint64_t taken = std::min(stop, end) - std::max(start, offset);
    cachedBytes_ -= taken;
    it = cached_.erase(it);
    if (start < offset) cached_[start] = offset - start;
    if (stop > end) cached_[end] = stop - end;
    at = std::min(stop, end);
  }
  if (at < end) uncached.emplace_back(at, end - at);
  return uncached;
}

bool SharedHeap::Back(uint64_t offset, uint64_t length) {
  return fallocate(fd_, 0, static_cast<off_t>(fileOffset_ + offset), static_cast<off_t>(length)) ==
         0;
}

void SharedHeap::Punch(uint64_t offset, uint64_t length) {
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            static_cast<off_t>(fileOffset_ + offset), static_cast<off_t>(length));
}

void* SharedHeap::Allocate(size_t bytes) {
  if (InForkedChild()) return nullptr;
  if (bytes > std::numeric_limits<uint64_t>::max() - kPage) return nullptr;  // rounding overflows
  const uint64_t length = (std::max<uint64_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < length) continue;
    const uint64_t offset = it->first;
    // The pages must exist before anyone touches them: a sparse page that the system cannot
    // supply would be a SIGBUS in whichever rank touched it first.
    bool backed = true;
    for (const auto& part : TakeCached(offset, length)) {
      backed = backed && Back(part.first, part.second);
    }
    if (!backed) {
      // Out of memory: the cached pages go back first, then one more try.
      for (const auto& range : cached_) Punch(range.first, range.second);
      cached_.clear();
      cachedBytes_ = 0;
      if (!Back(offset, length)) {
        Punch(offset, length);
        return nullptr;
      }
    }
    const uint64_t rest = it->second - length;
    free_.erase(it);
    if (rest != 0) free_[offset + length] = rest;
    used_[offset] = length;
    return base_ + offset;
  }
  return nullptr;
}

bool SharedHeap::Free(void* p) {
  const int64_t offset = OffsetOf(p, 0);
  if (offset < 0) return false;
  // A child's free (a tensor's deleter at its exit, say) would punch the parent's pages.
  if (InForkedChild()) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto used = used_.find(static_cast<uint64_t>(offset));
  if (used == used_.end()) return false;
  uint64_t start = used->first;
  uint64_t length = used->second;
  used_.erase(used);
  if (cachedBytes_ + length <= cacheLimit_) {
    cached_[start] = length;
    cachedBytes_ += length;
  } else {
    Punch(start, length);
  }
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto before = std::prev(next);
    if (before->first + before->second == start) {
      start = before->first;
      length += before->second;
      free_.erase(before);
    }
  }
  free_[start] = length;
  return true;
}

uint64_t SharedHeap::AllocatedBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t total = 0;
  for (const auto& range : used_) total += range.second;
  return total;
}

uint64_t SharedHeap::CachedBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cachedBytes_;
}

}  // namespace shm
}  // namespace collops
