// Fault tests of the multi-process lccl communicator's claims on rank names: two jobs sharing a
// commDomain, the job key and where it comes from, two processes or communicators claiming one
// rank, a broken communicator replaced while held, and a process of another user refused.
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "core/comm/shm/process_fd.h"
#include "core/comm/shm/process_rendezvous.h"
#include "core/comm/shm/rendezvous_wire.h"
#include "process_fault_test_util.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace {

using testing::CaughtStatus;
using testing::Contains;
using testing::ForkRanks;
using testing::MakeLcclComm;
using testing::ProcessRanksOptions;
using testing::RunProcessRanks;
using testing::SharedArray;

/// A second live communicator for the same ranks (an operation in a second Context) is refused at
/// once on both ranks, saying what to do: the first holds the ranks' names, so waiting cannot help.
TEST(ProcessFault, ASecondLiveCommunicatorOfTheSameRankIsRefusedAtOnce) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "20";
  RunProcessRanks(
      2,
      [](int rank) {
        std::shared_ptr<Communicator> first = MakeLcclComm(rank, 2, "twice");
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(rank, 2, "twice"); }, &message), ERROR_COMM_FAIL);
        EXPECT_TRUE(Contains(message, Concat("this process already holds rank ", rank,
                                             " in a communicator that is still alive")))
            << message;
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
        first->Barrier();  // the first one is untouched
        first.reset();
        MakeLcclComm(rank, 2, "twice")->Barrier();  // and once it is gone, the name is free
      },
      options);
}

/// Every rank refuses a 4097-byte key at once: the rendezvous messages that carry it cannot hold
/// it, and a cut key gives one rank a malformed answer and the other a timeout.
TEST(ProcessFault, AnOverlongJobKeyIsRefusedByEveryRankAtOnce) {
  ProcessRanksOptions options;
  options.env["COLLOPS_JOB_ID"] = std::string(1025, 'k');
  options.env["COLLOPS_TIMEOUT"] = "20";
  RunProcessRanks(
      2,
      [](int rank) {
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(rank, 2, "long-key"); }, &message),
                  ERROR_INVALID_PARAM)
            << message;
        EXPECT_TRUE(Contains(message, "is 1025 bytes long; at most 1024 are allowed")) << message;
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
      },
      options);
}

TEST(ProcessFault, BrokenCommunicatorIsReplacedWhileStillHeld) {
  // The pool creates the replacement of a broken communicator before it drops the old one, so
  // the new rendezvous must succeed while the broken one (same job, domain, size) is alive.
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "1";
  RunProcessRanks(
      2,
      [](int rank) {
        auto broken = MakeLcclComm(rank, 2, "replace");
        if (rank == 0) {
          EXPECT_THROW(broken->Barrier(), Error);
          EXPECT_TRUE(broken->Broken());
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        }
        auto fresh = MakeLcclComm(rank, 2, "replace");
        int32_t in = rank + 1, out = 0;
        fresh->AllReduce(&in, &out, 1, ACL_INT32, ReduceOp::kSum);
        EXPECT_EQ(out, 3);
      },
      options);
}

/// Two jobs of 3 ranks run at once in one domain; `nameJob(base, job)` sets the environment
/// that gives process `job`'s ranks their job key.
template <typename NameJob>
void TwoJobsShareOneDomain(NameJob nameJob) {
  const std::string base = testing::NewJobId();
  RunProcessRanks(6, [&base, &nameJob](int index) {
    const int job = index / 3, rank = index % 3;
    nameJob(base, job);
    auto comm = MakeLcclComm(rank, 3, "shared-domain");
    for (int iteration = 0; iteration < 200; ++iteration) {
      std::vector<int32_t> in(1000 + iteration, (job + 1) * 100 + rank), out(in.size());
      comm->AllReduce(in.data(), out.data(), in.size(), ACL_INT32, ReduceOp::kSum);
      const int32_t want = 3 * (job + 1) * 100 + 0 + 1 + 2;
      ASSERT_EQ(out, std::vector<int32_t>(in.size(), want)) << "job " << job << " rank " << rank;
    }
  });
}

TEST(ProcessFault, TwoJobsWithTheSameDomainNeverCrossTalk) {
  TwoJobsShareOneDomain([](const std::string& base, int job) {
    setenv("COLLOPS_JOB_ID", (base + "-job" + std::to_string(job)).c_str(), 1);
  });
}

