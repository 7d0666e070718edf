// Fault tests of the multi-process lccl communicator: ranks that never arrive, arrive late,
// disagree on the rankSize or the order of calls, or abort. Every waiting rank fails, naming the
// rank it waited for and why.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "collops/backend.h"
#include "collops/communicator.h"
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

TEST(ProcessFault, RankThatNeverArrivesIsNamedInTimeout) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "2";
  const auto outcomes = RunProcessRanks(
      3,
      [](int rank) {
        if (rank == 2) return;  // never joins
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(rank, 3, "late"); }, &message), ERROR_TIMEOUT)
            << message;
        EXPECT_TRUE(Contains(message, "rank 2 did not arrive within 2 s")) << message;
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_GT(waited, 1.5);
        EXPECT_LT(waited, 10);
      },
      options);
}

TEST(ProcessFault, MissingRankZeroIsNamedInTimeout) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "2";
  RunProcessRanks(
      2,
      [](int rank) {
        if (rank == 0) return;
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(rank, 2, "no-root"); }, &message), ERROR_TIMEOUT)
            << message;
        EXPECT_TRUE(Contains(message, "rank 0 did not arrive within 2 s")) << message;
      },
      options);
}

/// Rank 0 passes rankSize 2, rank 1 passes 3: their claims differ, so they never meet. Whichever
/// gives up first (`firstRank`, with the shorter COLLOPS_TIMEOUT) must name the other and its
/// rankSize; before, each only said that the other had not arrived.
void ExpectTheRankSizeDisagreementNamed(int firstRank) {
  RunProcessRanks(2, [firstRank](int rank) {
    setenv("COLLOPS_TIMEOUT", rank == firstRank ? "2" : "5", 1);
    const int size = rank == 0 ? 2 : 3;
    std::string message;
    EXPECT_EQ(CaughtStatus([&] { MakeLcclComm(rank, size, "sizes"); }, &message), ERROR_TIMEOUT)
        << message;
    if (rank != firstRank) return;  // the other has left by now
    const std::string other =
        rank == 0 ? "rank 1 of the same job and domain is there with rankSize 3 instead of 2"
                  : "rank 0 of the same job and domain is there with rankSize 2 instead of 3";
    EXPECT_TRUE(Contains(message, other)) << message;
    EXPECT_TRUE(Contains(message, "every rank must pass the same rankSize")) << message;
  });
}

TEST(ProcessFault, RankZeroWithAnotherRankSizeIsNamedInItsPeersTimeout) {
  ExpectTheRankSizeDisagreementNamed(1);
}

TEST(ProcessFault, APeerWithAnotherRankSizeIsNamedInRankZerosTimeout) {
  ExpectTheRankSizeDisagreementNamed(0);
}

TEST(ProcessFault, RankMissingFromACollectiveTimesOutNamingIt) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "2";
  RunProcessRanks(
      3,
      [](int rank) {
        auto comm = MakeLcclComm(rank, 3, "skip");
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(4));  // alive, but skips the barrier
          return;
        }
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { comm->Barrier(); }, &message), ERROR_TIMEOUT) << message;
        EXPECT_TRUE(Contains(message, "rank 1 (pid ")) << message;
        EXPECT_TRUE(comm->Broken());
      },
      options);
}

/// A rank that arrives after its peer timed out fails too: completing with the data the peer
/// posted before giving up would give NO_ERROR on one rank and ERROR_TIMEOUT on the other.
TEST(ProcessFault, ARankArrivingAfterItsPeerTimedOutFailsToo) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "1";
  RunProcessRanks(
      2,
      [](int rank) {
        auto comm = MakeLcclComm(rank, 2, "late");
        comm->Barrier();
        if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        float x[4] = {1, 2, 3, 4}, y[4] = {};
        std::string message;
        const Status status =
            CaughtStatus([&] { comm->AllReduce(x, y, 4, ACL_FLOAT, ReduceOp::kSum); }, &message);
        EXPECT_EQ(status, ERROR_TIMEOUT) << message;
        if (rank == 1) {
          EXPECT_TRUE(Contains(message, "rank 0 (pid ")) << message;
          EXPECT_TRUE(Contains(message, "gave up waiting for this rank")) << message;
        }
        EXPECT_EQ(CaughtStatus([&] { comm->Barrier(); }), ERROR_TIMEOUT);
      },
      options);
}

/// Rank 0 sends, then all-reduces; rank 1 all-reduces, then receives. Sends are synchronous, so
/// neither could move, and both waited out COLLOPS_TIMEOUT; the timeout blamed rank 0 as "stopped
/// responding". The rank in the send sees its peer sleeping in a collective round it has not
/// posted, and both fail at once naming the order.
TEST(ProcessFault, ASendAgainstACollectiveFailsAtOnceNamingTheOrder) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "30";
  RunProcessRanks(
      3,
      [](int rank) {
        auto comm = MakeLcclComm(rank, 3, "order");
        comm->Barrier();
        const auto start = std::chrono::steady_clock::now();
        float x[4] = {1, 2, 3, 4}, y[4] = {};
        std::string message;
        const Status status = CaughtStatus(
            [&] {
              if (rank == 0) comm->Send(x, 4, ACL_FLOAT, 1);
              comm->AllReduce(x, y, 4, ACL_FLOAT, ReduceOp::kSum);
              if (rank == 1) comm->Recv(y, 4, ACL_FLOAT, 0);
            },
            &message);
        EXPECT_EQ(status, ERROR_RANK_MISMATCH) << message;
        EXPECT_TRUE(Contains(message, "the ranks made their calls in different orders")) << message;
        if (rank == 0) {
          EXPECT_TRUE(Contains(message, "lccl Send (rank 0 of 3): rank 1 (pid "));
          EXPECT_TRUE(Contains(message, "waits for this rank in a collective")) << message;
        } else {
          EXPECT_TRUE(Contains(message, "rank 0 (pid ")) << message;
          EXPECT_TRUE(Contains(message, "waits in a send or receive with rank 1")) << message;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      },
      options);
}

TEST(ProcessFault, AbortStopsThePeersWaitingForThisRankAtOnce) {
  // Rank 0 is alive but gives up (as a hierarchical leader does when its cross-host engine
  // fails): ranks waiting for its broadcast stop within the second, well before the 30 s
  // timeout, naming rank 0 and the reason, and every later call on either side fails.
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "30";
  RunProcessRanks(
      3,
      [](int rank) {
        auto comm = MakeLcclComm(rank, 3, "abort");
        comm->Barrier();
        int32_t value = rank;
        if (rank == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the others wait
          comm->Abort(ERROR_PEER_LOST, "lost a peer elsewhere");
          comm->Abort(ERROR_TIMEOUT, "a second abort changes nothing");
          EXPECT_TRUE(comm->Broken());
          EXPECT_THROW(comm->Broadcast(&value, 1, ACL_INT32, 0), Error);
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { comm->Broadcast(&value, 1, ACL_INT32, 0); }, &message),
                  ERROR_PEER_LOST)
            << message;
        EXPECT_TRUE(Contains(message, "rank 0 (pid ")) << message;
        EXPECT_TRUE(Contains(message, "stopped this communicator")) << message;
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
        EXPECT_TRUE(comm->Broken());
        EXPECT_THROW(comm->Barrier(), Error);
      },
      options);
}

}  // namespace
}  // namespace collops
