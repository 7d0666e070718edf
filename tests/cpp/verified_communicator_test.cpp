// VerifiedCommunicator: a disagreeing call fails on every rank with ERROR_RANK_MISMATCH before
// any data moves; agreeing calls give the wrapped communicator's results.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collops/backend.h"
#include "collops/status.h"
#include "collops/verified_communicator.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Communicator> Verified(int rank, int size, const std::string& domain) {
  return std::make_shared<VerifiedCommunicator>(
      CreateCommunicator(ThreadRankParam(rank, size, domain)), "test");
}

TEST(VerifiedCommunicator, AgreeingCallsPassThrough) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    auto comm = Verified(rank, 3, domain);
    std::vector<int32_t> in(5, rank + 1), out(5);
    comm->AllReduce(in.data(), out.data(), 5, ACL_INT32, ReduceOp::kSum);
    EXPECT_EQ(out, std::vector<int32_t>(5, 6));
    std::vector<int64_t> counts(3, 1), displs = {0, 1, 2};
    std::vector<int32_t> a2aIn = {rank * 10, rank * 10 + 1, rank * 10 + 2}, a2aOut(3);
    comm->AllToAllV(a2aIn.data(), counts.data(), displs.data(), a2aOut.data(), counts.data(),
                    displs.data(), ACL_INT32);
    EXPECT_EQ(a2aOut, (std::vector<int32_t>{rank, 10 + rank, 20 + rank}));
    comm->Barrier();
  });
}

TEST(VerifiedCommunicator, DifferentCountsFailOnEveryRank) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    auto comm = Verified(rank, 3, domain);
    const size_t n = rank == 2 ? 6 : 5;
    std::vector<float> in(n, 1.0f), out(n);
    try {
      comm->AllReduce(in.data(), out.data(), n, ACL_FLOAT, ReduceOp::kSum);
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH);
      EXPECT_THAT(e.what(), HasSubstr("rank 2 has 6"));
    }
    comm->Barrier();  // still usable afterwards
  });
}

TEST(VerifiedCommunicator, SplitsThatDisagreeFailOnEveryRank) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    auto comm = Verified(rank, 2, domain);
    // Rank 0 sends 2 elements to rank 1, but rank 1 expects 3 from rank 0.
    std::vector<int64_t> send = {1, 2}, sdispls = {0, 1};
    std::vector<int64_t> recv = rank == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{3, 2};
    std::vector<int64_t> rdispls = {0, recv[0]};
    std::vector<int8_t> in(3), out(recv[0] + recv[1]);
    try {
      comm->AllToAllV(in.data(), send.data(), sdispls.data(), out.data(), recv.data(),
                      rdispls.data(), ACL_INT8);
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH);
      EXPECT_THAT(e.what(), HasSubstr("rank 0 sends 2 elements to rank 1"));
      EXPECT_THAT(e.what(), HasSubstr("rank 1 expects 3"));
    }
  });
}

TEST(VerifiedCommunicator, DifferentPrimitivesFailOnEveryRank) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    auto comm = Verified(rank, 2, domain);
    std::vector<float> buf(4, 1.0f);
    try {
      if (rank == 0) {
        comm->Broadcast(buf.data(), 4, ACL_FLOAT, 0);
      } else {
        comm->AllReduce(buf.data(), buf.data(), 4, ACL_FLOAT, ReduceOp::kSum);
      }
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH);
      EXPECT_THAT(e.what(), HasSubstr("disagree on the operation"));
    }
  });
}

// `call` fails with ERROR_RANK_MISMATCH naming both `a` and `b`.
template <class Call>
void ExpectMismatchNaming(int rank, Call call, const char* a, const char* b) {
  try {
    call();
    ADD_FAILURE() << "rank " << rank << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH);
    EXPECT_THAT(e.what(), HasSubstr(a));
    EXPECT_THAT(e.what(), HasSubstr(b));
  }
}

// The names a call agrees on are built once per communicator, one per reduction: ranks passing
// different reductions of the same data still disagree, and the message names both.
TEST(VerifiedCommunicator, DifferentReductionsFailOnEveryRankNamingBoth) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    auto comm = Verified(rank, 2, domain);
    std::vector<float> in(4, 1.0f), out(4);
    for (int round = 0; round < 2; ++round) {  // the second call takes the names made for the first
      ExpectMismatchNaming(
          rank,
          [&] {
            comm->AllReduce(in.data(), out.data(), 4, ACL_FLOAT,
                            rank == 0 ? ReduceOp::kSum : ReduceOp::kMax);
          },
          "test AllReduce/sum", "test AllReduce/max");
    }
    std::vector<int64_t> counts = {2, 2}, displs = {0, 2};
    ExpectMismatchNaming(
        rank,
        [&] {
          comm->ReduceScatterV(in.data(), counts.data(), displs.data(), out.data(), 2, ACL_FLOAT,
                               rank == 0 ? ReduceOp::kProd : ReduceOp::kMin);
        },
        "test ReduceScatterV/prod", "test ReduceScatterV/min");
    comm->AllReduce(in.data(), out.data(), 4, ACL_FLOAT, ReduceOp::kMin);  // agreeing: passes
    EXPECT_EQ(out, std::vector<float>(4, 1.0f));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
