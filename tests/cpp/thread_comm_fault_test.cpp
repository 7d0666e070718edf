// Failure modes of the multi-thread lccl communicator: rendezvous rules, timeouts that name the
// missing ranks and break the group for every rank, mismatched ranks, and group lifetimes.
#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "collops/signature.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Waits (up to 20 s) until `comm` is broken by a peer's timeout.
void AwaitBroken(Communicator& comm) {
  const auto start = std::chrono::steady_clock::now();
  while (!comm.Broken() && SecondsSince(start) < 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Every primitive on a broken communicator throws `status` at once.
void ExpectEveryCallFailsFast(Communicator& comm, Status status) {
  int32_t x[2] = {1, 2};
  int32_t y[2 * 8] = {};
  const int64_t counts[8] = {}, displs[8] = {};
  const int peer = (comm.Rank() + 1) % comm.Size();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(comm.Broken());
  EXPECT_EQ(CaughtStatus([&] { comm.Barrier(); }), status);
  EXPECT_EQ(CaughtStatus([&] { comm.AllGatherBytes(x, y, 4); }), status);
  EXPECT_EQ(CaughtStatus([&] { comm.AllReduce(x, x, 2, ACL_INT32, ReduceOp::kSum); }), status);
  EXPECT_EQ(CaughtStatus([&] { comm.AllGatherV(x, 0, y, counts, displs, ACL_INT32); }), status);
  EXPECT_EQ(CaughtStatus(
                [&] { comm.ReduceScatterV(x, counts, displs, y, 0, ACL_INT32, ReduceOp::kSum); }),
            status);
  EXPECT_EQ(CaughtStatus([&] { comm.AllToAllV(x, counts, displs, y, counts, displs, ACL_INT32); }),
            status);
  EXPECT_EQ(CaughtStatus([&] { comm.Broadcast(x, 2, ACL_INT32, 0); }), status);
  EXPECT_EQ(CaughtStatus([&] { comm.Send(x, 2, ACL_INT32, peer); }), status);
  EXPECT_EQ(CaughtStatus([&] { comm.Recv(x, 2, ACL_INT32, peer); }), status);
  EXPECT_LT(SecondsSince(start), 0.5) << "calls on a broken communicator must not wait";
}

// The harness itself: what a failing or stuck rank looks like to gtest and ctest.
void ThrowOnRankOne(int rank) {
  if (rank == 1) throw std::runtime_error("boom");
}
void FailOnRankTwo(int rank) { EXPECT_NE(rank, 2) << "marker"; }
void HangUnlessRankOne(int rank) {
  if (rank != 1) std::this_thread::sleep_for(std::chrono::seconds(30));
}

TEST(ThreadCommHarness, AnExceptionInARankIsAFailureNamingTheRank) {
  EXPECT_NONFATAL_FAILURE_ON_ALL_THREADS(RunThreadRanks(3, ThrowOnRankOne), "rank 1 threw: boom");
}

TEST(ThreadCommHarness, AnAssertionInARankThreadFailsTheTest) {
  EXPECT_NONFATAL_FAILURE_ON_ALL_THREADS(RunThreadRanks(3, FailOnRankTwo), "marker");
}

TEST(ThreadCommHarnessDeathTest, StuckRanksAreNamedAndTheProcessAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: no fork of threads
  EXPECT_DEATH(RunThreadRanks(3, HangUnlessRankOne, 0.2),
               "rank\\(s\\) 0, 2 still running after 0.2 s");
}

TEST(ThreadCommFaults, BackendIsRegisteredForThreadMode) {
  EXPECT_THAT(ListCommunicatorBackends(), ::testing::Contains("lccl/thread"));
}

TEST(ThreadCommFaults, TimeoutIsReadFromTheEnvironmentOnEveryCall) {
  {
    ScopedEnv env("COLLOPS_TIMEOUT", "2");
    EXPECT_EQ(CommTimeoutSeconds(), 2.0);
  }
  ScopedEnv env("COLLOPS_TIMEOUT", "0.5");
  EXPECT_EQ(CommTimeoutSeconds(), 0.5);
}

TEST(ThreadCommFaults, TimeoutsBeyondThirtyYearsCountAsThirtyYears) {
  // Unclamped, 1e10 s would overflow the clock's int64 nanoseconds into a deadline in the past.
  for (const char* huge : {"1e10", "1e300", "inf"}) {
    ScopedEnv env("COLLOPS_TIMEOUT", huge);
    EXPECT_EQ(CommTimeoutSeconds(), kMaxCommTimeoutSeconds) << huge;
  }
  EXPECT_EQ(CommTimeoutSeconds(1e12), kMaxCommTimeoutSeconds);
}

TEST(ThreadCommFaults, TimeoutsThatAreNotNumbersOfSecondsAreRefused) {
  // Only a number of seconds, alone, counts: "2abc" and "2 s" are not read as 2, nor as the
  // default; the knob's parser (environment_test.cpp) refuses them, naming the knob.
  for (const char* bad : {"abc", "0", "-5", "nan", "2abc", "2 s", " 2.5 "}) {
    ScopedEnv env("COLLOPS_TIMEOUT", bad);
    EXPECT_THROW(CommTimeoutSeconds(), Error) << bad;
  }
  ScopedEnv env("COLLOPS_TIMEOUT", "2.5");
  EXPECT_EQ(CommTimeoutSeconds(), 2.5);
}

TEST(ThreadCommFaults, AHugeTimeoutStillWaitsForALateRank) {
  ScopedEnv env("COLLOPS_TIMEOUT", "1e12");
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::shared_ptr<Communicator> comm = JoinRank(rank, 2, domain);
    int32_t x = rank + 1, sum = 0;
    comm->AllReduce(&x, &sum, 1, ACL_INT32, ReduceOp::kSum);
    EXPECT_EQ(sum, 3);
  });
}

