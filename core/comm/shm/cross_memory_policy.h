// Whether lccl moves large pieces by process_vm_readv/writev (one kernel copy) or through the
// shared slots (two user copies), as rank 0 decides it for the whole communicator.
//
// The kernel's copy is not equally fast everywhere. On the Xeon of 2026-11-24 a 1 MiB
// process_vm_readv took 54 us against 45 us for a memcpy; on the AMD EPYC VM of 2026-11-25,
// 97-129 us against 40-52 us, 2.5-3x. With a CPU per rank the single copy still pays there (it
// saves a round and the copies of different ranks overlap: AllGather R=2 1 MiB 82-98 vs 196 us
// staged). With more ranks than CPUs, every copy competes for the same CPUs, so the total work
// decides, and one kernel copy is more work than two user copies once it costs more than two:
// AllToAllV R=4 on 2 CPUs, us, cma vs staged, 256 KiB 107-169 vs 50-65, 1 MiB 414-480 vs
// 157-227; AllReduce 1 MiB 528-636 vs 295-303 (collops-bench, bound, medians).
//
// AllReduce is the exception even with a CPU per rank: its cma moves every slice with two kernel
// copies (the peers' parts in, the result out), where the staged rsag makes three user copies, so
// it trades more per byte than AllGather's single copy does. On the Xeon (ratio 1.6-2.0) cma won
// at every size up to 16 MiB (R=2, 1 MiB 80-84 vs rsag 161-166 us, 16 MiB 1.92 vs 2.83 ms); on
// the EPYC VM of 2026-11-28 (ratio 2.25-2.7) it lost from 1 MiB up (1 MiB 111-137 vs 96 us,
// 16 MiB 4.6-5.1 vs 2.8-3.0 ms; OpenMPI 150 us and 7.2 ms) and tied below.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace collops {
namespace shm {

/// Pieces from this size up move by process_vm_readv/writev where that is allowed and pays.
constexpr uint64_t kCrossMemoryMinBytes = 16 << 10;
/// With more ranks than CPUs, the kernel copy must cost less than this many user copies.
constexpr double kOversubscribedMaxKernelCopyCost = 2.0;
/// AllReduce takes cma only where the kernel copy costs at most this many user copies: between
/// the two machines measured (above), where either choice costs about the same.
constexpr double kAllReduceMaxKernelCopyCost = 2.2;

/// How many times as long the kernel takes to copy 1 MiB of ordinary memory by process_vm_readv
/// (this process reading itself: the same page pinning and copy as reading a peer) as CopyBytes
/// takes; the best of 5 of each, interleaved, about 1 ms in all. Infinite when the call is refused.
double KernelCopyCostRatio();

struct CrossMemoryPolicy {
  /// The smallest piece that moves by process_vm_readv/writev; 0 for none.
  uint64_t minBytes = 0;
  /// Whether AllReduce's automatic rule may take cma.
  bool allReduce = false;
};

/// `configured` (COLLOPS_SHM_CMA_BYTES), when set, is the threshold for every collective,
/// AllReduce included, and nothing is measured. Else `kernelCopyCostRatio()` is measured once:
/// none at all when `oversubscribed` and it exceeds kOversubscribedMaxKernelCopyCost, else
/// kCrossMemoryMinBytes; AllReduce only where it is at most kAllReduceMaxKernelCopyCost.
CrossMemoryPolicy ChooseCrossMemoryPolicy(std::optional<uint64_t> configured, bool oversubscribed,
                                          const std::function<double()>& kernelCopyCostRatio);

}  // namespace shm
}  // namespace collops
