#include "core/comm/shm/process_rendezvous.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "collops/status.h"
#include "core/comm/shm/fork_guard.h"
#include "core/comm/shm/rank_list.h"
#include "core/comm/shm/wait_word.h"

namespace collops {
namespace shm {
namespace {

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5; older C libraries lack the name
#endif

constexpr uint32_t kWireMagic = 0x6c63636c;  // "lccl"
constexpr uint32_t kWireVersion = 2;         // 2: the answer carries every rank's pidfd
constexpr uint32_t kMaxWireString = 4096;
/// Room for the key in every message that names it (a refusal quotes key and domain), within
/// kMaxWireString.
constexpr size_t kMaxJobKeyBytes = 1024;
/// Descriptors per message; the kernel takes at most SCM_MAX_FD (253).
constexpr size_t kFdsPerMessage = 250;
/// Connections rank 0's claim socket queues before it accepts them.
constexpr int kListenBacklog = 128;
/// How long a joining rank waits, after rank 0 closed its connection, for rank 0's pidfd to say
/// whether it exited: the kernel closes a dying process's sockets before it marks it exited.
/// Short, since a live rank 0 (an earlier communicator's rendezvous closing) costs all of it; a
/// later exit is caught by the checks on every attempt that follows (LastHost).
constexpr int kExitGraceMillis = 20;

struct HelloWire {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t rankSize;
  uint32_t keyBytes;
  uint32_t domainBytes;
};

struct ReplyWire {
  uint32_t magic;
  int32_t status;
  int32_t rankSize;
  uint32_t messageBytes;
};

/// kFdsDropped: descriptors were passed but the kernel dropped them (MSG_CTRUNC).
enum class IoResult { kOk, kClosed, kTimeout, kFdsDropped };

uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ULL;
  return hash;
}

std::string Describe(const RendezvousSpec& spec) {
  return Concat("lccl rendezvous (job '", spec.jobKey, "', domain '", spec.domain, "', ",
                spec.rankSize, " ranks)");
}

sockaddr_un AbstractAddress(const std::string& name, socklen_t* length) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // sun_path[0] = '\0' makes the name abstract: no file, gone with the last socket.
  std::memcpy(addr.sun_path + 1, name.data(), std::min(name.size(), sizeof(addr.sun_path) - 1));
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

/// "RLIMIT_NOFILE = 1024, see ulimit -n", for messages about a full descriptor table.
std::string OpenFileLimit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  return Concat(
      "RLIMIT_NOFILE = ",
      limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(limit.rlim_cur),
      ", see ulimit -n");
}

/// Why a call that needed a new descriptor failed with `error`, naming the limit it hit.
std::string DescriptorError(int error) {
  if (error == EMFILE) return Concat(std::strerror(error), " (", OpenFileLimit(), ")");
  if (error == ENFILE) return Concat(std::strerror(error), " (the system-wide limit, fs.file-max)");
  return std::strerror(error);
}

UniqueFd NewSocket() {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.Valid()) Fail(ERROR_COMM_FAIL, "lccl: socket(AF_UNIX) failed: ", DescriptorError(errno));
  return fd;
}

bool PeerCredentials(int fd, ucred* cred) {
  socklen_t length = sizeof(*cred);
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &length) == 0;
}

/// Sends `bytes`, the descriptors `passFds` (at most kFdsPerMessage) riding with the first ones.
bool SendAll(int fd, const void* data, size_t bytes, const std::vector<int>& passFds = {}) {
  const char* p = static_cast<const char*>(data);
  bool withFds = !passFds.empty();
  alignas(cmsghdr) char control[CMSG_SPACE(kFdsPerMessage * sizeof(int))] = {};
  while (bytes > 0) {
    iovec iov{const_cast<char*>(p), bytes};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (withFds) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(passFds.size() * sizeof(int));
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(passFds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(cmsg), passFds.data(), passFds.size() * sizeof(int));
    }
    const ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    bytes -= static_cast<size_t>(sent);
    withFds = false;
  }
  return true;
}

/// Reads exactly `bytes`; descriptors passed with them are appended to *receivedFds (closed when
/// it is null).
IoResult RecvAll(int fd, void* data, size_t bytes, const Deadline& deadline,
                 std::vector<UniqueFd>* receivedFds = nullptr) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(deadline.NanosLeft(100'000'000) / 1'000'000));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (deadline.Passed()) return IoResult::kTimeout;
      continue;
    }
    iovec iov{p, bytes};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(kFdsPerMessage * sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return IoResult::kClosed;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed = -1;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        UniqueFd owned(passed);
        if (receivedFds != nullptr) receivedFds->push_back(std::move(owned));
      }
    }
    // Descriptors cut off are closed by the kernel: the answer is unusable.
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return receivedFds != nullptr ? IoResult::kFdsDropped : IoResult::kClosed;
    }
    p += got;
    bytes -= static_cast<size_t>(got);
  }
  return IoResult::kOk;
}