TEST(ThreadCommFaults, ARankWhoseReductionFailsBreaksTheGroupForEveryRank) {
  // Rank 1's output starts one element into its input: its reduction refuses the partial overlap
  // after the call's first Sync. Rank 0 must fail with it, not wait at the next Sync while rank
  // 1 runs on into its next call.
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, 2, domain);
    std::vector<float> buffer(9, 1.0f);
    float* out = rank == 1 ? buffer.data() + 1 : buffer.data();
    std::vector<float> in(buffer.begin(), buffer.begin() + 8);
    const float* src = rank == 1 ? buffer.data() : in.data();
    std::string message;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(
        CaughtStatus([&] { comm->AllReduce(src, out, 8, ACL_FLOAT, ReduceOp::kSum); }, &message),
        ERROR_INTERNAL_ERROR);
    EXPECT_THAT(message, HasSubstr("lccl AllReduce on rank 1: ReduceArrays: dst partially"));
    EXPECT_LT(SecondsSince(start), 5.0);
    ExpectEveryCallFailsFast(*comm, ERROR_INTERNAL_ERROR);
  });
}

TEST(ThreadCommFaults, InvalidRanksAndPeersAreRejected) {
  const std::string domain = UniqueDomain();
  EXPECT_EQ(CaughtStatus([&] { JoinRank(2, 2, domain); }), ERROR_INVALID_PARAM);
  EXPECT_EQ(CaughtStatus([&] { JoinRank(-1, 2, domain); }), ERROR_INVALID_PARAM);
  std::shared_ptr<Communicator> comm = JoinRank(0, 1, domain);
  int32_t x = 0;
  std::string message;
  EXPECT_EQ(CaughtStatus([&] { comm->Send(&x, 1, ACL_INT32, 0); }, &message), ERROR_INVALID_PARAM);
  EXPECT_THAT(message, HasSubstr("peer = 0"));
  EXPECT_EQ(CaughtStatus([&] { comm->Broadcast(&x, 1, ACL_INT32, 1); }), ERROR_INVALID_PARAM);
  EXPECT_EQ(CaughtStatus([&] { comm->AllReduce(&x, &x, 1, ACL_BOOL, ReduceOp::kSum); }),
            ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_FALSE(comm->Broken());
}

TEST(ThreadCommFaults, ThreadsThatPassAnotherRankSizeAreNamedInTheTimeout) {
  const std::string domain = UniqueDomain();
  ScopedEnv env("COLLOPS_TIMEOUT", "1");
  // Rank 0 waits for a group of 2, ranks 1 and 2 for a group of 3: none forms. Each timeout names
  // the threads of the other size that are still waiting (the first to give up sees them all).
  std::atomic<int> named{0};
  RunThreadRanks(3, [&](int rank) {
    const int size = rank == 0 ? 2 : 3;
    std::string message;
    EXPECT_EQ(CaughtStatus([&] { JoinRank(rank, size, domain); }, &message), ERROR_TIMEOUT);
    const std::string other = rank == 0
                                  ? "ranks 1, 2 of this domain joined with rankSize 3 instead of 2"
                                  : "rank 0 of this domain joined with rankSize 2 instead of 3";
    if (message.find(other) != std::string::npos) {
      EXPECT_THAT(message, HasSubstr("every rank must pass the same rankSize"));
      ++named;
    }
  });
  EXPECT_GE(named.load(), 1);
}

TEST(ThreadCommFaults, RanksThatNeverJoinAreNamedInTheTimeout) {
  const std::string domain = UniqueDomain();
  {
    ScopedEnv env("COLLOPS_TIMEOUT", "1");
    RunThreadRanks(2, [&](int rank) {  // ranks 2 and 3 of the 4 never come
      const auto start = std::chrono::steady_clock::now();
      std::string message;
      EXPECT_EQ(CaughtStatus([&] { JoinRank(rank, 4, domain); }, &message), ERROR_TIMEOUT);
      EXPECT_THAT(message, HasSubstr("lccl thread group '" + domain +
                                     "' (4 ranks): ranks 2, 3 did not join within 1 s"));
      EXPECT_GE(SecondsSince(start), 0.9);
      EXPECT_LT(SecondsSince(start), 10);
    });
  }
  // The failed rendezvous left nothing behind: the domain forms a working group afterwards.
  RunThreadRanks(4, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, 4, domain);
    comm->Barrier();
  });
}

