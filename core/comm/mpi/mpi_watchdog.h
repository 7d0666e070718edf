// The "mpi" backend's answer to COLLOPS_TIMEOUT. A blocking MPI collective cannot be cancelled
// or timed out: a rank that never makes the matching call (or is stuck before it) leaves every
// other rank blocked forever. So each call is watched: one that has not returned within
// COLLOPS_TIMEOUT seconds makes the watchdog print what was blocked (op, rank, seconds) and end
// the process with exit code 124, and mpirun then ends the job, as torch's NCCL watchdog does. A
// rank that dies needs none of this: mpirun ends the job by itself. Internal header.
#pragma once

namespace collops {
namespace mpi {

/// Exit code of a process the watchdog ends.
constexpr int kWatchdogExitCode = 124;

/// Marks one blocking MPI call of `op` by rank `rank` of `size` in flight for its lifetime.
class CallWatch {
 public:
  CallWatch(const char* op, int rank, int size);
  ~CallWatch();
  CallWatch(const CallWatch&) = delete;
  CallWatch& operator=(const CallWatch&) = delete;

 private:
  int slot_;
};

}  // namespace mpi
}  // namespace collops
