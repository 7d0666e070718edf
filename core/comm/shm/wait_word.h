// WaitWord: a futex to sleep on, after SpinThenYield has spun and yielded within a WaitBudget.
// Used by the thread and process shared-memory communicators. Lives in ordinary or shared memory
// (it is a plain pair of 32-bit atomics and uses non-private futex calls, so waiters and wakers may
// be different processes).
//
// Why spin first: waking a sleeping thread costs a futex wake and a trip through the scheduler, a
// spinning waiter sees the peer's post within nanoseconds; why sleep later: with more ranks than
// cores a spinning waiter steals the core the peer it waits for needs.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

#include "collops/backend.h"
#include "core/comm/shm/shm_policy.h"

namespace collops {
namespace shm {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// How long a waiter keeps its CPU before it sleeps on a WaitWord: it spins (no system call) for
/// spinNanos, then yields the CPU between checks for yieldNanos more.
struct WaitBudget {
  int64_t spinNanos = 0;
  int64_t yieldNanos = 0;

  /// The budgets of shm_policy.h: with a CPU per rank spin, then yield; with more ranks than
  /// CPUs a spinning waiter delays the very rank it waits for, so yield at once, and sleep soon.
  static WaitBudget Default(bool oversubscribed) {
    return oversubscribed ? WaitBudget{0, kOversubscribedYieldNanos}
                          : WaitBudget{kSpinNanos, kYieldNanos};
  }
};

inline int64_t MonotonicNanos() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

/// Checks ready() for `budget`, then returns false and the caller sleeps. Before every burst of
/// spinning it calls yieldHere(cpu) with the CPU it runs on; that publishes it and tells whether a
/// rank this waiter needs last ran on that very CPU: then that rank is queued behind the waiter
/// (the host is busy or the scheduler stacked the ranks) and only sched_yield lets it run; a pure
/// spin would make every round wait out the whole budget whenever two ranks share a core.
template <class Ready, class YieldHere>
bool SpinThenYield(Ready&& ready, const WaitBudget& budget, YieldHere&& yieldHere) {
  if (ready()) return true;
  const int64_t start = MonotonicNanos();
  for (int64_t now = start; now - start < budget.spinNanos + budget.yieldNanos;
       now = MonotonicNanos()) {
    if (now - start < budget.spinNanos && !yieldHere(sched_getcpu())) {
      for (int i = 0; i < 32; ++i) {
        if (ready()) return true;
        CpuRelax();
      }
    } else {
      sched_yield();
      if (ready()) return true;
    }
  }
  return ready();
}

/// A point in time after which a wait gives up.
class Deadline {
 public:
  /// `seconds` above kMaxCommTimeoutSeconds count as that: a longer duration would overflow the
  /// clock's nanoseconds into a deadline in the past.
  static Deadline After(double seconds) {
    Deadline d;
    d.at_ = std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(std::min(seconds, kMaxCommTimeoutSeconds)));
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

  /// Sleeps until ready() is true (callers spin first: SpinThenYield); false when `deadline`
  /// passes first. Between sleeps (at most `sliceNanos` each) it calls onSlice(), which may throw
  /// (e.g. ERROR_PEER_LOST).
  template <class Ready, class OnSlice>
  bool Wait(Ready&& ready, const Deadline& deadline, OnSlice&& onSlice,
            int64_t sliceNanos = 20'000'000) {
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
};

}  // namespace shm
}  // namespace collops