// A second claim of a rank fails at once, and so does the first claimant: the group cannot form,
// and waiting for the rank the second thread was (most likely) meant to be would take the timeout.
TEST(ThreadCommFaults, SecondClaimOfARankWhileFormingFailsEveryWaitingRankAtOnce) {
  const std::string domain = UniqueDomain();
  ScopedEnv env("COLLOPS_TIMEOUT", "30");
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> duplicates{0}, waiters{0};
  RunThreadRanks(2, [&](int thread) {
    if (thread == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::string message;
    const Status status = CaughtStatus([&] { JoinRank(0, 2, domain); }, &message);
    EXPECT_THAT(message, HasSubstr("lccl thread group '" + domain + "' (2 ranks)"));
    if (status == ERROR_INVALID_PARAM) {
      EXPECT_THAT(message, HasSubstr("rank 0 joined twice"));
      ++duplicates;
    } else {
      EXPECT_EQ(status, ERROR_RANK_MISMATCH) << message;
      EXPECT_THAT(message, HasSubstr("a second thread joined as rank 0 while the group was "
                                     "forming, so it cannot form"));
      ++waiters;
    }
  });
  EXPECT_EQ(duplicates.load(), 1);
  EXPECT_EQ(waiters.load(), 1);
  EXPECT_LT(SecondsSince(start), 10);
  // The broken rendezvous left nothing behind: the domain forms a working group afterwards.
  RunThreadRanks(2, [&](int rank) { JoinRank(rank, 2, domain)->Barrier(); });
}

// A rankSize above lccl's limit is refused before anything is allocated, in thread mode as in
// process mode: the channels grow with its square (4097 ranks: 1 GB; 10^8: 12.5 GB).
TEST(ThreadCommFaults, RankSizeAboveTheLcclLimitIsRefusedBeforeAnyAllocation) {
  ScopedEnv env("COLLOPS_TIMEOUT", "1");
  std::string message;
  EXPECT_EQ(CaughtStatus([&] { JoinRank(0, 4097, UniqueDomain()); }, &message),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(message, HasSubstr("rankSize = 4097 must be in [1, 4096]"));
}

TEST(ThreadCommFaults, TimeoutsListTheFirst16MissingRanks) {
  ScopedEnv env("COLLOPS_TIMEOUT", "1");
  std::string message;
  EXPECT_EQ(CaughtStatus([&] { JoinRank(0, 40, UniqueDomain()); }, &message), ERROR_TIMEOUT);
  EXPECT_THAT(message, HasSubstr("ranks 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 and "
                                 "23 more did not join within 1 s"));
}

TEST(ThreadCommFaults, CollectiveTimeoutBreaksTheGroupForEveryRank) {
  const std::string domain = UniqueDomain();
  ScopedEnv env("COLLOPS_TIMEOUT", "1");
  RunThreadRanks(3, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, 3, domain);
    comm->Barrier();
    if (rank == 2) {
      AwaitBroken(*comm);  // never enters the AllReduce the others wait in
    } else {
      int32_t x[3] = {1, 2, 3};
      std::string message;
      const auto start = std::chrono::steady_clock::now();
      EXPECT_EQ(
          CaughtStatus([&] { comm->AllReduce(x, x, 3, ACL_INT32, ReduceOp::kSum); }, &message),
          ERROR_TIMEOUT);
      EXPECT_THAT(message, HasSubstr("AllReduce"));
      EXPECT_THAT(message, HasSubstr("waiting for rank 2 to arrive"));
      EXPECT_LT(SecondsSince(start), 10);
    }
    ExpectEveryCallFailsFast(*comm, ERROR_TIMEOUT);
  });
}

