// A joining rank against whatever holds rank 0's rendezvous name: abstract socket names are one
// namespace for every user of the host, so the holder may be a listener that never accepts (a
// stuck rank 0, a squatter) or a process of another user. The joiner must give up by its
// deadline, send nothing to another user's process, repeat nothing it says, and name its uid.
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/comm/shm/process_rendezvous.h"
#include "core/comm/shm/rendezvous_wire.h"
#include "op_harness.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace {

using shm::UniqueFd;
using testing::CaughtStatus;
using testing::Contains;
using testing::ForkRanks;
using testing::MakeLcclComm;
using testing::ProcessRanksOptions;
using testing::RankOutcome;

constexpr uid_t kNobody = 65534;

/// The abstract name of rank 0 of a 2-rank job `jobKey` in `domain` of user `uid`.
std::string RankZeroName(uid_t uid, const std::string& jobKey, const std::string& domain) {
  shm::RendezvousSpec spec;
  spec.jobKey = jobKey;
  spec.domain = domain;
  spec.rankSize = 2;
  return shm::ClaimSocketName(uid, spec, 0);
}

/// A socket bound to `name`, listening with a queue of `backlog`.
UniqueFd Listen(const std::string& name, int backlog) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t length = 0;
  const sockaddr_un addr = shm::AbstractAddress(name, &length);
  if (!fd.Valid() || bind(fd.Get(), reinterpret_cast<const sockaddr*>(&addr), length) != 0 ||
      listen(fd.Get(), backlog) != 0) {
    ADD_FAILURE() << "cannot listen on the rendezvous name: " << std::strerror(errno);
    return UniqueFd();
  }
  return fd;
}

/// Connections to `name` that nobody accepts, until the listener's queue has no room.
std::vector<UniqueFd> FillQueue(const std::string& name) {
  std::vector<UniqueFd> fillers;
  socklen_t length = 0;
  const sockaddr_un addr = shm::AbstractAddress(name, &length);
  for (int i = 0; i < 64; ++i) {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (connect(fd.Get(), reinterpret_cast<const sockaddr*>(&addr), length) != 0) break;
    fillers.push_back(std::move(fd));
  }
  EXPECT_LT(fillers.size(), 64u) << "the listener's queue never filled";
  return fillers;
}

/// Drops this process to uid and gid nobody; false when it cannot.
bool BecomeNobody() {
  return setgroups(0, nullptr) == 0 && setgid(kNobody) == 0 && setuid(kNobody) == 0;
}

/// Rank 1 of a 2-rank job with COLLOPS_TIMEOUT=1 joins while rank 0's name is held by a listener
/// whose queue is full; it must fail with ERROR_TIMEOUT within seconds, naming `holderUid`.
void ExpectJoinerGivesUp(const std::string& jobKey, uid_t holderUid) {
  ProcessRanksOptions options;
  options.env["COLLOPS_JOB_ID"] = jobKey;
  options.env["COLLOPS_TIMEOUT"] = "1";
  options.deadlineSeconds = 20;
  const std::vector<RankOutcome> outcomes = ForkRanks(
      1,
      [&](int) {
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(1, 2, "never-accepts"); }, &message),
                  ERROR_TIMEOUT)
            << message;
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                  10.0);
        EXPECT_TRUE(Contains(message, "accepted no connection")) << message;
        EXPECT_TRUE(Contains(message, Concat("socket of uid ", holderUid, " "))) << message;
        if (holderUid != geteuid()) {
          EXPECT_TRUE(Contains(message, "another user's process holds the name")) << message;
        }
      },
      options);
  for (const RankOutcome& outcome : outcomes) EXPECT_TRUE(outcome.Ok()) << outcome.Describe();
}

TEST(ProcessRendezvousDeadline, AListenerThatNeverAcceptsCannotHoldAJoinerPastItsTimeout) {
  const std::string jobKey = testing::NewJobId();
  const std::string name = RankZeroName(geteuid(), jobKey, "never-accepts");
  UniqueFd listener = Listen(name, 0);
  ASSERT_TRUE(listener.Valid());
  const std::vector<UniqueFd> fillers = FillQueue(name);
  ExpectJoinerGivesUp(jobKey, geteuid());
}

