// A job whose rank is SIGKILLed in the middle of collectives: what the kill and residue fault
// tests run.
#include "process_fault_test_util.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collops/communicator.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace testing {

void KillMidCollective(int size, int victim, Loop loop) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::chrono::steady_clock::time_point killedAt;
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "60";
  options.deadlineSeconds = 50;
  // The cross-memory loops set the default threshold explicitly: left unset, an oversubscribed
  // communicator on a machine whose kernel copy is slow would stage them (cross_memory_policy.h).
  options.env["COLLOPS_SHM_CMA_BYTES"] = loop == Loop::kAllReduce ? "0" : "16384";
  options.afterFork = [&](const std::vector<pid_t>& pids) {
    close(ready[1]);
    char byte;
    for (int r = 0; r < size; ++r) ASSERT_EQ(read(ready[0], &byte, 1), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    killedAt = std::chrono::steady_clock::now();
    kill(pids[victim], SIGKILL);
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankOutcome> outcomes = ForkRanks(
      size,
      [&](int rank) {
        close(ready[0]);
        auto comm = MakeLcclComm(rank, size, "kill");
        std::vector<float> in(1 << 18, 1.0f), out(in.size());
        const int64_t piece = 1 << 20;
        std::vector<int64_t> counts(size, piece), displs(size);
        for (int r = 0; r < size; ++r) displs[r] = r * piece;
        const bool shared = loop == Loop::kSharedAllToAllV;
        std::vector<uint8_t> ordinaryIn, ordinaryOut;
        void* sharedIn = shared ? comm->AllocateShared(piece * size) : nullptr;
        void* sharedOut = shared ? comm->AllocateShared(piece * size) : nullptr;
        ASSERT_TRUE(!shared || (sharedIn != nullptr && sharedOut != nullptr));
        if (loop == Loop::kCrossMemoryAllToAllV) {
          ordinaryIn.assign(piece * size, 1);
          ordinaryOut.assign(piece * size, 0);
          sharedIn = ordinaryIn.data();
          sharedOut = ordinaryOut.data();
        }
        const auto call = [&] {
          if (loop == Loop::kAllReduce || loop == Loop::kCrossMemoryAllReduce) {
            comm->AllReduce(in.data(), out.data(), in.size(), ACL_FLOAT, ReduceOp::kSum);
          } else if (loop == Loop::kCrossMemorySendRecv) {
            const int partner = rank ^ 1;
            if (rank % 2 == 0) {
              comm->Send(in.data(), in.size(), ACL_FLOAT, partner);
              comm->Recv(out.data(), out.size(), ACL_FLOAT, partner);
            } else {
              comm->Recv(out.data(), out.size(), ACL_FLOAT, partner);
              comm->Send(in.data(), in.size(), ACL_FLOAT, partner);
            }
          } else {
            comm->AllToAllV(sharedIn, counts.data(), displs.data(), sharedOut, counts.data(),
                            displs.data(), ACL_INT8);
          }
        };
        call();
        ASSERT_EQ(write(ready[1], "x", 1), 1);
        try {
          for (;;) call();
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), ERROR_PEER_LOST) << e.what();
          EXPECT_TRUE(Contains(e.what(), Concat("rank ", victim, " (pid "))) << e.what();
        }
        EXPECT_TRUE(comm->Broken());
        const auto before = std::chrono::steady_clock::now();
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { comm->Barrier(); }, &message), ERROR_PEER_LOST) << message;
        EXPECT_TRUE(Contains(message, Concat("rank ", victim, " (pid "))) << message;
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count(),
                  0.1);
      },
      options);
  close(ready[0]);
  close(ready[1]);
  const double killedAfter = std::chrono::duration<double>(killedAt - start).count();
  for (const RankOutcome& outcome : outcomes) {
    if (outcome.rank == victim) {
      EXPECT_EQ(outcome.signal, SIGKILL) << outcome.Describe();
      continue;
    }
    EXPECT_TRUE(outcome.Ok()) << outcome.Describe();
    EXPECT_LT(outcome.seconds - killedAfter, 10.0)
        << "rank " << outcome.rank << " noticed the dead rank only after "
        << outcome.seconds - killedAfter << " s";
  }
}

}  // namespace testing
}  // namespace collops
