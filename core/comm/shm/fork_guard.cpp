#include "core/comm/shm/fork_guard.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

namespace collops {
namespace shm {
namespace {

// fd + 1 per slot, 0 = free: plain atomics, because the child handler runs after fork(), where a
// mutex another thread held stays locked forever. More descriptors than slots keep the old
// behaviour (the child holds them).
constexpr int kSlots = 1024;
std::atomic<int> gReleased[kSlots];
std::atomic<uint64_t> gGeneration{0};

// Async-signal-safe calls only: the child of a multithreaded parent may call nothing else.
void InForkedChild() {
  for (std::atomic<int>& slot : gReleased) {
    const int stored = slot.load(std::memory_order_relaxed);
    if (stored == 0) continue;
    const int blank = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (blank >= 0) {
      dup3(blank, stored - 1, O_CLOEXEC);
      close(blank);
    }
    slot.store(0, std::memory_order_relaxed);
  }
  gGeneration.fetch_add(1, std::memory_order_relaxed);
}

void InstallOnce() {
  static const bool installed = pthread_atfork(nullptr, nullptr, &InForkedChild) == 0;
  (void)installed;
}

}  // namespace

void ReleaseInForkedChildren(int fd) {
  if (fd < 0) return;
  InstallOnce();
  for (std::atomic<int>& slot : gReleased) {
    int free = 0;
    if (slot.compare_exchange_strong(free, fd + 1)) return;
  }
}

void StopReleasingInForkedChildren(int fd) {
  for (std::atomic<int>& slot : gReleased) {
    int mine = fd + 1;
    if (slot.compare_exchange_strong(mine, 0)) return;
  }
}

uint64_t ForkGeneration() {
  InstallOnce();
  return gGeneration.load(std::memory_order_relaxed);
}

}  // namespace shm
}  // namespace collops
