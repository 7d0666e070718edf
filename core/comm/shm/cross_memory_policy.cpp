#include "core/comm/shm/cross_memory_policy.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {

namespace {

/// An anonymous private mapping of ordinary pages, unmapped when it goes; null data when the
/// mapping failed.
class OrdinaryPages {
 public:
  explicit OrdinaryPages(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    data_ = static_cast<uint8_t*>(p);
    // Where transparent huge pages are allowed, this mapping keeps 4 KiB ones all the same.
    madvise(p, bytes, MADV_NOHUGEPAGE);
  }
  ~OrdinaryPages() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  OrdinaryPages(const OrdinaryPages&) = delete;
  OrdinaryPages& operator=(const OrdinaryPages&) = delete;
  uint8_t* data() const { return data_; }

 private:
  size_t bytes_;
  uint8_t* data_ = nullptr;
};

}  // namespace

double KernelCopyCostRatio() {
  constexpr size_t kBytes = 1 << 20;
  constexpr int kKernelSamples = 7;
  constexpr int kUserSamplesPerKernel = 3;
  // The kernel pins every page it copies, so its cost per byte depends on the pages' size: on a
  // 2 MiB page it can be close to a user copy, on 4 KiB pages several times one. Buffers from the
  // heap may be either, depending on what the process did before (its allocator reuses memory
  // that someone advised into huge pages), and a ratio measured on them would depend on that
  // history. Mappings of their own, kept to 4 KiB pages, measure the pages most buffers have,
  // the same way every time.
  const OrdinaryPages from(kBytes), to(kBytes);
  if (from.data() == nullptr || to.data() == nullptr) {
    return std::numeric_limits<double>::infinity();
  }
  // Touched first, so that neither side pays for page faults.
  std::memset(from.data(), 1, kBytes);
  std::memset(to.data(), 0, kBytes);
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point begin, Clock::time_point end) {
    return std::chrono::duration<double>(end - begin).count();
  };
  // The user copy is the one a busy neighbour slows (it needs the memory's bandwidth, the
  // kernel's pinning mostly not), and the other ranks of a starting job are busy just then: it
  // takes three samples for each of the kernel's, so that a quiet moment is caught.
  double kernel = std::numeric_limits<double>::infinity();
  double user = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kKernelSamples; ++i) {
    iovec local{to.data(), kBytes};
    iovec remote{from.data(), kBytes};
    const Clock::time_point start = Clock::now();
    const ssize_t moved = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    const Clock::time_point read = Clock::now();
    if (moved != static_cast<ssize_t>(kBytes)) return std::numeric_limits<double>::infinity();
    kernel = std::min(kernel, seconds(start, read));
    for (int j = 0; j < kUserSamplesPerKernel; ++j) {
      const Clock::time_point before = Clock::now();
      CopyBytes(to.data(), from.data(), kBytes);
      asm volatile("" : : "r"(to.data()) : "memory");  // the copy is not dead
      user = std::min(user, seconds(before, Clock::now()));
    }
  }
  return kernel / std::max(user, 1e-9);
}

CrossMemoryPolicy ChooseCrossMemoryPolicy(std::optional<uint64_t> configured, bool oversubscribed,
                                          uint64_t l2Bytes,
                                          const std::function<double()>& kernelCopyCostRatio) {
  if (configured) return {*configured, *configured != 0, *configured};
  const double ratio = kernelCopyCostRatio();
  if (oversubscribed && ratio > kOversubscribedMaxKernelCopyCost) return {0, false, 0};
  const uint64_t cache = l2Bytes != 0 ? l2Bytes : kMinChunkBytes;
  const uint64_t pieceMin = ratio <= kInCacheMaxKernelCopyCost
                                ? kCrossMemoryMinBytes
                                : std::max<uint64_t>(kCrossMemoryMinBytes, cache);
  return {kCrossMemoryMinBytes, ratio <= kAllReduceMaxKernelCopyCost, pieceMin};
}

}  // namespace shm
}  // namespace collops
