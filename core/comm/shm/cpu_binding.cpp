#include "core/comm/shm/cpu_binding.h"

#include <sched.h>
#include <unistd.h>

namespace collops {
namespace shm {
namespace {

/// What BindToOwnCpu did to this thread: the CPU it pinned it to and how many CPUs the thread had
/// before (0: never pinned). Per thread, as the affinity is.
struct Pin {
  int cpu = -1;
  int cpusBefore = 0;
};
thread_local Pin tPin;

bool Affinity(cpu_set_t* set) {
  CPU_ZERO(set);
  return sched_getaffinity(0, sizeof(*set), set) == 0;
}

}  // namespace

int CpusAvailable() {
  cpu_set_t set;
  if (!Affinity(&set)) return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  // Still our pin: the ranks of this process's next communicator have the CPUs the thread had, or
  // the policy would see one CPU, take the ranks for oversubscribed and choose its protocol for
  // that (short one-shot range, waits that sleep at once, no process_vm_readv).
  if (tPin.cpusBefore > 0 && CPU_COUNT(&set) == 1 && CPU_ISSET(tPin.cpu, &set)) {
    return tPin.cpusBefore;
  }
  return CPU_COUNT(&set);
}

void BindToOwnCpu(int rank, int rankSize) {
  // Opt-in, because every thread started later inherits the pin (a torch process's intra-op
  // pool, say). Why at all: unbound ranks of a busy host are often stacked on one core by the
  // scheduler, and every round then costs a context switch.
  cpu_set_t allowed;
  if (!Affinity(&allowed)) return;
  if (rankSize > CPU_COUNT(&allowed)) return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != rank) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof(one), &one) == 0) tPin = {cpu, CPU_COUNT(&allowed)};
    return;
  }
}

}  // namespace shm
}  // namespace collops
