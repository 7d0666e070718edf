// What the process fault tests share: memory the forked ranks and the parent both see (where
// ranks report what they saw to the parent), and a job whose rank is SIGKILLed in the middle of
// collectives.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <string>

#include "op_harness.h"  // Contains, which every file of these tests uses

namespace collops {
namespace testing {

/// Memory shared by the test's children and the parent (results the children report).
template <class T>
T* SharedArray(size_t n) {
  void* p = mmap(nullptr, sizeof(T) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return static_cast<T*>(p);
}

/// What the ranks of KillMidCollective loop on.
enum class Loop {
  kAllReduce,             ///< 1 MiB AllReduces on ordinary memory, staged (COLLOPS_SHM_CMA_BYTES=0)
  kCrossMemoryAllReduce,  ///< the same by process_vm_readv/writev: peers read the victim's input
                          ///< and write its output when it dies
  kCrossMemorySendRecv,   ///< 1 MiB Send/Recv between ranks 2k and 2k+1 (the receiver reads the
                          ///< sender's buffer with process_vm_readv); R even
  kSharedAllToAllV,  ///< 1 MiB-per-peer AllToAllVs on AllocateShared memory: peers read and write
                     ///< the victim's heap directly when it dies
  kCrossMemoryAllToAllV,  ///< the same on ordinary memory: peers read the victim's process with
                          ///< process_vm_readv (where the kernel allows it) when it dies
};

/// Every rank loops on `loop`; once all have done one call, the parent SIGKILLs `victim`.
/// Survivors must report ERROR_PEER_LOST naming it, fast, and fail fast afterwards.
void KillMidCollective(int size, int victim, Loop loop = Loop::kAllReduce);

}  // namespace testing
}  // namespace collops