void UnsetJobKeyEnv() {
  for (const char* name : {"COLLOPS_JOB_ID", "MASTER_ADDR", "MASTER_PORT", "PMIX_NAMESPACE",
                           "SLURM_JOB_ID", "SLURM_STEP_ID"}) {
    unsetenv(name);
  }
}

// Two mpirun (or srun) jobs on one host, neither with COLLOPS_JOB_ID: the launcher's job names
// keep them apart; one key shared by both would leave the second job's ranks finding their rank
// names taken ("already held by pid ...").
TEST(ProcessFault, JobsOfTwoMpirunsWithTheSameDomainNeverCrossTalk) {
  TwoJobsShareOneDomain([](const std::string& base, int job) {
    UnsetJobKeyEnv();
    setenv("PMIX_NAMESPACE", (base + "-mpirun" + std::to_string(job)).c_str(), 1);
  });
}

TEST(ProcessFault, JobsOfTwoSlurmStepsWithTheSameDomainNeverCrossTalk) {
  TwoJobsShareOneDomain([](const std::string& base, int job) {
    UnsetJobKeyEnv();
    setenv("SLURM_JOB_ID", base.c_str(), 1);
    setenv("SLURM_STEP_ID", std::to_string(job).c_str(), 1);
  });
}

// Two programs of one user, each starting its ranks itself (a process group each, as a shell
// starts two jobs), neither with a job key in its environment: a default key shared by both
// would let the second program's ranks find the first one's names taken, or join it.
TEST(ProcessJobKey, TwoProgramsWithoutAJobKeyNeverMeet) {
  std::atomic<int>* created = SharedArray<std::atomic<int>>(1);
  new (created) std::atomic<int>(0);
  const auto outcomes = ForkRanks(2, [&](int program) {
    UnsetJobKeyEnv();
    ASSERT_EQ(setpgid(0, 0), 0);  // the launcher of program `program`, leader of its group
    std::vector<pid_t> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      const pid_t pid = fork();
      if (pid == 0) {
        int code = 0;
        try {
          std::shared_ptr<Communicator> comm;
          try {
            comm = MakeLcclComm(rank, 2, "one-domain");
          } catch (...) {
            created->fetch_add(1);
            throw;
          }
          // Both programs hold their communicators at once before either computes.
          created->fetch_add(1);
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (created->load() < 4 && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          int32_t in = (program + 1) * 100 + rank, out = 0;
          comm->AllReduce(&in, &out, 1, ACL_INT32, ReduceOp::kSum);
          code = out == (program + 1) * 200 + 1 ? 0 : 4;
        } catch (const Error& e) {
          std::fprintf(stderr, "program %d rank %d: %s\n", program, rank, e.what());
          code = 2;
        }
        _exit(code);
      }
      ranks.push_back(pid);
    }
    for (pid_t pid : ranks) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "program " << program << ": a rank ended with status " << status;
    }
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.Ok()) << outcome.Describe();
  munmap(created, sizeof(std::atomic<int>));
}

TEST(ProcessFault, JobKeyComesFromTheFirstSourceThatIsSet) {
  RunProcessRanks(1, [](int) {
    UnsetJobKeyEnv();
    const std::string ownGroup = shm::JobKeyFromEnv();
    EXPECT_EQ(ownGroup.rfind("pgid:", 0), 0u) << ownGroup;
    EXPECT_EQ(ownGroup.substr(ownGroup.rfind(':') + 1), std::to_string(getpgrp())) << ownGroup;
    setenv("SLURM_JOB_ID", "77", 1);
    EXPECT_EQ(shm::JobKeyFromEnv(), ownGroup) << "a job id without its step";
    setenv("SLURM_STEP_ID", "3", 1);
    EXPECT_EQ(shm::JobKeyFromEnv(), "slurm:77.3");
    setenv("PMIX_NAMESPACE", "", 1);
    EXPECT_EQ(shm::JobKeyFromEnv(), "slurm:77.3") << "empty means unset";
    setenv("PMIX_NAMESPACE", "870187009", 1);
    EXPECT_EQ(shm::JobKeyFromEnv(), "pmix:870187009");
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    EXPECT_EQ(shm::JobKeyFromEnv(), "pmix:870187009") << "MASTER_ADDR without MASTER_PORT";
    setenv("MASTER_PORT", "29500", 1);
    EXPECT_EQ(shm::JobKeyFromEnv(), "10.0.0.1:29500");
    setenv("COLLOPS_JOB_ID", "mine", 1);
    EXPECT_EQ(shm::JobKeyFromEnv(), "mine");
  });
}