TEST(ProcessRendezvousDeadline, AListenerOfAnotherUserThatNeverAcceptsIsNamed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to bind the name as uid 65534";
  const std::string jobKey = testing::NewJobId();
  const std::string name = RankZeroName(geteuid(), jobKey, "never-accepts");
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t squatter = fork();
  if (squatter == 0) {
    close(ready[0]);
    close(done[1]);
    if (!BecomeNobody()) _exit(1);
    UniqueFd listener = Listen(name, 0);
    const std::vector<UniqueFd> fillers = FillQueue(name);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    char byte;
    (void)!read(done[0], &byte, 1);  // holds the name until the test is over
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the squatter could not take the name";
  ExpectJoinerGivesUp(jobKey, kNobody);
  close(done[1]);
  int status = 0;
  ASSERT_EQ(waitpid(squatter, &status, 0), squatter);
  close(ready[0]);
}

TEST(ProcessRendezvousCredentials, AJoinerSendsNothingToAListenerOfAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to bind the name as uid 65534";
  const std::string jobKey = testing::NewJobId();
  const std::string name = RankZeroName(geteuid(), jobKey, "squatted");
  int ready[2], heard[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(heard), 0);
  const pid_t squatter = fork();
  if (squatter == 0) {
    // Accepts, answers at once with text of its own in rank 0's wire format, and reports how many
    // bytes the joiner sent it before hanging up.
    close(ready[0]);
    close(heard[0]);
    if (!BecomeNobody()) _exit(1);
    UniqueFd listener = Listen(name, 8);
    if (!listener.Valid() || write(ready[1], "x", 1) != 1) _exit(1);
    pollfd waiting{listener.Get(), POLLIN, 0};
    if (poll(&waiting, 1, 20'000) != 1) _exit(1);
    UniqueFd conn(accept(listener.Get(), nullptr, nullptr));
    const std::string text = "SQUATTER TEXT: run this command";
    const shm::ReplyWire reply{shm::kWireMagic, ERROR_COMM_FAIL, 2,
                               static_cast<uint32_t>(text.size())};
    std::string answer(reinterpret_cast<const char*>(&reply), sizeof reply);
    answer += text;
    (void)!send(conn.Get(), answer.data(), answer.size(), MSG_NOSIGNAL);  // it may be gone
    int32_t received = 0;
    for (;;) {
      pollfd readable{conn.Get(), POLLIN, 0};
      if (poll(&readable, 1, 5'000) != 1) break;
      char buffer[4096];
      const ssize_t got = read(conn.Get(), buffer, sizeof buffer);
      if (got <= 0) break;
      received += static_cast<int32_t>(got);
    }
    (void)!write(heard[1], &received, sizeof received);
    _exit(0);
  }
  close(ready[1]);
  close(heard[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the squatter could not take the name";
  ProcessRanksOptions options;
  options.env["COLLOPS_JOB_ID"] = jobKey;
  options.env["COLLOPS_TIMEOUT"] = "10";
  options.deadlineSeconds = 30;
  const std::vector<RankOutcome> outcomes = ForkRanks(
      1,
      [&](int) {
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(1, 2, "squatted"); }, &message), ERROR_COMM_FAIL)
            << message;
        EXPECT_TRUE(Contains(message, "of uid 65534")) << message;
        EXPECT_FALSE(Contains(message, "SQUATTER")) << "repeated another user's text: " << message;
      },
      options);
  for (const RankOutcome& outcome : outcomes) EXPECT_TRUE(outcome.Ok()) << outcome.Describe();
  int32_t received = -1;
  EXPECT_EQ(read(heard[0], &received, sizeof received), static_cast<ssize_t>(sizeof received));
  EXPECT_EQ(received, 0) << "the joiner sent the other user's process its hello (job and domain)";
  int status = 0;
  ASSERT_EQ(waitpid(squatter, &status, 0), squatter);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(ready[0]);
  close(heard[0]);
}

}  // namespace
}  // namespace collops
