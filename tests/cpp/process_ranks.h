// Process-ranks harness: runs a test body in R forked processes, one per rank, and makes every
// rank's outcome count. A rank fails the test when its body throws, records a gtest failure, exits
// nonzero, dies by a signal, or is still running at the deadline (then every rank is killed).
//
// Forking happens before the child creates any thread, and each call sets a COLLOPS_JOB_ID of its
// own (test process pid + a counter) so tests that ctest runs in parallel never meet each other.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collops/backend.h"
#include "collops/status.h"
#include "core/comm/shm/process_comm.h"

namespace collops {
namespace testing {

/// How one rank's process ended.
struct RankOutcome {
  int rank = 0;
  pid_t pid = 0;
  bool hung = false;   ///< still running at the deadline (killed by the harness)
  int exitCode = -1;   ///< valid when signal == 0 and !hung
  int signal = 0;      ///< the signal that ended it, 0 for a normal exit
  double seconds = 0;  ///< from the fork of rank 0 to this rank's end

  bool Ok() const { return !hung && signal == 0 && exitCode == 0; }
  std::string Describe() const {
    if (hung) return Concat("rank ", rank, " (pid ", pid, ") hung and was killed");
    if (signal != 0) return Concat("rank ", rank, " (pid ", pid, ") died by signal ", signal);
    return Concat("rank ", rank, " (pid ", pid, ") exited with code ", exitCode,
                  exitCode == 1   ? " (gtest failure)"
                  : exitCode == 2 ? " (collops::Error)"
                  : exitCode == 3 ? " (other exception)"
                                  : "");
  }
};

struct ProcessRanksOptions {
  double deadlineSeconds = 60;
  /// Set in every child before the body runs (COLLOPS_TIMEOUT, COLLOPS_SHM_BYTES, ...).
  std::map<std::string, std::string> env;
  /// Runs in the parent once every rank is forked (fault tests kill ranks from here).
  std::function<void(const std::vector<pid_t>& pids)> afterFork;
};

/// A job key no other test process or earlier call uses.
inline std::string NewJobId() {
  static int counter = 0;
  return Concat("gtest-", getpid(), "-", ++counter);
}

/// This rank's multi-process lccl communicator of (domain, rankSize): where the process tests'
/// ranks start.
inline std::shared_ptr<Communicator> MakeLcclComm(int rank, int rankSize,
                                                  const std::string& domain) {
  CommParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.backend = "lccl";
  param.commMode = COMM_MULTI_PROCESS;
  param.commDomain = domain;
  return CreateCommunicator(param);
}

/// MakeLcclComm as the ProcessCommunicator it is, for tests of its own interface (Rounds(),
/// SharedBytes(), ...).
inline std::shared_ptr<shm::ProcessCommunicator> MakeProcessComm(int rank, int rankSize,
                                                                 const std::string& domain) {
  auto comm =
      std::dynamic_pointer_cast<shm::ProcessCommunicator>(MakeLcclComm(rank, rankSize, domain));
  if (comm == nullptr) Fail(ERROR_INTERNAL_ERROR, "lccl/process is not a ProcessCommunicator");
  return comm;
}

/// Number of failed gtest parts recorded so far in the current test.
inline int FailedParts() {
  const ::testing::TestResult* result =
      ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i) {
    if (result->GetTestPartResult(i).failed()) ++failed;
  }
  return failed;
}

/// Forks `rankSize` children running body(rank) and returns how each ended; asserts nothing.
inline std::vector<RankOutcome> ForkRanks(int rankSize, const std::function<void(int rank)>& body,
                                          const ProcessRanksOptions& options = {}) {
  const std::string jobId = NewJobId();
  const int failedBefore = FailedParts();
  std::fflush(stdout);
  std::fflush(stderr);
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankOutcome> outcomes(rankSize);
  std::vector<pid_t> pids(rankSize, 0);
  for (int rank = 0; rank < rankSize; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("COLLOPS_JOB_ID", jobId.c_str(), 1);
      for (const auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);
      int code = 0;
      try {
        body(rank);
        if (FailedParts() > failedBefore) code = 1;
      } catch (const Error& e) {
        std::fprintf(stderr, "[rank %d pid %d] collops::Error %s: %s\n", rank, getpid(),
                     StatusName(e.status()), e.what());
        code = 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d pid %d] exception: %s\n", rank, getpid(), e.what());
        code = 3;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    if (pid < 0) {
      ADD_FAILURE() << "fork failed for rank " << rank;
      for (int r = 0; r < rank; ++r) kill(pids[r], SIGKILL);
    }
    pids[rank] = pid;
    outcomes[rank].rank = rank;
    outcomes[rank].pid = pid;
  }
  if (options.afterFork) options.afterFork(pids);
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(options.deadlineSeconds));
  int running = rankSize;
  std::vector<bool> done(rankSize, false);
  while (running > 0) {
    const bool late = std::chrono::steady_clock::now() >= deadline;
    for (int rank = 0; rank < rankSize; ++rank) {
      if (done[rank] || pids[rank] <= 0) continue;
      if (late) {
        kill(pids[rank], SIGKILL);
        outcomes[rank].hung = true;
      }
      int status = 0;
      const pid_t got = waitpid(pids[rank], &status, late ? 0 : WNOHANG);
      if (got != pids[rank]) continue;
      done[rank] = true;
      --running;
      outcomes[rank].seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!outcomes[rank].hung) {
        if (WIFSIGNALED(status)) outcomes[rank].signal = WTERMSIG(status);
        if (WIFEXITED(status)) outcomes[rank].exitCode = WEXITSTATUS(status);
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return outcomes;
}

/// Runs body(rank) in `rankSize` processes; the test fails naming every rank that failed or hung.
inline std::vector<RankOutcome> RunProcessRanks(int rankSize,
                                                const std::function<void(int rank)>& body,
                                                const ProcessRanksOptions& options) {
  std::vector<RankOutcome> outcomes = ForkRanks(rankSize, body, options);
  for (const RankOutcome& outcome : outcomes) {
    if (!outcome.Ok()) ADD_FAILURE() << outcome.Describe();
  }
  return outcomes;
}

inline void RunProcessRanks(int rankSize, const std::function<void(int rank)>& body,
                            double deadlineSeconds = 60) {
  ProcessRanksOptions options;
  options.deadlineSeconds = deadlineSeconds;
  RunProcessRanks(rankSize, body, options);
}

/// Creating a one-rank lccl communicator with the environment variable `name` = `value` fails
/// with ERROR_INVALID_PARAM naming `name`.
inline void ExpectEnvRejected(const char* name, const char* value) {
  ProcessRanksOptions options;
  options.env[name] = value;
  RunProcessRanks(
      1,
      [&](int rank) {
        try {
          MakeLcclComm(rank, 1, "bad-env");
          ADD_FAILURE() << name << "=" << value << " was accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
          EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
      },
      options);
}

}  // namespace testing
}  // namespace collops
