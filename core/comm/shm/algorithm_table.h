// The algorithms of the lccl engines, as rows of the algorithm table (collops/algorithms.h), and
// the COLLOPS_ALGO_<COLLECTIVE> knobs that force the process engine's. The size rules that pick
// them automatically are in shm_policy.h.
#pragma once

#include <string>

#include "core/comm/shm/shm_policy.h"

namespace collops {
namespace shm {

/// "AllReduce", ... as the table names the collective.
const char* CollectiveName(Collective collective);
/// "oneshot", ... as COLLOPS_ALGO_* takes it; "auto" for kAlgoAuto.
const char* AlgoName(Algo algo);
/// "COLLOPS_ALGO_ALLREDUCE", ...
std::string KnobOf(Collective collective);

/// COLLOPS_ALGO_<collective> from this process's environment: kAlgoAuto when unset, empty or
/// "auto". Throws ERROR_INVALID_PARAM naming the variable and the names it takes for any other
/// value.
Algo ForcedFromEnv(Collective collective);

/// A forced algorithm that cannot run this call: throws ERROR_INVALID_PARAM with `where` (the
/// call's message prefix), the knob, the algorithm and `why`.
[[noreturn]] void FailForced(const std::string& where, Collective collective, Algo algo,
                             const std::string& why);

/// Why "cma" cannot run on a communicator whose creation probe did not allow it.
constexpr const char* kNoCrossMemory =
    "process_vm_readv/writev is not used between these ranks (the kernel refused it at "
    "creation, COLLOPS_SHM_CMA_BYTES=0, more than 64 ranks, or the kernel copy measured too slow "
    "for ranks that outnumber the CPUs)";
/// Why "heap" cannot run on a communicator without heaps.
constexpr const char* kNoHeaps =
    "this communicator has no heaps (COLLOPS_SHM_HEAP_BYTES=0 or more than 64 ranks)";

}  // namespace shm
}  // namespace collops
