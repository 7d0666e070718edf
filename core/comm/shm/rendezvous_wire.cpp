#include "core/comm/shm/rendezvous_wire.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "core/comm/shm/rank_list.h"

namespace collops {
namespace shm {

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5; older C libraries lack the name
#endif

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

std::string OpenFileLimit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  return Concat(
      "RLIMIT_NOFILE = ",
      limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(limit.rlim_cur),
      ", see ulimit -n");
}

std::string DescriptorError(int error) {
  if (error == EMFILE) return Concat(std::strerror(error), " (", OpenFileLimit(), ")");
  if (error == ENFILE) return Concat(std::strerror(error), " (the system-wide limit, fs.file-max)");
  return std::strerror(error);
}

UniqueFd NewSocket(bool nonBlocking) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonBlocking ? SOCK_NONBLOCK : 0), 0));
  if (!fd.Valid()) Fail(ERROR_COMM_FAIL, "lccl: socket(AF_UNIX) failed: ", DescriptorError(errno));
  return fd;
}

bool PeerCredentials(int fd, ucred* cred) {
  socklen_t length = sizeof(*cred);
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &length) == 0;
}

bool SendAll(int fd, const void* data, size_t bytes, const std::vector<int>& passFds,
             const Deadline* deadline) {
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
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && deadline != nullptr) {
      if (deadline->Passed()) return false;
      pollfd pfd{fd, POLLOUT, 0};
      poll(&pfd, 1, static_cast<int>(deadline->NanosLeft(100'000'000) / 1'000'000));
      continue;
    }
    if (sent <= 0) return false;
    p += sent;
    bytes -= static_cast<size_t>(sent);
    withFds = false;
  }
  return true;
}

IoResult RecvAll(int fd, void* data, size_t bytes, const Deadline& deadline,
                 std::vector<UniqueFd>* receivedFds) {
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
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
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
               const std::vector<int>& passFds) {
  ReplyWire reply{kWireMagic, status, static_cast<int32_t>(pids.size()),
                  static_cast<uint32_t>(message.size())};
  std::string payload(reinterpret_cast<const char*>(&reply), sizeof(reply));
  payload += message;
  for (pid_t pid : pids) payload.append(reinterpret_cast<const char*>(&pid), sizeof(int32_t));
  SendAll(fd, payload.data(), payload.size(), passFds);  // a peer that vanished learns nothing
}

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

UniqueFd PeerPidfd(int fd, pid_t pid) {
  int pidfd = -1;
  socklen_t length = sizeof(pidfd);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) == 0 && pidfd >= 0) {
    return UniqueFd(pidfd);
  }
  return UniqueFd(OpenPidfd(pid));
}

pid_t LocalPid(int pidfd) {
  std::ifstream info(Concat("/proc/self/fdinfo/", pidfd));
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("Pid:", 0) == 0) return static_cast<pid_t>(std::atol(line.c_str() + 4));
  }
  return -1;
}

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

}  // namespace shm
}  // namespace collops
