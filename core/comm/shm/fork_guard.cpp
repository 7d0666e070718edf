#include "core/comm/shm/fork_guard.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>

namespace collops {
namespace shm {
namespace {

// fd + 1 per slot, 0 = free: plain atomics, because the child handler runs after fork(), where a
// mutex another thread held stays locked forever. More descriptors than slots keep the old
// behaviour (the child holds them).
constexpr int kSlots = 1024;
std::atomic<int> gReleased[kSlots];
std::atomic<const std::atomic<uint64_t>*> gAbortRecords[kSlots];  ///< of gReleased[i]'s holder
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
  for (auto& record : gAbortRecords) record.store(nullptr, std::memory_order_relaxed);
  gGeneration.fetch_add(1, std::memory_order_relaxed);
}

void InstallOnce() {
  static const bool installed = pthread_atfork(nullptr, nullptr, &InForkedChild) == 0;
  (void)installed;
}

}  // namespace

void ReleaseInForkedChildren(int fd, const std::atomic<uint64_t>* abortRecord) {
  if (fd < 0) return;
  InstallOnce();
  for (int i = 0; i < kSlots; ++i) {
    int free = 0;
    if (gReleased[i].compare_exchange_strong(free, fd + 1)) {
      gAbortRecords[i].store(abortRecord, std::memory_order_release);
      return;
    }
  }
}

void StopReleasingInForkedChildren(int fd) {
  if (fd < 0) return;  // fd + 1 would match a free slot
  for (int i = 0; i < kSlots; ++i) {
    if (gReleased[i].load(std::memory_order_relaxed) != fd + 1) continue;
    gAbortRecords[i].store(nullptr, std::memory_order_release);  // before the memory goes
    int mine = fd + 1;
    if (gReleased[i].compare_exchange_strong(mine, 0)) return;
  }
}

bool HoldsLiveClaim(const std::string& name) {
  for (int i = 0; i < kSlots; ++i) {
    const int stored = gReleased[i].load(std::memory_order_acquire);
    if (stored == 0) continue;
    const std::atomic<uint64_t>* abortRecord = gAbortRecords[i].load(std::memory_order_acquire);
    if (abortRecord != nullptr && abortRecord->load(std::memory_order_acquire) != 0) continue;
    sockaddr_un addr{};
    socklen_t length = sizeof(addr);
    if (getsockname(stored - 1, reinterpret_cast<sockaddr*>(&addr), &length) != 0) continue;
    const size_t pathBytes = length - offsetof(sockaddr_un, sun_path);
    if (addr.sun_family == AF_UNIX && pathBytes == name.size() + 1 && addr.sun_path[0] == '\0' &&
        std::memcmp(addr.sun_path + 1, name.data(), name.size()) == 0) {
      return true;
    }
  }
  return false;
}

uint64_t ForkGeneration() {
  InstallOnce();
  return gGeneration.load(std::memory_order_relaxed);
}

}  // namespace shm
}  // namespace collops
