// Whether lccl moves large pieces by process_vm_readv/writev (one kernel copy) or through the
// shared slots (two user copies), as rank 0 decides it for the whole communicator.
//
// The kernel's copy is not equally fast on every machine, so rank 0 measures it at creation. With
// a CPU per rank the single copy pays even where it costs more than two user copies (it saves a
// round, and the copies of different ranks overlap), but not for pieces whose staged copies stay
// in one core's L2 cache once it costs more than 3.5. With more ranks than CPUs every copy competes
// for the same CPUs, the total work decides, and one kernel copy is more work than two user copies
// once it costs more than two. AllReduce's "cma" moves every slice with two kernel copies (the
// peers' parts in, the result out) where the staged "rsag" makes three user copies, so it needs a
// cheaper kernel copy than the others. The thresholds are in shm_policy.h; the measurements behind
// them in docs/performance.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "core/comm/shm/shm_policy.h"

namespace collops {
namespace shm {

/// How many times as long the kernel takes to copy 1 MiB of ordinary memory (4 KiB pages mapped
/// for the purpose) by process_vm_readv (this process reading itself: the same page pinning and
/// copy as reading a peer) as CopyBytes takes; the best of 7 kernel copies against the best of
/// 21 user copies, interleaved (about a millisecond, cheap beside a rendezvous). Infinite when
/// the call is refused or the pages cannot be mapped.
double KernelCopyCostRatio();

struct CrossMemoryPolicy {
  /// The smallest piece that moves by process_vm_readv/writev; 0 for none.
  uint64_t minBytes = 0;
  /// Whether AllReduce's automatic rule may take cma.
  bool allReduce = false;
  /// The smallest input or piece the automatic rules of AllGather(V), Broadcast and AllToAllV
  /// move that way (ShmPolicy::crossMemoryPieceMinBytes).
  uint64_t pieceMinBytes = 0;
};

/// `configured` (COLLOPS_SHM_CMA_BYTES), when set, is the threshold for every collective,
/// AllReduce included, and nothing is measured. Else `kernelCopyCostRatio()` is measured once:
/// none at all when `oversubscribed` and it exceeds kOversubscribedMaxKernelCopyCost, else
/// kCrossMemoryMinBytes; AllReduce only where it is at most kAllReduceMaxKernelCopyCost; the
/// pieces of the other automatic rules from kCrossMemoryMinBytes where it is at most
/// kInCacheMaxKernelCopyCost, else from `l2Bytes` (one core's L2 cache; kMinChunkBytes when 0).
CrossMemoryPolicy ChooseCrossMemoryPolicy(std::optional<uint64_t> configured, bool oversubscribed,
                                          uint64_t l2Bytes,
                                          const std::function<double()>& kernelCopyCostRatio);

}  // namespace shm
}  // namespace collops
