// The joining half of the lccl rendezvous (process_rendezvous.h): a rank other than 0 connects to
// rank 0's claim socket, says who it is, and takes the segment and its peers' pidfds from the
// answer.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "core/comm/shm/process_rendezvous.h"
#include "core/comm/shm/rendezvous_wire.h"
#include "core/comm/shm/socket_owner.h"

namespace collops {
namespace shm {
namespace {

/// How long a joining rank waits, after rank 0 closed its connection, for rank 0's pidfd to say
/// whether it exited: the kernel closes a dying process's sockets before it marks it exited.
/// Short, since a live rank 0 (an earlier communicator's rendezvous closing) costs all of it; a
/// later exit is caught by the checks on every attempt that follows (LastHost).
constexpr int kExitGraceMillis = 20;

/// The rank 0 that a joining rank last reached, whose connection then closed without an answer:
/// rank 0 of an earlier communicator closing its rendezvous (the same process opens the next one),
/// or a rank 0 that is dying. Checked on every later attempt, since the kernel closes a dying
/// process's sockets before its pidfd says it exited; unchecked, the attempts that follow find
/// its name free and wait for a rank 0 that will never come back.
struct LastHost {
  pid_t pid = 0;  ///< 0 until a rank 0 closed a connection
  UniqueFd pidfd;

