#include "core/comm/shm/cross_memory_policy.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <vector>

#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {

double KernelCopyCostRatio() {
  constexpr size_t kBytes = 1 << 20;
  // Touched first, so that neither side pays for page faults.
  std::vector<uint8_t> from(kBytes, 1);
  std::vector<uint8_t> to(kBytes, 0);
  using Clock = std::chrono::steady_clock;
  double kernel = std::numeric_limits<double>::infinity();
  double user = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 5; ++i) {
    iovec local{to.data(), kBytes};
    iovec remote{from.data(), kBytes};
    const Clock::time_point start = Clock::now();
    const ssize_t moved = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    const Clock::time_point read = Clock::now();
    CopyBytes(to.data(), from.data(), kBytes);
    asm volatile("" : : "r"(to.data()) : "memory");  // the copy is not dead
    const Clock::time_point copied = Clock::now();
    if (moved != static_cast<ssize_t>(kBytes)) return std::numeric_limits<double>::infinity();
    kernel = std::min(kernel, std::chrono::duration<double>(read - start).count());
    user = std::min(user, std::chrono::duration<double>(copied - read).count());
  }
  return kernel / std::max(user, 1e-9);
}

CrossMemoryPolicy ChooseCrossMemoryPolicy(std::optional<uint64_t> configured, bool oversubscribed,
                                          const std::function<double()>& kernelCopyCostRatio) {
  if (configured) return {*configured, *configured != 0};
  const double ratio = kernelCopyCostRatio();
  if (oversubscribed && ratio > kOversubscribedMaxKernelCopyCost) return {0, false};
  return {kCrossMemoryMinBytes, ratio <= kAllReduceMaxKernelCopyCost};
}

}  // namespace shm
}  // namespace collops
