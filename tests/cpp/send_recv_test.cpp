// SendOperation / RecvOperation on thread ranks: a ring and every ordered pair, for every movable
// dtype and sizes 0, 1, odd and large; pair mismatches; param validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "op_harness.h"
#include "ops/recv/recv_param.h"
#include "ops/send/send_param.h"
#include "p2p_test_util.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

/// Empty, one element, odd, and large (the ring) or medium (all pairs: R·(R-1) messages).
std::vector<std::vector<int64_t>> Shapes(int64_t large) { return {{0}, {1}, {3, 7}, {large}}; }

template <class P>
P PairParam(int rank, int rankSize, const std::string& domain) {
  P param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.commMode = COMM_MULTI_THREAD;
  param.backend = "lccl";
  param.commDomain = domain;
  return param;
}

OperationPtr MakeSend(int rank, int rankSize, const std::string& domain, int dest) {
  SendParam param = PairParam<SendParam>(rank, rankSize, domain);
  param.destRank = dest;
  Operation* raw = nullptr;
  EXPECT_EQ(CreateOperation(param, &raw), NO_ERROR) << LastErrorMessage();
  return OperationPtr(raw);
}

OperationPtr MakeRecv(int rank, int rankSize, const std::string& domain, int src) {
  RecvParam param = PairParam<RecvParam>(rank, rankSize, domain);
  param.srcRank = src;
  Operation* raw = nullptr;
  EXPECT_EQ(CreateOperation(param, &raw), NO_ERROR) << LastErrorMessage();
  return OperationPtr(raw);
}

/// Sends this rank's message for `dst`; EXPECTs success.
void SendTo(int rank, int rankSize, const std::string& domain, int dst, DataType dtype,
            const std::vector<int64_t>& shape) {
  OperationPtr op = MakeSend(rank, rankSize, domain, dst);
  ASSERT_NE(op, nullptr);
  const int64_t n = NumElements(MakeDims(shape));
  std::vector<HostTensor> ins = {
      HostTensor::FromValues(dtype, shape, PairMessage(dtype, n, rank, dst))};
  std::vector<HostTensor> outs;
  ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
}

/// Receives from `src` and checks the data against the golden message, computed here.
void RecvFrom(int rank, int rankSize, const std::string& domain, int src, DataType dtype,
              const std::vector<int64_t>& shape) {
  OperationPtr op = MakeRecv(rank, rankSize, domain, src);
  ASSERT_NE(op, nullptr);
  // The template's data must not leak into y: give it values unlike any message.
  std::vector<HostTensor> ins = {
      HostTensor::FromValues(dtype, shape, TestValues(dtype, NumElements(MakeDims(shape)), 7, 99))};
  RunAndExpectMessage(*op, ins, dtype, shape, src, rank);
}

class SendRecvGolden : public ::testing::TestWithParam<RanksAndDtype> {};

// Every rank sends to rank+1 and receives from rank-1. Odd ranks receive first, so the ring has
// no cycle of blocked senders for any R.
TEST_P(SendRecvGolden, Ring) {
  const auto [rankSize, dtype] = GetParam();
  const std::string domain = UniqueDomain();
  for (const auto& shape : Shapes(65537)) {
    RunThreadRanks(rankSize, [&](int rank) {
      const int next = (rank + 1) % rankSize;
      const int prev = (rank + rankSize - 1) % rankSize;
      if (rank % 2 == 0) {
        SendTo(rank, rankSize, domain, next, dtype, shape);
        RecvFrom(rank, rankSize, domain, prev, dtype, shape);
      } else {
        RecvFrom(rank, rankSize, domain, prev, dtype, shape);
        SendTo(rank, rankSize, domain, next, dtype, shape);
      }
    });
  }
}

