// The CPUs of an lccl rank: how many it may run on (the policy's view) and COLLOPS_SHM_BIND's pin.
// The two go together because the pin narrows the affinity the count reads: a communicator
// created after another one pinned the thread must still count the CPUs the thread had before.
#pragma once

namespace collops {
namespace shm {

/// CPUs the calling thread may run on, counting those it had before BindToOwnCpu pinned it (while
/// the pin is still the one BindToOwnCpu set).
int CpusAvailable();

/// COLLOPS_SHM_BIND=1: pins the calling thread to the rank-th CPU of its own affinity set, as
/// mpirun does by default, when there are at least as many CPUs as ranks.
void BindToOwnCpu(int rank, int rankSize);

}  // namespace shm
}  // namespace collops