  bool Reached() const { return pid > 0; }
  bool Exited(int graceMillis = 0) const {
    return Reached() && ProcessExited(pidfd, pid, graceMillis);
  }
};

[[noreturn]] void FailHostExited(const RendezvousSpec& spec, pid_t host) {
  Fail(ERROR_PEER_LOST, Describe(spec), ": rank 0 (pid ", host, ") exited during the rendezvous");
}

/// " of uid N" for the listener bound to `name`, or "" when the kernel does not say.
std::string ListenerUid(const std::string& name) {
  const std::optional<uid_t> uid = AbstractListenerUid(name);
  return uid ? Concat(" of uid ", *uid) : std::string();
}

/// Rank 0's name is held by a listener that accepted no connection until the deadline: its queue
/// stayed full.
[[noreturn]] void FailQueueFull(const RendezvousSpec& spec, const std::string& name) {
  const std::optional<uid_t> uid = AbstractListenerUid(name);
  const bool foreign = uid && *uid != geteuid();
  Fail(ERROR_TIMEOUT, Describe(spec), ": rank 0's rendezvous name is held by a socket",
       uid ? Concat(" of uid ", *uid) : std::string(), " that accepted no connection within ",
       spec.timeoutSeconds, " s (", spec.timeoutSource, "): its queue stayed full. ",
       foreign ? Concat("uid ", *uid, " is not this user (uid ", geteuid(),
                        "): another user's process holds the name; give this job another "
                        "COLLOPS_JOB_ID")
               : std::string("Rank 0 is stuck before accepting, or another process holds the "
                             "name"),
       "; this is rank ", spec.rank);
}

/// The process that listens on rank 0's name runs as another user: nothing is sent to it (the
/// hello names the job and the domain) and nothing it says is repeated.
[[noreturn]] void FailForeignHost(const RendezvousSpec& spec, const ucred& host) {
  Fail(ERROR_COMM_FAIL, Describe(spec), ": rank 0's rendezvous name is held by pid ", host.pid,
       " of uid ", host.uid, ", not by this user (uid ", geteuid(), "); rank ", spec.rank,
       " sent it nothing. Another user's process holds the name: give this "
       "job another COLLOPS_JOB_ID");
}

}  // namespace

RendezvousResult JoinRendezvous(const RendezvousSpec& spec, uid_t ownerUid) {
  const Deadline deadline = Deadline::After(spec.timeoutSeconds);
  const std::string name = ClaimSocketName(ownerUid, spec, 0);
  int backoffMicros = 200;
  LastHost last;
  for (;;) {
    // Non-blocking: a blocking connect() to a listener whose queue is full waits for room without
    // end (AF_UNIX has no connect timeout); this one fails with EAGAIN and is tried again.
    UniqueFd fd = NewSocket(/*nonBlocking=*/true);
    socklen_t length = 0;
    const sockaddr_un addr = AbstractAddress(name, &length);
    if (connect(fd.Get(), reinterpret_cast<const sockaddr*>(&addr), length) != 0) {
      const int error = errno;
      const bool queueFull = error == EAGAIN || error == EINPROGRESS;
      if (error != ECONNREFUSED && error != ENOENT && error != EINTR && !queueFull) {
        Fail(ERROR_COMM_FAIL, Describe(spec), ": cannot connect to rank 0: ", std::strerror(error));
      }
      if (last.Exited()) FailHostExited(spec, last.pid);
      if (deadline.Passed()) {
        if (queueFull) FailQueueFull(spec, name);
        if (last.Reached()) {
          Fail(ERROR_TIMEOUT, Describe(spec), ": rank 0 (pid ", last.pid, ") closed rank ",
               spec.rank, "'s connection without an answer and did not open the rendezvous again ",
               "within ", spec.timeoutSeconds, " s (", spec.timeoutSource,
               "); rank 0 may have failed: its own error says why");
        }
        Fail(ERROR_TIMEOUT, Describe(spec), ": rank 0 did not arrive within ", spec.timeoutSeconds,
             " s (", spec.timeoutSource, "); this is rank ", spec.rank, OtherRankSizesHere(spec));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(backoffMicros));
      backoffMicros = std::min(backoffMicros * 2, 50'000);
      continue;
    }
    // Who listens, before a byte is sent: the name is in a namespace every user may bind in.
    ucred host{};
    if (!PeerCredentials(fd.Get(), &host)) {
      Fail(ERROR_COMM_FAIL, Describe(spec), ": cannot read the credentials of the process",
           ListenerUid(name), " listening on rank 0's rendezvous name: ", std::strerror(errno));
    }
    if (host.uid != geteuid()) FailForeignHost(spec, host);
    UniqueFd hostPidfd = PeerPidfd(fd.Get(), host.pid);
    HelloWire hello{kWireMagic,
                    kWireVersion,
                    spec.rank,
                    spec.rankSize,
                    static_cast<uint32_t>(spec.jobKey.size()),
                    static_cast<uint32_t>(spec.domain.size())};
    std::string message(reinterpret_cast<const char*>(&hello), sizeof(hello));
    message += spec.jobKey + spec.domain;
    ReplyWire reply{};
    std::vector<UniqueFd> passed;
    // Rank 0 answers by its own deadline, which started no earlier than our connect.
    const Deadline replyDeadline = Deadline::After(spec.timeoutSeconds + 5);
    // The answer is read even when the hello could not be sent: a rank 0 that fails answers the
    // connections it has not accepted yet and closes them, possibly before their hello arrived.
    SendAll(fd.Get(), message.data(), message.size(), {}, &replyDeadline);
    IoResult io = RecvAll(fd.Get(), &reply, sizeof(reply), replyDeadline, &passed);
    if (io == IoResult::kTimeout) {
      Fail(ERROR_TIMEOUT, Describe(spec), ": rank 0 (pid ", host.pid, ") accepted rank ", spec.rank,
           " but never answered");
    }
    if (io == IoResult::kFdsDropped) FailDroppedFds(spec, host.pid);
    if (io == IoResult::kClosed) {
      // A rank-0 socket of an earlier communicator that was closing, or rank 0 died.
      last.pid = host.pid;
      last.pidfd = std::move(hostPidfd);
      if (last.Exited(kExitGraceMillis)) FailHostExited(spec, host.pid);
      if (deadline.Passed()) {
        Fail(ERROR_TIMEOUT, Describe(spec), ": rank 0 (pid ", host.pid,
             ") did not complete the rendezvous within ", spec.timeoutSeconds,
             " s; rank 0 may have failed: its own error says why");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (reply.magic != kWireMagic || reply.messageBytes > kMaxWireString) {
      Fail(ERROR_COMM_FAIL, Describe(spec), ": malformed answer from rank 0 (pid ", host.pid, ")");
    }
    std::string text(reply.messageBytes, '\0');
    RecvAll(fd.Get(), text.data(), text.size(), replyDeadline);
    if (reply.status != NO_ERROR) {
      throw Error(
          static_cast<Status>(reply.status),
          text.empty() ? Concat(Describe(spec), ": rank 0 refused rank ", spec.rank) : text);
    }
    UniqueFd memory = passed.empty() ? UniqueFd() : std::move(passed.front());
    if (reply.rankSize != spec.rankSize || !memory.Valid()) {
      Fail(ERROR_COMM_FAIL, Describe(spec), ": rank 0 (pid ", host.pid,
           ") answered without the shared segment");
    }
    RendezvousResult result;
    std::vector<int32_t> pids(spec.rankSize);
    io = RecvAll(fd.Get(), pids.data(), pids.size() * sizeof(int32_t), replyDeadline);
    if (io == IoResult::kOk)
      io = RecvPidfds(fd.Get(), spec.rankSize, replyDeadline, &result.pidfds);
    if (io == IoResult::kFdsDropped) FailDroppedFds(spec, host.pid);
    if (io != IoResult::kOk) {
      Fail(ERROR_PEER_LOST, Describe(spec), ": rank 0 (pid ", host.pid,
           ") went away during the rendezvous");
    }
    // Rank 0 sent the pids its namespace sees; ours may differ (0: not visible from rank 0).
    result.pids.assign(pids.begin(), pids.end());
    for (int r = 0; r < spec.rankSize; ++r) {
      const pid_t local = result.pidfds[r].Valid() ? LocalPid(result.pidfds[r].Get()) : -1;
      if (local >= 0) result.pids[r] = local;
    }
    result.pids[spec.rank] = getpid();
    result.memory = std::move(memory);
    return result;
  }
}

}  // namespace shm
}  // namespace collops