TEST(ProcessFault, TwoProcessesClaimingOneRankFailNamingTheOther) {
  // Processes 1 and 2 both claim rank 1 of a 2-rank job; exactly one is refused, naming the
  // pid of the other. The winner keeps its communicator alive long enough for the loser to try.
  pid_t* named = SharedArray<pid_t>(3);
  int* status = SharedArray<int>(3);
  const auto outcomes = ForkRanks(3, [&](int index) {
    const int rank = index == 0 ? 0 : 1;
    try {
      auto comm = MakeLcclComm(rank, 2, "clash");
      comm->Barrier();
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      status[index] = NO_ERROR;
    } catch (const Error& e) {
      status[index] = e.status();
      const std::string text = e.what();
      const size_t at = text.find("already held by pid ");
      EXPECT_NE(at, std::string::npos) << text;
      if (at != std::string::npos) named[index] = std::stoi(text.substr(at + 20));
    }
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.Ok()) << outcome.Describe();
  EXPECT_EQ(status[0], NO_ERROR);
  const int loser = status[1] == NO_ERROR ? 2 : 1, winner = 3 - loser;
  EXPECT_EQ(status[winner], NO_ERROR);
  EXPECT_EQ(status[loser], ERROR_COMM_FAIL);
  EXPECT_EQ(named[loser], outcomes[winner].pid);
  munmap(named, sizeof(pid_t) * 3);
  munmap(status, sizeof(int) * 3);
}

/// Connects to the abstract socket `name` (retrying until it exists, for up to `seconds`) and
/// returns every byte it sends until it hangs up: what a process that does not speak collops'
/// protocol hears.
std::string RawAnswer(const std::string& name, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  socklen_t length = 0;
  const sockaddr_un addr = shm::AbstractAddress(name, &length);
  std::string answer;
  while (std::chrono::steady_clock::now() < deadline) {
    shm::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect(fd.Get(), reinterpret_cast<const sockaddr*>(&addr), length) != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    for (;;) {
      pollfd readable{fd.Get(), POLLIN, 0};
      if (poll(&readable, 1, 5'000) != 1) break;
      char buffer[4096];
      const ssize_t got = read(fd.Get(), buffer, sizeof buffer);
      if (got <= 0) break;
      answer.append(buffer, static_cast<size_t>(got));
    }
    break;
  }
  return answer;
}

TEST(ProcessFault, ProcessOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop a child to uid 65534";
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "20";
  options.deadlineSeconds = 30;
  // Rank 0 and the legitimate rank 1 run as root; before rank 1 starts, an intruder running as
  // nobody connects to rank 0's rendezvous: rank 0 refuses it, and tells it nothing of the job.
  // (An intruder using collops' own joining code would not even talk: it sees rank 0 is uid 0.)
  RunProcessRanks(
      2,
      [](int rank) {
        const std::string job = std::getenv("COLLOPS_JOB_ID");
        if (rank == 1) {
          const pid_t intruder = fork();
          if (intruder == 0) {
            int code = 1;
            if (setgroups(0, nullptr) == 0 && setgid(65534) == 0 && setuid(65534) == 0) {
              shm::RendezvousSpec spec;
              spec.jobKey = job;
              spec.domain = "foreign";
              spec.rankSize = 2;
              const std::string answer = RawAnswer(shm::ClaimSocketName(0, spec, 0), 10);
              const bool clear = Contains(answer, "refused pid ") &&
                                 Contains(answer, "of uid 65534") &&
                                 Contains(answer, "only processes of uid 0") &&
                                 !Contains(answer, job) && !Contains(answer, "foreign");
              if (!clear) std::fprintf(stderr, "intruder got: %s\n", answer.c_str());
              code = clear ? 0 : 3;
            }
            _exit(code);
          }
          int status = 0;
          ASSERT_EQ(waitpid(intruder, &status, 0), intruder);
          ASSERT_TRUE(WIFEXITED(status));
          ASSERT_EQ(WEXITSTATUS(status), 0) << "the intruder was not refused with a clear error";
        }
        auto comm = MakeLcclComm(rank, 2, "foreign");
        int32_t in = rank + 1, out = 0;
        comm->AllReduce(&in, &out, 1, ACL_INT32, ReduceOp::kSum);
        EXPECT_EQ(out, 3);
      },
      options);
}

}  // namespace
}  // namespace collops
