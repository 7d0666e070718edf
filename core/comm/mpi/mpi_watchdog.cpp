#include "core/comm/mpi/mpi_watchdog.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "collops/backend.h"

namespace collops {
namespace mpi {
namespace {

using Clock = std::chrono::steady_clock;

struct Call {
  bool active = false;
  const char* op = "";
  int rank = 0;
  int size = 0;
  Clock::time_point start;
};

/// The calls in flight (one slot each, reused) and the thread that watches them. Never
/// destroyed: the thread may still be running while the process exits.
class Watchdog {
 public:
  int Begin(const char* op, int rank, int size) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) {
      timeout_ = std::chrono::duration<double>(CommTimeoutSeconds());
      std::thread([this] { Run(); }).detach();
      started_ = true;
    }
    size_t slot = 0;
    while (slot < calls_.size() && calls_[slot].active) ++slot;
    if (slot == calls_.size()) calls_.emplace_back();
    calls_[slot] = Call{true, op, rank, size, Clock::now()};
    return static_cast<int>(slot);
  }
  void End(int slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_[slot].active = false;
  }

 private:
  [[noreturn]] void Run() {
    // Checks a few times per timeout, at least once a second, so it fires close to the deadline.
    const auto period = std::min<Clock::duration>(
        std::chrono::seconds(1), std::chrono::duration_cast<Clock::duration>(timeout_ / 4));
    for (;;) {
      std::this_thread::sleep_for(period);
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Call& call : calls_) {
        const std::chrono::duration<double> blocked = Clock::now() - call.start;
        if (!call.active || blocked < timeout_) continue;
        std::fprintf(stderr,
                     "collops: mpi %s (rank %d of %d): not complete after %.0f s "
                     "(COLLOPS_TIMEOUT=%.0f): a rank did not make the matching call, or is stuck "
                     "before it. MPI cannot cancel a blocked call, so this process exits with "
                     "code %d and mpirun ends the job.\n",
                     call.op, call.rank, call.size, blocked.count(), timeout_.count(),
                     kWatchdogExitCode);
        std::fflush(stderr);
        _exit(kWatchdogExitCode);
      }
    }
  }

  std::mutex mutex_;
  bool started_ = false;
  std::chrono::duration<double> timeout_{300};
  std::vector<Call> calls_;
};

Watchdog& TheWatchdog() {
  static Watchdog* watchdog = new Watchdog;
  return *watchdog;
}

}  // namespace

CallWatch::CallWatch(const char* op, int rank, int size)
    : slot_(TheWatchdog().Begin(op, rank, size)) {}

CallWatch::~CallWatch() { TheWatchdog().End(slot_); }

}  // namespace mpi
}  // namespace collops