TEST(ThreadCommFaults, RecvWithoutSendTimesOutNamingThePeer) {
  const std::string domain = UniqueDomain();
  ScopedEnv env("COLLOPS_TIMEOUT", "1");
  RunThreadRanks(2, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, 2, domain);
    if (rank == 1) {
      AwaitBroken(*comm);
    } else {
      int32_t x[4];
      std::string message;
      EXPECT_EQ(CaughtStatus([&] { comm->Recv(x, 4, ACL_INT32, 1); }, &message), ERROR_TIMEOUT);
      EXPECT_THAT(message, HasSubstr("rank 1 did not arrive at the matching Send"));
    }
    ExpectEveryCallFailsFast(*comm, ERROR_TIMEOUT);
  });
}

// Calls issued in different orders (a Send on one rank, a collective on the other) time out
// with a message that names the call each rank is in, not the primitive underneath, whichever
// rank gives up first.
TEST(ThreadCommFaults, CallsInDifferentOrdersNameWhatEachRankWaitsIn) {
  const std::string domain = UniqueDomain();
  ScopedEnv env("COLLOPS_TIMEOUT", "1");
  RunThreadRanks(2, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, 2, domain);
    int32_t x[4] = {1, 2, 3, 4};
    std::string message;
    if (rank == 0) {
      EXPECT_EQ(CaughtStatus([&] { comm->Send(x, 4, ACL_INT32, 1); }, &message), ERROR_TIMEOUT);
    } else {
      CallSignature mine;
      mine.opName = "AllReduceOperation/sum";
      EXPECT_EQ(CaughtStatus([&] { comm->Agree(mine); }, &message), ERROR_TIMEOUT);
    }
    EXPECT_THAT(message, AnyOf(HasSubstr("AllReduceOperation/sum (cross-rank check) on rank 1 "
                                         "timed out after 1 s waiting for rank 0 to arrive; "
                                         "rank 0 is waiting in Send to rank 1"),
                               HasSubstr("Send from rank 0 to rank 1 timed out after 1 s: rank 1 "
                                         "did not arrive at the matching Recv; rank 1 is waiting "
                                         "in AllReduceOperation/sum (cross-rank check)")));
    EXPECT_THAT(message, Not(HasSubstr("AllGatherBytes")));
  });
}

TEST(ThreadCommFaults, SendRecvMismatchFailsOnBothSidesAndKeepsTheOrder) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, 2, domain);
    std::vector<int32_t> buf(5, rank == 0 ? 42 : -1);
    std::string message;
    // Count: rank 0 sends 5, rank 1 expects 4.
    const Status count = CaughtStatus(
        [&] {
          rank == 0 ? comm->Send(buf.data(), 5, ACL_INT32, 1)
                    : comm->Recv(buf.data(), 4, ACL_INT32, 0);
        },
        &message);
    EXPECT_EQ(count, ERROR_RANK_MISMATCH);
    EXPECT_THAT(message, HasSubstr("rank 0 sends 5 elements of int32 to rank 1, which "
                                   "expects 4 elements of int32 from rank 0"));
    // Dtype: int32 against float.
    const Status dtype = CaughtStatus(
        [&] {
          rank == 0 ? comm->Send(buf.data(), 5, ACL_INT32, 1)
                    : comm->Recv(buf.data(), 5, ACL_FLOAT, 0);
        },
        &message);
    EXPECT_EQ(dtype, ERROR_RANK_MISMATCH);
    EXPECT_THAT(message, HasSubstr("rank 0 sends 5 elements of int32 to rank 1, which "
                                   "expects 5 elements of float32 from rank 0"));
    // Both messages were consumed: the next pair matches and carries the data.
    EXPECT_FALSE(comm->Broken());
    if (rank == 0) {
      comm->Send(buf.data(), 5, ACL_INT32, 1);
    } else {
      comm->Recv(buf.data(), 5, ACL_INT32, 0);
      EXPECT_EQ(buf, std::vector<int32_t>(5, 42));
    }
  });
}

