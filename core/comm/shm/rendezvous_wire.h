// The wire of the lccl rendezvous (process_rendezvous.h): the messages rank 0 and the joining
// ranks exchange over an abstract unix socket, and the socket calls both sides share.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collops/status.h"
#include "core/comm/shm/process_fd.h"
#include "core/comm/shm/process_rendezvous.h"
#include "core/comm/shm/wait_word.h"

namespace collops {
namespace shm {

constexpr uint32_t kWireMagic = 0x6c63636c;  // "lccl"
constexpr uint32_t kWireVersion = 2;         // 2: the answer carries every rank's pidfd
constexpr uint32_t kMaxWireString = 4096;
/// Descriptors per message; the kernel takes at most SCM_MAX_FD (253).
constexpr size_t kFdsPerMessage = 250;

/// A joining rank's first message, followed by the job key and the domain.
struct HelloWire {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t rankSize;
  uint32_t keyBytes;
  uint32_t domainBytes;
};

/// Rank 0's answer, followed by the message (an error; "" on success), then on success every
/// rank's pid (int32 each) with the segment's memfd, then SendPidfds.
struct ReplyWire {
  uint32_t magic;
  int32_t status;
  int32_t rankSize;
  uint32_t messageBytes;
};

/// kFdsDropped: descriptors were passed but the kernel dropped them (MSG_CTRUNC).
enum class IoResult { kOk, kClosed, kTimeout, kFdsDropped };

/// "lccl rendezvous (job 'k', domain 'd', 4 ranks)", how messages start.
std::string Describe(const RendezvousSpec& spec);

/// The address of the abstract unix socket `name` (without its leading NUL).
sockaddr_un AbstractAddress(const std::string& name, socklen_t* length);

/// "RLIMIT_NOFILE = 1024, see ulimit -n", for messages about a full descriptor table.
std::string OpenFileLimit();

/// Why a call that needed a new descriptor failed with `error`, naming the limit it hit.
std::string DescriptorError(int error);

/// A unix stream socket; throws ERROR_COMM_FAIL naming the descriptor limit it hit.
UniqueFd NewSocket(bool nonBlocking = false);

/// The pid, uid and gid of the process at the other end of `fd`, as the kernel recorded them at
/// connect (SO_PEERCRED).
bool PeerCredentials(int fd, ucred* cred);

/// Sends `bytes`, the descriptors `passFds` (at most kFdsPerMessage) riding with the first ones.
/// On a non-blocking socket, waits for room until `deadline` (false when it passes).
bool SendAll(int fd, const void* data, size_t bytes, const std::vector<int>& passFds = {},
             const Deadline* deadline = nullptr);

/// Reads exactly `bytes`; descriptors passed with them are appended to *receivedFds (closed when
/// it is null).
IoResult RecvAll(int fd, void* data, size_t bytes, const Deadline& deadline,
                 std::vector<UniqueFd>* receivedFds = nullptr);

/// Sends a ReplyWire with `message`, then `pids`; `passFds` ride with it.
void SendReply(int fd, Status status, const std::string& message, const std::vector<pid_t>& pids,
               const std::vector<int>& passFds = {});

/// After a successful answer: which ranks' pidfds follow (one byte per rank; never the
/// receiver's own, nor one rank 0 could not get), then those pidfds in rank order, in messages
/// of a 4-byte count each carrying up to kFdsPerMessage of them.
void SendPidfds(int fd, int receiver, const std::vector<UniqueFd>& pidfds);

/// The receiving half of SendPidfds: pidfds by rank (invalid where none came). kClosed when rank
/// 0 went away or sent something else.
IoResult RecvPidfds(int fd, int rankSize, const Deadline& deadline, std::vector<UniqueFd>* pidfds);

/// The kernel drops passed descriptors (MSG_CTRUNC) when the receiver has no room for them in its
/// descriptor table; without this message the rank would only see rank 0 "never answer".
[[noreturn]] void FailDroppedFds(const RendezvousSpec& spec, pid_t host);

/// A pidfd of `pid` (-1 when the kernel has none or the pid is not positive).
int OpenPidfd(pid_t pid);

/// A pidfd of the process at the other end of the unix socket `fd`, whose credentials gave
/// `pid`. A pidfd names that process in any pid namespace; a pid number names it only in ours,
/// and SO_PEERCRED gives 0 for a process our namespace cannot see (ranks in containers that share
/// the host's network but not its pids). SO_PEERPIDFD (Linux 6.5) where the kernel has it, else
/// a pidfd of `pid`; invalid when neither works.
UniqueFd PeerPidfd(int fd, pid_t pid);

/// The pid of the process `pidfd` names, as this process's /proc sees it: 0 when that process is
/// outside our pid namespace, -1 when it has exited or /proc does not say.
pid_t LocalPid(int pidfd);

/// For a rendezvous that timed out: ranks of the same job and domain that hold a claim on this
/// host under another rankSize, read from the abstract socket table (/proc/net/unix), as a
/// clause to append; "" when there are none. The claim names carry rankSize, so ranks that
/// disagree on it never meet and each would only see the other as missing. Not a failure by
/// itself: a communicator of another size may rightly live in the same domain.
std::string OtherRankSizesHere(const RendezvousSpec& spec);

}  // namespace shm
}  // namespace collops
