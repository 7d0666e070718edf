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

/// How many times as long the kernel takes to copy 1 MiB of ordinary memory by process_vm_readv
/// (this process reading itself: the same page pinning and copy as reading a peer) as CopyBytes
/// takes; the best of 5 of each, interleaved, about 1 ms in all. Infinite when the call is refused.
double KernelCopyCostRatio();

/// The smallest piece that moves by process_vm_readv/writev, 0 for none: `configured`
/// (COLLOPS_SHM_CMA_BYTES) when set; else none when `oversubscribed` and `kernelCopyCostRatio()`
/// exceeds kOversubscribedMaxKernelCopyCost; else kCrossMemoryMinBytes. The ratio is measured
/// only when it decides.
uint64_t ChooseCrossMemoryMinBytes(std::optional<uint64_t> configured, bool oversubscribed,
                                   const std::function<double()>& kernelCopyCostRatio);

}  // namespace shm
}  // namespace collops