TEST(ThreadCommFaults, CollectiveArgumentMismatchFailsEveryRankAndKeepsTheGroup) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, 3, domain);
    int32_t x[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    std::string message;
    EXPECT_EQ(
        CaughtStatus([&] { comm->AllReduce(x, x, rank == 2 ? 5 : 4, ACL_INT32, ReduceOp::kSum); },
                     &message),
        ERROR_RANK_MISMATCH);
    EXPECT_THAT(message, HasSubstr("rank 0 has count 4 but rank 2 has count 5"));

    EXPECT_EQ(CaughtStatus([&] { comm->Broadcast(x, 4, ACL_INT32, rank == 1 ? 1 : 0); }, &message),
              ERROR_RANK_MISMATCH);
    EXPECT_THAT(message, HasSubstr("rank 0 has root 0 but rank 1 has root 1"));

    // Rank 1 expects 2 elements from rank 0, which sends it 1.
    const int64_t sendCounts[3] = {1, 1, 1}, displs[3] = {0, 1, 2};
    const int64_t recvCounts[3] = {rank == 1 ? 2 : 1, 1, 1}, rdispls[3] = {0, 2, 3};
    int32_t y[8];
    EXPECT_EQ(
        CaughtStatus(
            [&] { comm->AllToAllV(x, sendCounts, displs, y, recvCounts, rdispls, ACL_INT32); },
            &message),
        ERROR_RANK_MISMATCH);
    EXPECT_THAT(message, HasSubstr("rank 0 sends sendCounts[1] = 1 elements to rank 1, but rank "
                                   "1 expects recvCounts[0] = 2"));

    EXPECT_FALSE(comm->Broken());
    comm->AllReduce(x, x, 4, ACL_INT32, ReduceOp::kSum);
    EXPECT_EQ(x[0], 3);
  });
}

TEST(ThreadCommFaults, TwoDomainsUsedConcurrentlyByTheSameThreads) {
  const std::string domainA = UniqueDomain("a"), domainB = UniqueDomain("b");
  RunThreadRanks(4, [&](int rank) {
    std::shared_ptr<Communicator> a = JoinRank(rank, 4, domainA);
    std::shared_ptr<Communicator> b = JoinRank(3 - rank, 4, domainB);  // ranks reversed
    for (int i = 0; i < 50; ++i) {
      int32_t sum = rank + i, max = rank * 10 + i;
      a->AllReduce(&sum, &sum, 1, ACL_INT32, ReduceOp::kSum);
      b->AllReduce(&max, &max, 1, ACL_INT32, ReduceOp::kMax);
      ASSERT_EQ(sum, 6 + 4 * i);
      ASSERT_EQ(max, 30 + i);
      int32_t root = b->Rank() * 100 + i;
      b->Broadcast(&root, 1, ACL_INT32, 1);
      ASSERT_EQ(root, 100 + i);
    }
  });
}

TEST(ThreadCommFaults, SameDomainFormsANewGroupAfterTheFirstIsGone) {
  const std::string domain = UniqueDomain();
  for (int round = 0; round < 3; ++round) {
    RunThreadRanks(3, [&](int rank) {
      std::shared_ptr<Communicator> comm = JoinRank(rank, 3, domain);
      int32_t x = rank + round;
      comm->AllReduce(&x, &x, 1, ACL_INT32, ReduceOp::kSum);
      EXPECT_EQ(x, 3 + 3 * round);
    });
  }
  // And after a group of that domain broke.
  {
    ScopedEnv env("COLLOPS_TIMEOUT", "1");
    RunThreadRanks(2, [&](int rank) {
      std::shared_ptr<Communicator> comm = JoinRank(rank, 2, domain);
      if (rank == 0) {
        EXPECT_EQ(CaughtStatus([&] { comm->Barrier(); }), ERROR_TIMEOUT);
      }
      AwaitBroken(*comm);
    });
  }
  RunThreadRanks(2, [&](int rank) { JoinRank(rank, 2, domain)->Barrier(); });
}

}  // namespace
}  // namespace testing
}  // namespace collops
