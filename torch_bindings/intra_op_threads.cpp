#include "intra_op_threads.h"

#include <ATen/Parallel.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace collops {

bool ShareCpusWithLocalRanks(int ranksOnThisHost) {
  if (ranksOnThisHost <= 1) return false;
  const char* chosen = std::getenv("OMP_NUM_THREADS");
  if (chosen != nullptr && *chosen != '\0') return false;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  const int cpus = CPU_COUNT(&allowed);
  if (cpus < sysconf(_SC_NPROCESSORS_ONLN)) return false;
  const int share = std::max(1, cpus / ranksOnThisHost);
  const int current = at::get_num_threads();
  if (current <= share) return false;
  at::set_num_threads(share);
  static std::once_flag said;
  std::call_once(said, [&] {
    std::fprintf(stderr,
                 "collops: %d ranks share this host's %d CPUs: torch intra-op threads %d -> %d "
                 "per rank, as torchrun does (set OMP_NUM_THREADS to choose)\n",
                 ranksOnThisHost, cpus, current, share);
  });
  return true;
}

}  // namespace collops
