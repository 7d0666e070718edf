// WaitWord: spin briefly, then sleep on a futex. Used by the thread and process shared-memory
// communicators. Lives in ordinary or shared memory (it is a plain pair of 32-bit atomics and uses
// non-private futex calls, so waiters and wakers may be different processes).
//
// Why spin first: on this class of VM waking a sleeping thread costs ~30 us against ~130 ns for a
// waiter that is still spinning; why sleep later: with more ranks than cores a spinning waiter
// steals the core the peer it waits for needs.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace collops {
namespace shm {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// A point in time after which a wait gives up.
class Deadline {
 public:
  static Deadline After(double seconds) {
    Deadline d;
    d.at_ = std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(seconds));
    return d;
  }
  bool Passed() const { return std::chrono::steady_clock::now() >= at_; }
  /// Nanoseconds left, clamped to [0, cap].
  int64_t NanosLeft(int64_t cap) const {
    const auto left =
        std::chrono::duration_cast<std::chrono::nanoseconds>(at_ - std::chrono::steady_clock::now())
            .count();
    return left < 0 ? 0 : (left > cap ? cap : left);
  }

 private:
  std::chrono::steady_clock::time_point at_;
};

struct WaitWord {
  std::atomic<uint32_t> sequence{0};
  std::atomic<uint32_t> sleepers{0};

  /// Wakes every sleeper. Call after publishing the state that waiters' predicates read.
  void Notify() {
    sequence.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&sequence), FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
    }
  }

  /// Waits until ready() is true; false when `deadline` passes first. Between sleeps (at most
  /// `sliceNanos` each) it calls onSlice(), which may throw (e.g. ERROR_PEER_LOST).
  template <class Ready, class OnSlice>
  bool Wait(Ready&& ready, const Deadline& deadline, OnSlice&& onSlice, int spinIterations = 4000,
            int64_t sliceNanos = 20'000'000) {
    for (int i = 0; i < spinIterations; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    for (;;) {
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = sequence.load(std::memory_order_seq_cst);
      if (ready()) {
        sleepers.fetch_sub(1, std::memory_order_seq_cst);
        return true;
      }
      const int64_t nanos = deadline.NanosLeft(sliceNanos);
      timespec timeout{static_cast<time_t>(nanos / 1'000'000'000),
                       static_cast<long>(nanos % 1'000'000'000)};
      if (nanos > 0) {
        syscall(SYS_futex, reinterpret_cast<uint32_t*>(&sequence), FUTEX_WAIT, seen, &timeout,
                nullptr, 0);
      }
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (ready()) return true;
      if (deadline.Passed()) return false;
      onSlice();
    }
  }

  template <class Ready>
  bool Wait(Ready&& ready, const Deadline& deadline) {
    return Wait(ready, deadline, [] {});
  }
};

}  // namespace shm
}  // namespace collops
