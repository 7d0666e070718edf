#include "core/comm/shm/process_rendezvous.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "collops/environment.h"
#include "collops/status.h"
#include "core/comm/shm/fork_guard.h"
#include "core/comm/shm/rank_list.h"
#include "core/comm/shm/rendezvous_wire.h"
#include "core/comm/shm/socket_owner.h"
#include "core/comm/shm/wait_word.h"

namespace collops {
namespace shm {
namespace {

/// Room for the key in every message that names it (a refusal quotes key and domain), within
/// kMaxWireString.
constexpr size_t kMaxJobKeyBytes = 1024;
/// Connections rank 0's claim socket queues before it accepts them.
constexpr int kListenBacklog = 128;

uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ULL;
  return hash;
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
           : cred.uid != geteuid()
               ? Concat(", not by this user (uid ", geteuid(),
                        "): another user's process holds the name; give this job another "
                        "COLLOPS_JOB_ID")
               : std::string(". Two processes claim the same rank, or another job runs with the "
                             "same job key; give each job its own COLLOPS_JOB_ID"));
    }
    // Bound but not yet listening (the holder is between bind and listen), just released, or
    // listening with a full queue (EAGAIN): the kernel's socket table names its owner then.
    if (deadline.Passed()) {
      const std::optional<uid_t> uid = AbstractListenerUid(name);
      if (uid) {
        Fail(ERROR_COMM_FAIL, Describe(spec), ": rank ", rank, " is held by a socket of uid ", *uid,
             " that accepts no connections (its queue is full)",
             *uid != geteuid() ? "; that is another user: give this job another COLLOPS_JOB_ID"
                               : "");
      }
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
      // Without the job key and domain: they are this user's, not the other's.
      SendReply(
          conn.Get(), ERROR_COMM_FAIL,
          Concat("lccl rendezvous: rank 0 (pid ", getpid(), ") refused pid ", cred.pid, " of uid ",
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
  // Only now, with every rank there: a rankSize that no job fills (a typo) costs no memory, and
  // a lone rank 0 holds none while it waits out its timeout.
  try {
    result.memory = makeSegment();
  } catch (const Error& e) {
    failAll(e.status(), e.what());
  }
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

std::string JobKeyFromEnv() {
  if (std::string job = KnobText("COLLOPS_JOB_ID"); !job.empty()) return job;
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
  // No shared name: the process group of the program that launched the ranks. What one program
  // starts (fork, multiprocessing, the commands of a script) shares its group; two programs a
  // shell starts as separate jobs, or that separate parents start, do not, so unrelated jobs of
  // one user never meet by accident. The pid namespace's inode keeps equal group numbers of two
  // containers that share a network namespace apart.
  struct stat pidNamespace{};
  const unsigned long long ns =
      stat("/proc/self/ns/pid", &pidNamespace) == 0 ? pidNamespace.st_ino : 0;
  return Concat("pgid:", ns, ":", getpgrp());
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