void SendReply(int fd, Status status, const std::string& message, const std::vector<pid_t>& pids,
               const std::vector<int>& passFds = {}) {
  ReplyWire reply{kWireMagic, status, static_cast<int32_t>(pids.size()),
                  static_cast<uint32_t>(message.size())};
  std::string payload(reinterpret_cast<const char*>(&reply), sizeof(reply));
  payload += message;
  for (pid_t pid : pids) payload.append(reinterpret_cast<const char*>(&pid), sizeof(int32_t));
  SendAll(fd, payload.data(), payload.size(), passFds);  // a peer that vanished learns nothing
}

/// After a successful answer: which ranks' pidfds follow (one byte per rank; never the
/// receiver's own, nor one rank 0 could not get), then those pidfds in rank order, in messages
/// of a 4-byte count each carrying up to kFdsPerMessage of them.
void SendPidfds(int fd, int receiver, const std::vector<UniqueFd>& pidfds) {
  std::string present(pidfds.size(), '\0');
  std::vector<int> passed;
  for (size_t r = 0; r < pidfds.size(); ++r) {
    if (static_cast<int>(r) == receiver || !pidfds[r].Valid()) continue;
    present[r] = 1;
    passed.push_back(pidfds[r].Get());
  }
  if (!SendAll(fd, present.data(), present.size())) return;
  for (size_t at = 0; at < passed.size(); at += kFdsPerMessage) {
    const std::vector<int> chunk(passed.begin() + at,
                                 passed.begin() + std::min(passed.size(), at + kFdsPerMessage));
    const uint32_t count = static_cast<uint32_t>(chunk.size());
    if (!SendAll(fd, &count, sizeof(count), chunk)) return;
  }
}

/// The receiving half of SendPidfds: pidfds by rank (invalid where none came). kClosed when rank
/// 0 went away or sent something else.
IoResult RecvPidfds(int fd, int rankSize, const Deadline& deadline, std::vector<UniqueFd>* pidfds) {
  std::string present(rankSize, '\0');
  IoResult io = RecvAll(fd, present.data(), present.size(), deadline);
  if (io != IoResult::kOk) return io;
  const size_t expected = static_cast<size_t>(std::count(present.begin(), present.end(), 1));
  std::vector<UniqueFd> received;
  while (received.size() < expected) {
    uint32_t count = 0;
    const size_t before = received.size();
    io = RecvAll(fd, &count, sizeof(count), deadline, &received);
    if (io != IoResult::kOk) return io;
    if (received.size() - before != count) return IoResult::kClosed;
  }
  if (received.size() != expected) return IoResult::kClosed;
  pidfds->clear();
  pidfds->resize(rankSize);
  size_t next = 0;
  for (int r = 0; r < rankSize; ++r) {
    if (present[r] == 1) (*pidfds)[r] = std::move(received[next++]);
  }
  return IoResult::kOk;
}

/// The kernel drops passed descriptors (MSG_CTRUNC) when the receiver has no room for them in its
/// descriptor table; without this message the rank would only see rank 0 "never answer".
[[noreturn]] void FailDroppedFds(const RendezvousSpec& spec, pid_t host) {
  Fail(ERROR_COMM_FAIL, Describe(spec), ": rank ", spec.rank,
       " could not take the descriptors rank 0 (pid ", host,
       ") passed it: the kernel dropped them, as it does when a process has reached its open-file "
       "limit (Too many open files; ",
       OpenFileLimit(), ")");
}

int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return pid > 0 ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1;
#else
  (void)pid;
  return -1;
#endif
}

/// A pidfd of the process at the other end of the unix socket `fd`, whose credentials gave
/// `pid`. A pidfd names that process in any pid namespace; a pid number names it only in ours,
/// and SO_PEERCRED gives 0 for a process our namespace cannot see (ranks in containers that share
/// the host's network but not its pids). SO_PEERPIDFD (Linux 6.5) where the kernel has it, else
/// a pidfd of `pid`; invalid when neither works.
UniqueFd PeerPidfd(int fd, pid_t pid) {
  int pidfd = -1;
  socklen_t length = sizeof(pidfd);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) == 0 && pidfd >= 0) {
    return UniqueFd(pidfd);
  }
  return UniqueFd(OpenPidfd(pid));
}

