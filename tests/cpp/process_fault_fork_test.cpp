// Fault tests of the multi-process lccl communicator: a child forked from a rank (a DataLoader
// worker) gives up the rank's claims and cannot use the communicator it inherited.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "core/comm/shm/fork_guard.h"
#include "core/comm/shm/process_fd.h"
#include "process_fault_test_util.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace {

using testing::CaughtStatus;
using testing::Contains;
using testing::MakeLcclComm;
using testing::ProcessRanksOptions;
using testing::RunProcessRanks;

/// A DataLoader-style worker, forked after the communicator exists and alive while the parent
/// goes on, gives the rank's name up at fork, and its calls on the inherited communicator are
/// refused: a kept claim would refuse the parent's next communicator, and the child's calls would
/// make the peers move the parent's memory.
TEST(ProcessFault, AForkedChildNeitherHoldsTheRankNorUsesTheCommunicator) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "10";
  RunProcessRanks(
      2,
      [](int rank) {
        std::shared_ptr<Communicator> comm = MakeLcclComm(rank, 2, "forked");
        int32_t in = rank + 1, sum = 0;
        comm->AllReduce(&in, &sum, 1, ACL_INT32, ReduceOp::kSum);
        ASSERT_EQ(sum, 3);
        int toChild[2];
        ASSERT_EQ(pipe(toChild), 0);
        const pid_t child = fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
          close(toChild[1]);
          std::string message;
          const Status status = CaughtStatus(
              [&] { comm->AllReduce(&in, &sum, 1, ACL_INT32, ReduceOp::kSum); }, &message);
          const bool refused = status == ERROR_COMM_FAIL &&
                               Contains(message, "a child of fork() cannot use it") &&
                               Contains(message, std::to_string(getppid()));
          char done = 0;
          (void)!read(toChild[0], &done, 1);  // lives on until the parent is done
          _exit(refused ? 0 : 1);
        }
        close(toChild[0]);
        comm.reset();  // the pool of this test holds none: this destroys it
        std::shared_ptr<Communicator> again = MakeLcclComm(rank, 2, "forked");
        again->AllReduce(&in, &sum, 1, ACL_INT32, ReduceOp::kSum);
        EXPECT_EQ(sum, 3);
        close(toChild[1]);
        int wstatus = 0;
        ASSERT_EQ(waitpid(child, &wstatus, 0), child);
        EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
            << "the forked child used the inherited communicator or was not told why it cannot";
      },
      options);
}

/// A forked child gives up every claim of its parent's communicators, however many there are: a
/// claim it kept would refuse the parent's next communicator of that rank while the child lives.
TEST(ProcessFault, AForkedChildGivesUpEveryClaimHoweverMany) {
  constexpr int kClaims = 1100;
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  const rlim_t needed = kClaims + 64;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < needed) {
    GTEST_SKIP() << "needs an open-file limit of " << needed << " (ulimit -Hn)";
  }
  const std::string prefix = Concat("collops-test-fork-guard-", getpid(), "-");
  RunProcessRanks(1, [&](int) {
    if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
      const rlimit raised{needed, limit.rlim_max};
      ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &raised), 0);
    }
    std::vector<shm::UniqueFd> claims;
    for (int i = 0; i < kClaims; ++i) {
      shm::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      ASSERT_TRUE(fd.Valid()) << std::strerror(errno);
      const std::string name = Concat(prefix, i);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path + 1, name.data(), name.size());
      const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
      ASSERT_EQ(bind(fd.Get(), reinterpret_cast<const sockaddr*>(&addr), length), 0)
          << std::strerror(errno);
      shm::ReleaseInForkedChildren(fd.Get());
      claims.push_back(std::move(fd));
    }
    EXPECT_TRUE(shm::HoldsLiveClaim(Concat(prefix, kClaims - 1)));
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      int kept = 0;
      for (const shm::UniqueFd& fd : claims) {
        sockaddr_un addr{};
        socklen_t length = sizeof(addr);
        kept += getsockname(fd.Get(), reinterpret_cast<sockaddr*>(&addr), &length) != 0 ||
                length > sizeof(sa_family_t);
      }
      if (kept != 0) std::fprintf(stderr, "the child still holds %d of %d claims\n", kept, kClaims);
      _exit(kept == 0 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a forked child kept claims of its parent";
    for (const shm::UniqueFd& fd : claims) shm::StopReleasingInForkedChildren(fd.Get());
  });
}

}  // namespace
}  // namespace collops
