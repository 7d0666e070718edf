#include "core/comm/shm/process_heap.h"

#include <fcntl.h>

#include <algorithm>
#include <iterator>

namespace collops {
namespace shm {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

void SharedHeap::Reset(int fd, uint8_t* base, uint64_t fileOffset, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = fd;
  base_ = base;
  fileOffset_ = fileOffset;
  bytes_ = bytes;
  free_.clear();
  used_.clear();
  if (bytes_ != 0) free_[0] = bytes_;
}

void* SharedHeap::Allocate(size_t bytes) {
  const uint64_t length = (std::max<uint64_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < length) continue;
    const uint64_t offset = it->first;
    // The pages must exist before anyone touches them: a sparse page that the system cannot
    // supply would be a SIGBUS in whichever rank touched it first.
    if (fallocate(fd_, 0, static_cast<off_t>(fileOffset_ + offset), static_cast<off_t>(length)) !=
        0) {
      return nullptr;
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
  std::lock_guard<std::mutex> lock(mutex_);
  const auto used = used_.find(static_cast<uint64_t>(offset));
  if (used == used_.end()) return false;
  uint64_t start = used->first;
  uint64_t length = used->second;
  used_.erase(used);
  // Back to the system (and zero for the next Allocate); the range stays in the file.
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            static_cast<off_t>(fileOffset_ + start), static_cast<off_t>(length));
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

}  // namespace shm
}  // namespace collops