/// The pid of the process `pidfd` names, as this process's /proc sees it: 0 when that process is
/// outside our pid namespace, -1 when it has exited or /proc does not say.
pid_t LocalPid(int pidfd) {
  std::ifstream info(Concat("/proc/self/fdinfo/", pidfd));
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("Pid:", 0) == 0) return static_cast<pid_t>(std::atol(line.c_str() + 4));
  }
  return -1;
}

/// Binds `name` and listens, or fails naming the process that holds it. Returns an invalid fd
/// when this very process holds it (an earlier communicator of the same rank still alive).
UniqueFd ClaimName(const std::string& name, const RendezvousSpec& spec, int rank,
                   const Deadline& deadline) {
  // A child forked a moment ago holds a copy of the claim until its fork handler has run
  // (fork_guard.h); the kernel names the process that listened, this one or one that has exited
  // since. Such a holder gets this long to let go before it counts.
  const Deadline forkedChildGrace = Deadline::After(2.0);
  for (;;) {
    UniqueFd fd = NewSocket();
    socklen_t length = 0;
    const sockaddr_un addr = AbstractAddress(name, &length);
    if (bind(fd.Get(), reinterpret_cast<const sockaddr*>(&addr), length) == 0) {
      if (listen(fd.Get(), kListenBacklog) != 0) {
        Fail(ERROR_COMM_FAIL, Describe(spec), ": listen failed: ", std::strerror(errno));
      }
      return fd;
    }
    if (errno != EADDRINUSE) {
      Fail(ERROR_COMM_FAIL, Describe(spec), ": cannot bind the abstract socket for rank ", rank,
           ": ", std::strerror(errno));
    }
    if (HoldsLiveClaim(name)) {
      // Every rank of the second communicator finds this at once: none waits for the others.
      Fail(ERROR_COMM_FAIL, Describe(spec), ": this process already holds rank ", rank,
           " in a communicator that is still alive (an operation of another Context, or one "
           "that still holds it). Between processes a rank has one communicator per (job, "
           "commDomain, rankSize): run these operations in one Context, give them another "
           "commDomain, or destroy the first communicator's operations and Context first");
    }
    // Someone holds it: ask the kernel who. Non-blocking so a full backlog cannot stall us.
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    ucred cred{};
    if (connect(probe.Get(), reinterpret_cast<const sockaddr*>(&addr), length) == 0 &&
        PeerCredentials(probe.Get(), &cred)) {
      const bool mine = cred.pid == getpid();
      const bool exited = !mine && kill(cred.pid, 0) != 0 && errno == ESRCH;
      // (Another rank's own earlier claim is fine: the pool replaces a broken communicator while
      // it still holds it. Only rank 0 needs its name, to host the rendezvous.)
      if (((mine && rank == 0) || exited) && !forkedChildGrace.Passed() && !deadline.Passed()) {
        // Each probe stays in the holder's listen queue (nobody accepts it): 40 in the grace
        // leave room below the backlog of 128 for the probes of later attempts.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (mine) return UniqueFd();
      Fail(ERROR_COMM_FAIL, Describe(spec), ": rank ", rank, " is already held by pid ", cred.pid,
           " (uid ", cred.uid, ")",
           exited ? ", which has exited: a process forked from it still holds the claim"
                  : ". Two processes claim the same rank, or another job runs with the same job "
                    "key; give each job its own COLLOPS_JOB_ID");
    }
    // Bound but not yet listening (the holder is between bind and listen), or just released.
    if (deadline.Passed()) {
      Fail(ERROR_COMM_FAIL, Describe(spec), ": rank ", rank,
           " is held by a process that never started listening");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string MissingRanks(const std::vector<UniqueFd>& peers) {
  std::vector<int> missing;
  for (size_t r = 1; r < peers.size(); ++r) {
    if (!peers[r].Valid()) missing.push_back(static_cast<int>(r));
  }
  return FormatRanks(missing);
}

/// For a rendezvous that timed out: ranks of the same job and domain that hold a claim on this
/// host under another rankSize, read from the abstract socket table (/proc/net/unix), as a
/// clause to append; "" when there are none. The claim names carry rankSize, so ranks that
/// disagree on it never meet and each would only see the other as missing. Not a failure by
/// itself: a communicator of another size may rightly live in the same domain.
std::string OtherRankSizesHere(const RendezvousSpec& spec) {
  const std::string prefix = "@" + ClaimSocketPrefix(geteuid(), spec) + "n";
  std::map<int, std::set<int>> ranksBySize;
  std::ifstream table("/proc/net/unix");
  std::string line;
  while (std::getline(table, line)) {
    const size_t at = line.find(prefix);
    if (at == std::string::npos) continue;
    int size = 0, rank = 0;
    if (std::sscanf(line.c_str() + at + prefix.size(), "%d:r%d", &size, &rank) == 2 &&
        size != spec.rankSize) {
      ranksBySize[size].insert(rank);
    }
  }
  std::string text;
  for (const auto& [size, ranks] : ranksBySize) {
    text += Concat("; on this host, ", FormatRanks(ranks), " of the same job and domain ",
                   ranks.size() == 1 ? "is" : "are", " there with rankSize ", size, " instead of ",
                   spec.rankSize);
  }
  return text.empty() ? text : text + ": every rank must pass the same rankSize";
}

/// A descriptor held only to be given up: when rank 0's table is full, closing it makes room to
/// accept one more connection and answer it, instead of leaving the peer waiting and the
/// listener readable (an accept that fails at once, again and again).
UniqueFd OpenReserve() { return UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC)); }

std::string OutOfDescriptors(const RendezvousSpec& spec, int error) {
  return Concat(Describe(spec), ": rank 0 (pid ", getpid(),
                ") ran out of file descriptors during the rendezvous: ", DescriptorError(error));
}

/// Answers every connection waiting in `listener`'s queue with the failure that ends the
/// rendezvous, so ranks that connected but were not accepted yet fail with it at once instead of
/// at their timeout. `reserve` is given up for an accept that the full table refuses.
void RefuseWaiting(int listener, UniqueFd& reserve, Status status, const std::string& message) {
  fcntl(listener, F_SETFL, O_NONBLOCK);  // closed right after: nothing else accepts on it
  for (int i = 0; i <= kListenBacklog; ++i) {
    UniqueFd conn(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.Valid() && (errno == EMFILE || errno == ENFILE) && reserve.Valid()) {
      reserve.Reset();
      conn.Reset(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    }
    if (!conn.Valid()) return;
    SendReply(conn.Get(), status, message, {});
    conn.Reset();
    if (!reserve.Valid()) reserve = OpenReserve();
  }
}

/// accept4 errors after which the next connection may do better.
bool AcceptMayRetry(int error) {
  return error == EINTR || error == ECONNABORTED || error == EAGAIN || error == EWOULDBLOCK ||
         error == EPROTO;
}

RendezvousResult Host(const RendezvousSpec& spec, UniqueFd listener,
                      const SegmentMaker& makeSegment, const Deadline& deadline) {
  const int size = spec.rankSize;
  RendezvousResult result;
  result.pids.assign(size, 0);
  result.pids[0] = getpid();
  // First of all: a table already full could not answer the ranks that connect.
  UniqueFd reserve = OpenReserve();
  if (!reserve.Valid() && (errno == EMFILE || errno == ENFILE)) {
    Fail(ERROR_COMM_FAIL, OutOfDescriptors(spec, errno));
  }
  std::vector<UniqueFd> pidfds(size);  // every rank's, rank 0's own included, for the answers
  pidfds[0].Reset(OpenPidfd(getpid()));
  Status failStatus = NO_ERROR;
  std::string failMessage;
  try {
    result.memory = makeSegment();
  } catch (const Error& e) {
    failStatus = e.status();
    failMessage = e.what();
  }

  std::vector<UniqueFd> peers(size);
  auto failAll = [&](Status status, const std::string& message) {
    for (auto& peer : peers) {
      if (peer.Valid()) SendReply(peer.Get(), status, message, {});
    }
    RefuseWaiting(listener.Get(), reserve, status, message);
    throw Error(status, message);
  };
  int arrived = 1;
  while (arrived < size && !deadline.Passed()) {
    std::vector<pollfd> fds{{listener.Get(), POLLIN, 0}};
    for (int r = 1; r < size; ++r) {
      if (peers[r].Valid()) fds.push_back({peers[r].Get(), POLLIN, 0});
    }
    const int ready =
        poll(fds.data(), fds.size(), static_cast<int>(deadline.NanosLeft(100'000'000) / 1'000'000));
    if (ready <= 0) continue;
    // A joined peer sends nothing after its hello: readable means it went away.
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      for (int r = 1; r < size; ++r) {
        if (peers[r].Get() == fds[i].fd) {
          peers[r].Reset();
          --arrived;
        }
      }
    }
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd conn(accept4(listener.Get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.Valid()) {
      // The connection stays queued, so the listener is readable again at once: retrying spun
      // until the timeout, and each rank then blamed the other for not arriving.
      const int error = errno;
      if (AcceptMayRetry(error)) continue;
      failAll(ERROR_COMM_FAIL,
              error == EMFILE || error == ENFILE
                  ? OutOfDescriptors(spec, error)
                  : Concat(Describe(spec), ": rank 0 (pid ", getpid(),
                           ") cannot accept the other ranks: ", std::strerror(error)));
    }
    ucred cred{};
    if (!PeerCredentials(conn.Get(), &cred)) continue;
    if (cred.uid != geteuid()) {
      SendReply(
          conn.Get(), ERROR_COMM_FAIL,
          Concat(Describe(spec), ": rank 0 (pid ", getpid(), ") refused pid ", cred.pid, " of uid ",
                 cred.uid, ": only processes of uid ", geteuid(), " (the job's owner) may join"),
          {});
      continue;
    }
    HelloWire hello{};
    const Deadline helloDeadline = Deadline::After(2.0);
    if (RecvAll(conn.Get(), &hello, sizeof(hello), helloDeadline) != IoResult::kOk) continue;
    if (hello.magic != kWireMagic || hello.version != kWireVersion ||
        hello.keyBytes > kMaxWireString || hello.domainBytes > kMaxWireString) {
      SendReply(conn.Get(), ERROR_COMM_FAIL,
                Concat(Describe(spec), ": protocol version mismatch (mixed collops builds?)"), {});
      continue;
    }
    std::string key(hello.keyBytes, '\0');
    std::string domain(hello.domainBytes, '\0');
    if (RecvAll(conn.Get(), key.data(), key.size(), helloDeadline) != IoResult::kOk ||
        RecvAll(conn.Get(), domain.data(), domain.size(), helloDeadline) != IoResult::kOk) {
      continue;
    }
    if (key != spec.jobKey || domain != spec.domain || hello.rankSize != size || hello.rank < 1 ||
        hello.rank >= size) {
      SendReply(conn.Get(), ERROR_COMM_FAIL,
                Concat(Describe(spec), ": pid ", cred.pid, " asked to join as rank ", hello.rank,
                       " of ", hello.rankSize, " ranks of job '", key, "', domain '", domain,
                       "', which is not this job"),
                {});
      continue;
    }
    if (peers[hello.rank].Valid()) {
      // The claim sockets make this unreachable for well-behaved processes; never guess.
      const std::string clash =
          Concat(Describe(spec), ": rank ", hello.rank, " was claimed twice (pids ",
                 result.pids[hello.rank], " and ", cred.pid, ")");
      SendReply(conn.Get(), ERROR_COMM_FAIL, clash, {});
      failAll(ERROR_COMM_FAIL, clash);
    }
    pidfds[hello.rank] = PeerPidfd(conn.Get(), cred.pid);
    peers[hello.rank] = std::move(conn);
    result.pids[hello.rank] = cred.pid;
    ++arrived;
  }
  if (arrived < size) {
    failAll(ERROR_TIMEOUT,
            Concat(Describe(spec), ": ", MissingRanks(peers), " did not arrive within ",
                   spec.timeoutSeconds, " s (", spec.timeoutSource, ")", OtherRankSizesHere(spec)));
  }
  if (failStatus != NO_ERROR) failAll(failStatus, failMessage);
  for (int r = 1; r < size; ++r) {
    SendReply(peers[r].Get(), NO_ERROR, "", result.pids, {result.memory.Get()});
    SendPidfds(peers[r].Get(), r, pidfds);
  }
  pidfds[0].Reset();
  result.pidfds = std::move(pidfds);
  result.claim = std::move(listener);
  return result;
}

const char* NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

}  // namespace

bool ProcessExited(const UniqueFd& pidfd, pid_t pid, int waitMillis) {
  if (pidfd.Valid()) {
    pollfd pfd{pidfd.Get(), POLLIN, 0};
    int ready = 0;
    do {
      ready = poll(&pfd, 1, waitMillis);
    } while (ready < 0 && errno == EINTR);
    return ready > 0;
  }
  for (int waited = 0;; waited += 5) {
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) return true;
    if (waited >= waitMillis) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {

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

}  // namespace

std::string JobKeyFromEnv() {
  if (const char* job = NonEmptyEnv("COLLOPS_JOB_ID")) return job;
  const char* addr = NonEmptyEnv("MASTER_ADDR");
  const char* port = NonEmptyEnv("MASTER_PORT");
  if (addr != nullptr && port != nullptr) return Concat(addr, ":", port);
  // The launcher's name for this job: every process of one mpirun (OpenMPI, also across its
  // nodes) or of one PMIx-launched srun step shares it, and two jobs never do, so two mpirun
  // jobs on one host (ctest -j2 does that) do not claim each other's ranks.
  if (const char* pmix = NonEmptyEnv("PMIX_NAMESPACE")) return Concat("pmix:", pmix);
  const char* slurmJob = NonEmptyEnv("SLURM_JOB_ID");
  const char* slurmStep = NonEmptyEnv("SLURM_STEP_ID");
  if (slurmJob != nullptr && slurmStep != nullptr)
    return Concat("slurm:", slurmJob, ".", slurmStep);
  return "default";
}

std::string ClaimSocketPrefix(uid_t uid, const RendezvousSpec& spec) {
  char prefix[64];
  std::snprintf(prefix, sizeof(prefix),
                "collops-lccl:u%u:%016llx:%016llx:", static_cast<unsigned>(uid),
                static_cast<unsigned long long>(Fnv1a(spec.jobKey)),
                static_cast<unsigned long long>(Fnv1a(spec.domain)));
  return prefix;
}

std::string ClaimSocketName(uid_t uid, const RendezvousSpec& spec, int rank) {
  return Concat(ClaimSocketPrefix(uid, spec), "n", spec.rankSize, ":r", rank);
}

RendezvousResult JoinRendezvous(const RendezvousSpec& spec, uid_t ownerUid) {
  const Deadline deadline = Deadline::After(spec.timeoutSeconds);
  const std::string name = ClaimSocketName(ownerUid, spec, 0);
  int backoffMicros = 200;
  LastHost last;
  for (;;) {
    UniqueFd fd = NewSocket();
    socklen_t length = 0;
    const sockaddr_un addr = AbstractAddress(name, &length);
    if (connect(fd.Get(), reinterpret_cast<const sockaddr*>(&addr), length) != 0) {
      if (errno != ECONNREFUSED && errno != ENOENT && errno != EAGAIN && errno != EINTR) {
        Fail(ERROR_COMM_FAIL, Describe(spec), ": cannot connect to rank 0: ", std::strerror(errno));
      }
      if (last.Exited()) FailHostExited(spec, last.pid);
      if (deadline.Passed()) {
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
    ucred host{};
    PeerCredentials(fd.Get(), &host);
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
    SendAll(fd.Get(), message.data(), message.size());
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
    if (host.uid != geteuid()) {
      Fail(ERROR_COMM_FAIL, Describe(spec), ": rank 0 (pid ", host.pid, ") runs as uid ", host.uid,
           ", not ", geteuid(), "; refusing its memory");
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

RendezvousResult Rendezvous(const RendezvousSpec& spec, const SegmentMaker& makeSegment) {
  if (spec.jobKey.size() > kMaxJobKeyBytes) {
    // Longer keys broke the messages that carry them: peers saw "malformed" answers or nothing.
    Fail(ERROR_INVALID_PARAM, "lccl: the job key (COLLOPS_JOB_ID, else MASTER_ADDR:MASTER_PORT or ",
         "the launcher's job name) is ", spec.jobKey.size(), " bytes long; at most ",
         kMaxJobKeyBytes, " are allowed");
  }
  if (spec.rankSize == 1) {
    RendezvousResult result;
    result.memory = makeSegment();
    result.pids = {getpid()};
    result.pidfds.resize(1);
    return result;
  }
  const Deadline deadline = Deadline::After(spec.timeoutSeconds);
  UniqueFd claim =
      ClaimName(ClaimSocketName(geteuid(), spec, spec.rank), spec, spec.rank, deadline);
  if (spec.rank == 0) {
    if (!claim.Valid()) {
      Fail(ERROR_COMM_FAIL, Describe(spec),
           ": this process already holds rank 0 in an earlier "
           "communicator that is still alive; destroy it before creating another");
    }
    return Host(spec, std::move(claim), makeSegment, deadline);
  }
  RendezvousResult result = JoinRendezvous(spec, geteuid());
  result.claim = std::move(claim);
  return result;
}

}  // namespace shm
}  // namespace collops