// Every ordered pair (src, dst) in one global order; each rank takes part in the steps that name
// it. The earliest unfinished step always has both of its ranks waiting on it, so this cannot
// deadlock, and it exercises back-to-back messages on the same channel.
TEST_P(SendRecvGolden, AllPairsInFixedOrder) {
  const auto [rankSize, dtype] = GetParam();
  const std::string domain = UniqueDomain();
  for (const auto& shape : Shapes(4097)) {
    RunThreadRanks(rankSize, [&](int rank) {
      for (int src = 0; src < rankSize; ++src) {
        for (int dst = 0; dst < rankSize; ++dst) {
          if (src == dst) continue;
          if (rank == src) SendTo(rank, rankSize, domain, dst, dtype, shape);
          if (rank == dst) RecvFrom(rank, rankSize, domain, src, dtype, shape);
        }
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(SendRecv, SendRecvGolden,
                         ::testing::Combine(::testing::Values(2, 3, 4, 7),
                                            ::testing::ValuesIn(PointToPointDtypes())),
                         RanksAndDtypeName);

// Only element count and dtype must match; the shapes may differ (the message is flat).
TEST(SendRecvGoldenShapes, ShapesMayDifferWhenCountsAgree) {
  const std::string domain = UniqueDomain();
  const std::vector<double> values = TestValues(ACL_INT32, 6, 3, 0);
  RunThreadRanks(2, [&](int rank) {
    if (rank == 0) {
      OperationPtr op = MakeSend(0, 2, domain, 1);
      std::vector<HostTensor> ins = {HostTensor::FromValues(ACL_INT32, {2, 3}, values)};
      std::vector<HostTensor> outs;
      EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
    } else {
      OperationPtr op = MakeRecv(1, 2, domain, 0);
      std::vector<HostTensor> ins = {HostTensor(ACL_INT32, {6})};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
      ExpectExactly(outs[0], values, "rank 1");
    }
  });
}

// Rank 0 sends `sendCount` elements of `sendDtype`; rank 1 receives `recvCount` of `recvDtype`.
// Both must fail with ERROR_RANK_MISMATCH naming both ranks, and rank 1's y stays untouched.
void ExpectPairMismatch(int64_t sendCount, DataType sendDtype, int64_t recvCount,
                        DataType recvDtype) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = rank == 0 ? MakeSend(0, 2, domain, 1) : MakeRecv(1, 2, domain, 0);
    ASSERT_NE(op, nullptr);
    const DataType dtype = rank == 0 ? sendDtype : recvDtype;
    const int64_t n = rank == 0 ? sendCount : recvCount;
    std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {n}, TestValues(dtype, n, 5, 0))};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    const std::vector<double> before = rank == 1 ? outs[0].ToDoubles() : std::vector<double>{};
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH)
        << LastErrorMessage();
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr(std::to_string(sendCount)));
    EXPECT_THAT(LastErrorMessage(), HasSubstr(std::to_string(recvCount)));
    if (rank == 1) ExpectExactly(outs[0], before, "rank 1's y after a mismatch");
  });
}

TEST(SendRecvErrors, CountMismatchFailsOnBothRanks) {
  ExpectPairMismatch(5, ACL_FLOAT, 4, ACL_FLOAT);
}

TEST(SendRecvErrors, EmptySendToNonEmptyRecvFailsOnBothRanks) {
  ExpectPairMismatch(0, ACL_INT8, 3, ACL_INT8);
}

TEST(SendRecvErrors, DtypeMismatchFailsOnBothRanks) {
  ExpectPairMismatch(4, ACL_FLOAT, 4, ACL_INT32);
}

// A failed pair leaves the channel usable: the next matching pair delivers its data.
TEST(SendRecvErrors, MismatchDoesNotPoisonTheNextPair) {
  const std::string domain = UniqueDomain();
  const std::vector<double> values = TestValues(ACL_INT16, 9, 11, 0);
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = rank == 0 ? MakeSend(0, 2, domain, 1) : MakeRecv(1, 2, domain, 0);
    ASSERT_NE(op, nullptr);
    std::vector<HostTensor> bad = {HostTensor(ACL_INT16, {rank == 0 ? 8 : 9})};
    std::vector<HostTensor> badOuts = AllocateOutputs(*op, Tensors(bad));
    EXPECT_EQ(RunOperation(*op, Tensors(bad), Tensors(badOuts)), ERROR_RANK_MISMATCH);
    std::vector<HostTensor> ins = {rank == 0 ? HostTensor::FromValues(ACL_INT16, {9}, values)
                                             : HostTensor(ACL_INT16, {9})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
    if (rank == 1) ExpectExactly(outs[0], values, "rank 1 after a mismatch");
  });
}

struct PeerCase {
  const char* op;
  const char* field;
  int rank;
  int rankSize;
  int peer;
  const char* why;  // a fragment the message must contain
};

class SendRecvPeerErrors : public ::testing::TestWithParam<PeerCase> {};

