// The Transport's access to the peers' buffers: ranges of their heaps in the segment, and their
// processes' memory by process_vm_readv/writev ("cma"), which the creation probe allows or not.
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/comm/shm/peer_checks.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {
namespace {

uint64_t CrossMemoryProbe(pid_t pid) { return 0x636d612d70726f62ULL ^ static_cast<uint64_t>(pid); }

/// Yama's ptrace_scope 1 (Ubuntu's default, and every container's on such a host) lets a process
/// read another's memory only when it is the other's ancestor or was named by it, so sibling
/// ranks (torchrun's, mpirun's) would be refused and every byte staged twice. As OpenMPI's vader
/// BTL does there, each rank names any process as its ptracer: that is scope 0's rule for this
/// process (same user, dumpable), no looser. Only at scope 1: at 2 and 3 naming one does not
/// help. Called on every creation, not once, because a forked child is not named.
void LetSameUserPeersReadThisProcess() {
  std::ifstream file("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (file >> scope && scope == 1) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

}  // namespace

uint8_t* Transport::PeerHeap(int owner, int64_t offset, uint64_t bytes) {
  const uint64_t heapBytes = segment_.HasHeaps() ? segment_.HeapBytes() : 0;
  if (!HeapRangeFits(offset, bytes, heapBytes)) {
    Break(ERROR_COMM_FAIL, owner,
          Concat(Where(), "rank ", owner, " published heap range [", offset, ", +", bytes,
                 ") outside its ", heapBytes, "-byte heap (memory corruption?)"));
  }
  return segment_.Heap(owner) + offset;
}

bool Transport::ProbeCrossMemory() {
  // Every rank reads every peer's word and writes a word of its own into every peer's probe, and
  // all use process_vm_readv/writev only when all could: the kernel refuses them without ptrace
  // rights over the peer (a Yama ptrace_scope, a peer that is not dumpable reached by a rank
  // without CAP_SYS_PTRACE, seccomp), which may differ from pair to pair, and a piece must move
  // the same way on both sides. Two rounds, once per communicator (R <= 64); the segment's policy
  // is rank 0's, so all ranks skip them alike.
  if (size_ == 1 || Policy().crossMemoryMinBytes == 0 || !segment_.HasDirectTables()) {
    return false;
  }
  op_ = "create";
  LetSameUserPeersReadThisProcess();  // before the round after which the peers read
  // [0]: what the peers read; [1 + r]: where rank r writes.
  probeWords_.assign(1 + size_, 0);
  probeWords_[0] = CrossMemoryProbe(getpid());
  RankControl& me = segment_.Rank(rank_);
  me.probeAddress.store(reinterpret_cast<uintptr_t>(probeWords_.data()), std::memory_order_relaxed);
  Round();
  bool reached = true;
  for (int r = 0; r < size_ && reached; ++r) {
    if (r == rank_) continue;
    const uintptr_t words = segment_.Rank(r).probeAddress.load(std::memory_order_relaxed);
    uint64_t seen = 0;
    iovec local{&seen, sizeof seen};
    iovec remote{reinterpret_cast<void*>(words), sizeof seen};
    reached =
        process_vm_readv(pids_[r], &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof seen) &&
        seen == CrossMemoryProbe(pids_[r]);
    uint64_t mine = probeWords_[0];
    iovec source{&mine, sizeof mine};
    iovec target{reinterpret_cast<void*>(words + (1 + rank_) * sizeof(uint64_t)), sizeof mine};
    reached = reached && process_vm_writev(pids_[r], &source, 1, &target, 1, 0) ==
                             static_cast<ssize_t>(sizeof mine);
  }
  me.probeReached.store(reached ? 1 : 0, std::memory_order_relaxed);
  Round();
  bool all = true;
  for (int r = 0; r < size_; ++r) {
    all = all && segment_.Rank(r).probeReached.load(std::memory_order_relaxed) != 0;
  }
  return all;
}

void Transport::CopyCrossMemory(CrossMemoryDirection direction, int owner, uint8_t* local,
                                uint64_t address, size_t bytes) {
  const bool read = direction == CrossMemoryDirection::kRead;
  size_t done = 0;
  while (done < bytes) {
    iovec mine{local + done, bytes - done};
    iovec theirs{reinterpret_cast<void*>(static_cast<uintptr_t>(address + done)), bytes - done};
    const ssize_t n = read ? process_vm_readv(pids_[owner], &mine, 1, &theirs, 1, 0)
                           : process_vm_writev(pids_[owner], &mine, 1, &theirs, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = n == 0 ? EFAULT : errno;
    if (err == EINTR) continue;
    if (err == ESRCH) {
      // Exiting: its memory is gone before its pidfd reports the exit. An owner that leaves in
      // the middle of a call has broken the communicator first (a peer of its died): report that.
      CheckPeer(owner);
      Break(ERROR_PEER_LOST, owner, Concat(Where(), "rank ", owner, " (", PidOf(owner), ") died"));
    }
    // A rank that failed in this call (a peer of its died) publishes that before it returns and
    // may then free its buffers, and a dying owner's pages go before its exit shows: give either
    // 200 ms to show, and report the failure that started it, as any wait would.
    for (int i = 0; i < 20; ++i) {
      CheckPeer(owner);
      usleep(10'000);
    }
    Break(ERROR_COMM_FAIL, owner,
          Concat(Where(), read ? "process_vm_readv" : "process_vm_writev", " of ", bytes - done,
                 " bytes ", read ? "from" : "to", " rank ", owner, " (", PidOf(owner),
                 ") failed: ", std::strerror(err)));
  }
}

}  // namespace shm
}  // namespace collops
