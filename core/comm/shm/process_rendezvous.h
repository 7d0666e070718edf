// Rendezvous of the multi-process lccl backend: the ranks of one (job key, commDomain, rankSize)
// find each other on this host without a launcher, and rank 0 hands them the shared segment.
//
// Every rank first *claims* its rank by binding a Linux abstract unix socket named from
// (uid, job key, commDomain, rankSize, rank) and keeps it for the communicator's lifetime.
// Abstract names vanish with the process (no file, no residue, even after SIGKILL) and belong to
// the network namespace. A second process claiming the same rank gets EADDRINUSE; it then
// connects to the holder, reads the holder's pid with SO_PEERCRED and fails naming it.
// Rank 0's claim socket is also the rendezvous point: every other rank connects, says who it is,
// and rank 0 checks the peer's uid with SO_PEERCRED and, once every rank is there, answers each
// with the memfd and every rank's pidfd (SCM_RIGHTS) and the pids of all ranks — or with the one
// error that ends the rendezvous (a missing rank after the timeout, a refused peer, no memory), so
// every rank fails with the same message.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "core/comm/shm/process_fd.h"

namespace collops {
namespace shm {

struct RendezvousSpec {
  std::string jobKey;  ///< JobKeyFromEnv() normally
  std::string domain;  ///< commDomain
  int rank = 0;
  int rankSize = 0;
  double timeoutSeconds = 300;  ///< how long rank 0 waits for the others (and they for it)
  const char* timeoutSource = "COLLOPS_TIMEOUT";  ///< where timeoutSeconds came from
};

/// COLLOPS_JOB_ID, else "MASTER_ADDR:MASTER_PORT" when both are set, else the launcher's job
/// ("pmix:<PMIX_NAMESPACE>", "slurm:<SLURM_JOB_ID>.<SLURM_STEP_ID>"), else this process's group
/// ("pgid:<pid namespace inode>:<process group id>"): only ranks one program started share it.
std::string JobKeyFromEnv();

/// What every claim of the job and domain of `spec` for the user `uid` starts with:
/// "collops-lccl:u<uid>:<job hash>:<domain hash>:"; ClaimSocketName adds "n<rankSize>:r<rank>".
std::string ClaimSocketPrefix(uid_t uid, const RendezvousSpec& spec);

/// The abstract socket name (without the leading NUL) that holds `rank` of the job described by
/// `spec` for the user `uid`.
std::string ClaimSocketName(uid_t uid, const RendezvousSpec& spec, int rank);

struct RendezvousResult {
  UniqueFd memory;  ///< the segment's memfd (rank 0 keeps the one it created)
  /// Pid of every rank, by rank, as this process's pid namespace sees it: 0 for a rank in a pid
  /// namespace this one cannot see (a container sharing the host's network but not its pids).
  std::vector<pid_t> pids;
  /// A pidfd of every other rank, by rank (invalid for this rank, and where the kernel has no
  /// pidfds): tells of its exit in any pid namespace. Rank 0 gets them from the rendezvous
  /// sockets and hands them to every rank with its answer.
  std::vector<UniqueFd> pidfds;
  UniqueFd claim;  ///< holds this rank's name until the communicator is destroyed
};

/// Rank 0 calls it once every rank has arrived, to create the segment (a rank 0 waiting alone
/// holds no shared memory); may throw Error, which every rank then reports.
using SegmentMaker = std::function<UniqueFd()>;

/// Claims spec.rank and meets the other ranks. Throws Error: ERROR_TIMEOUT naming the missing
/// ranks, ERROR_COMM_FAIL for a clash or a refused peer (naming the other process), ERROR_PEER_LOST
/// when rank 0 dies meanwhile, or whatever `makeSegment` threw.
RendezvousResult Rendezvous(const RendezvousSpec& spec, const SegmentMaker& makeSegment);

/// True when the process is known to have exited: by its pidfd when valid, else by its pid in this
/// namespace (unknown, so false, when the pid is not positive). Waits up to `waitMillis` ms for
/// the exit (a process's sockets close before its pidfd says it exited).
bool ProcessExited(const UniqueFd& pidfd, pid_t pid, int waitMillis = 0);

/// The joining half alone, connecting to the rendezvous of user `ownerUid` (no claim). Lets a test
/// prove that a process of another uid is refused by rank 0 itself.
RendezvousResult JoinRendezvous(const RendezvousSpec& spec, uid_t ownerUid);

}  // namespace shm
}  // namespace collops