TEST_P(SendRecvPeerErrors, RejectedWithFieldNamed) {
  const PeerCase c = GetParam();
  const nlohmann::json param = {{"rank", c.rank}, {"rankSize", c.rankSize}, {c.field, c.peer}};
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation(c.op, param, &op), ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr(c.op));
  EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat(c.field, " = ", c.peer)));
  EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat("rank ", c.rank)));
  EXPECT_THAT(LastErrorMessage(), HasSubstr(c.why));
}

INSTANTIATE_TEST_SUITE_P(
    SendRecv, SendRecvPeerErrors,
    ::testing::Values(PeerCase{"SendOperation", "destRank", 1, 4, 1, "this rank"},
                      PeerCase{"SendOperation", "destRank", 0, 4, 4, "rankSize = 4"},
                      PeerCase{"SendOperation", "destRank", 0, 4, -1, "rankSize = 4"},
                      PeerCase{"SendOperation", "destRank", 0, 1, 0, "this rank"},
                      PeerCase{"RecvOperation", "srcRank", 2, 4, 2, "this rank"},
                      PeerCase{"RecvOperation", "srcRank", 0, 4, 4, "rankSize = 4"},
                      PeerCase{"RecvOperation", "srcRank", 0, 4, -1, "rankSize = 4"},
                      PeerCase{"RecvOperation", "srcRank", 0, 1, 0, "this rank"},
                      // SendRecv's other peer field defaults to 0, a valid peer of these ranks.
                      PeerCase{"SendRecvOperation", "destRank", 1, 4, 1, "this rank"},
                      PeerCase{"SendRecvOperation", "destRank", 2, 4, 4, "rankSize = 4"},
                      PeerCase{"SendRecvOperation", "srcRank", 3, 4, 3, "this rank"},
                      PeerCase{"SendRecvOperation", "srcRank", 1, 4, -1, "rankSize = 4"}),
    [](const auto& info) {
      const PeerCase& c = info.param;
      return Concat(c.op, "_", c.field, "_rank", c.rank, "_of", c.rankSize, "_peer",
                    c.peer < 0 ? "Minus1" : std::to_string(c.peer));
    });

// The typed overloads run the same validation as the JSON path.
TEST(SendRecvErrors, TypedCreateRejectsSelfPeer) {
  SendParam send;
  send.rank = 1;
  send.rankSize = 2;
  send.destRank = 1;
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation(send, &op), ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("destRank"));
  RecvParam recv;
  recv.rank = 0;
  recv.rankSize = 2;
  recv.srcRank = 3;
  EXPECT_EQ(CreateOperation(recv, &op), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("srcRank"));
}

TEST(SendRecvErrors, PeerMustBeAnIntegerInJson) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("SendOperation", R"({"rank":0,"rankSize":2,"destRank":"1"})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("destRank"));
  EXPECT_EQ(CreateOperation("RecvOperation", R"({"rank":1,"rankSize":2,"srcRank":0.0})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("srcRank"));
}

TEST(SendRecvErrors, ShapesAndTensorCounts) {
  const LoneRank lone;
  OperationPtr send =
      MakeOperation("SendOperation", {{"rank", 0}, {"rankSize", 2}, {"destRank", 1}});
  EXPECT_EQ(send->GetInputNum(), 1u);
  EXPECT_EQ(send->GetOutputNum(), 0u);
  OperationPtr recv =
      MakeOperation("RecvOperation", {{"rank", 1}, {"rankSize", 2}, {"srcRank", 0}});
  EXPECT_EQ(recv->GetInputNum(), 1u);
  EXPECT_EQ(recv->GetOutputNum(), 1u);

  // Recv's y must have the template's shape and dtype; checked before any communication.
  ExpectOutputMustFollowInput(*recv);
  // Send has no outputs.
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {4})};
  std::vector<HostTensor> extra = {HostTensor(ACL_FLOAT, {4})};
  EXPECT_EQ(RunOperation(*send, Tensors(ins), Tensors(extra)), ERROR_INVALID_TENSOR_NUM);
  std::vector<HostTensor> none;
  EXPECT_EQ(RunOperation(*send, Tensors(none), Tensors(none)), ERROR_INVALID_IN_TENSOR_NUM);
}

}  // namespace
}  // namespace testing
}  // namespace collops
