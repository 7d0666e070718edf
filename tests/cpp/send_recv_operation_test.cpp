// SendRecvOperation on thread ranks: rings with no ordering between ranks for every movable dtype,
// pair swaps, interplay with plain Send/Recv peers, mismatches, overlap and tensor rules. The
// process, mpi, c10d and hierarchical suites run its ring through op_suite.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "collops/param_json.h"
#include "op_harness.h"
#include "p2p_refusal_suite.h"
#include "p2p_test_util.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

/// ThreadRankParam as JSON, with `extra` on top.
nlohmann::json ThreadParam(int rank, int rankSize, const std::string& domain,
                           const nlohmann::json& extra) {
  nlohmann::json param = ParamToJson(ThreadRankParam(rank, rankSize, domain));
  param.update(extra);
  return param;
}

OperationPtr MakeSendRecv(int rank, int rankSize, const std::string& domain, int dest, int src) {
  return MakeOperation("SendRecvOperation",
                       ThreadParam(rank, rankSize, domain, {{"destRank", dest}, {"srcRank", src}}));
}

/// One SendRecv of this rank's message for `dest`, checked against what `src` sends to it.
void SwapAndCheck(int rank, int rankSize, const std::string& domain, int dest, int src,
                  DataType dtype, const std::vector<int64_t>& shape) {
  OperationPtr op = MakeSendRecv(rank, rankSize, domain, dest, src);
  std::vector<HostTensor> ins = {HostTensor::FromValues(
      dtype, shape, PairMessage(dtype, NumElements(MakeDims(shape)), rank, dest))};
  RunAndExpectMessage(*op, ins, dtype, shape, src, rank);
}

class SendRecvOperationGolden : public ::testing::TestWithParam<RanksAndDtype> {};

// Every rank sends to rank + 1 and receives from rank - 1, all at once: with Send and Recv this
// ring needs even/odd ordering; one SendRecv per rank needs none. 65537 elements pass through
// several staging rounds (and process_vm_readv between processes).
TEST_P(SendRecvOperationGolden, RingWithoutOrdering) {
  const auto [rankSize, dtype] = GetParam();
  const std::string domain = UniqueDomain();
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{0}, {1}, {3, 7}, {65537}}) {
    RunThreadRanks(rankSize, [&](int rank) {
      SwapAndCheck(rank, rankSize, domain, (rank + 1) % rankSize, (rank + rankSize - 1) % rankSize,
                   dtype, shape);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(SendRecvOperation, SendRecvOperationGolden,
                         ::testing::Combine(::testing::Values(2, 3, 4, 7),
                                            ::testing::ValuesIn(PointToPointDtypes())),
                         RanksAndDtypeName);

// destRank == srcRank: ranks swap with a partner (0<->1, 2<->3), then the ring runs backwards
// on the same operations' communicator, so both channels of every pair carry traffic.
TEST(SendRecvOperationPatterns, PairSwapThenReverseRing) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(4, [&](int rank) {
    SwapAndCheck(rank, 4, domain, rank ^ 1, rank ^ 1, ACL_FLOAT, {4099});
    SwapAndCheck(rank, 4, domain, (rank + 3) % 4, (rank + 1) % 4, ACL_INT8, {70001});
  });
}

// A SendRecv's peers may run plain Send and Recv in either order: rank 0 runs one SendRecv,
// rank 1 receives from it and then sends on, rank 2 sends to rank 0 and then receives.
TEST(SendRecvOperationPatterns, PeersRunningSendAndRecv) {
  const std::string domain = UniqueDomain();
  const int64_t n = 20000;
  RunThreadRanks(3, [&](int rank) {
    if (rank == 0) {
      SwapAndCheck(0, 3, domain, 1, 2, ACL_INT32, {n});
      return;
    }
    const int recvFrom = rank == 1 ? 0 : 1;
    const int sendTo = rank == 1 ? 2 : 0;
    OperationPtr send =
        MakeOperation("SendOperation", ThreadParam(rank, 3, domain, {{"destRank", sendTo}}));
    OperationPtr recv =
        MakeOperation("RecvOperation", ThreadParam(rank, 3, domain, {{"srcRank", recvFrom}}));
    std::vector<HostTensor> sendIns = {
        HostTensor::FromValues(ACL_INT32, {n}, PairMessage(ACL_INT32, n, rank, sendTo))};
    std::vector<HostTensor> none;
    std::vector<HostTensor> recvIns = {HostTensor(ACL_INT32, {n})};
    std::vector<HostTensor> recvOuts = AllocateOutputs(*recv, Tensors(recvIns));
    auto runSend = [&] {
      EXPECT_EQ(RunOperation(*send, Tensors(sendIns), Tensors(none)), NO_ERROR)
          << LastErrorMessage();
    };
    auto runRecv = [&] {
      ASSERT_EQ(RunOperation(*recv, Tensors(recvIns), Tensors(recvOuts)), NO_ERROR)
          << LastErrorMessage();
      ExpectExactly(recvOuts[0], PairMessage(ACL_INT32, n, recvFrom, rank), Concat("rank ", rank));
    };
    if (rank == 1) {
      runRecv();
      runSend();
    } else {
      runSend();
      runRecv();
    }
  });
}

// A 3-rank ring where rank 0 sends and expects 5 elements and the others 4: the channels 0->1
// and 2->0 disagree, 1->2 agrees. Every rank fails with ERROR_RANK_MISMATCH; nothing is written
// by a refused message, the agreeing one is delivered, and the next matching call is golden.
TEST(SendRecvOperationErrors, MismatchedChannelsFailBothSidesOthersDeliver) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    const int dest = (rank + 1) % 3, src = (rank + 2) % 3;
    OperationPtr op = MakeSendRecv(rank, 3, domain, dest, src);
    const int64_t n = rank == 0 ? 5 : 4;
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(ACL_FLOAT, {n}, PairMessage(ACL_FLOAT, n, rank, dest))};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    const std::vector<double> before = outs[0].ToDoubles();
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH)
        << "rank " << rank << ": " << LastErrorMessage();
    EXPECT_THAT(LastErrorMessage(), HasSubstr("5"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("4"));
    if (rank == 2) {
      ExpectExactly(outs[0], PairMessage(ACL_FLOAT, 4, 1, 2),
                    "rank 2's y from the agreeing rank 1");
    } else {
      ExpectExactly(outs[0], before, Concat("rank ", rank, "'s y after a refused message"));
    }
    SwapAndCheck(rank, 3, domain, dest, src, ACL_FLOAT, {6});
  });
}

// The peer may read x while y is being written, so y may not share bytes with x.
TEST(SendRecvOperationErrors, OutputOverlappingInputIsRejected) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeSendRecv(rank, 2, domain, 1 - rank, 1 - rank);
    HostTensor buffer = HostTensor::FromValues(ACL_INT32, {8}, TestValues(ACL_INT32, 8, 1, rank));
    const std::vector<double> before = buffer.ToDoubles();
    Tensor x = buffer.tensor();
    x.desc.shape = MakeDims({6});
    x.dataSize = 6 * sizeof(int32_t);
    for (int64_t shift : {0, 2}) {  // the same buffer; y two elements into x
      Tensor y = x;
      y.deviceData = static_cast<int32_t*>(x.deviceData) + shift;
      EXPECT_EQ(RunOperation(*op, {x}, {y}), ERROR_INVALID_PARAM) << "shift " << shift;
      EXPECT_THAT(LastErrorMessage(), HasSubstr("SendRecvOperation"));
      EXPECT_THAT(LastErrorMessage(), HasSubstr("y overlaps x"));
    }
    ExpectExactly(buffer, before, "the buffer after refused calls");
    // Adjacent, not overlapping: x = elements 0..3, y = elements 4..7.
    x.desc.shape = MakeDims({4});
    x.dataSize = 4 * sizeof(int32_t);
    Tensor y = x;
    y.deviceData = static_cast<int32_t*>(x.deviceData) + 4;
    ASSERT_EQ(RunOperation(*op, {x}, {y}), NO_ERROR) << LastErrorMessage();
    std::vector<double> golden(before.begin(), before.begin() + 4);
    const std::vector<double> peer = TestValues(ACL_INT32, 8, 1, 1 - rank);
    golden.insert(golden.end(), peer.begin(), peer.begin() + 4);
    ExpectExactly(buffer, golden, Concat("rank ", rank, " x then the peer's x"));
  });
}

// One rank of a pair refusing its own tensors makes its peer fail at once naming it
// (p2p_refusal_suite.h); rank 2 of three only takes part in the Barriers.
TEST(SendRecvOperationErrors, ARankRefusingItsTensorsFailsItsPeerAtOnce) {
  for (int rankSize : {2, 3}) {
    const std::string domain = UniqueDomain();
    RunThreadRanks(rankSize, [&](int rank) {
      RunPointToPointRefusals(ThreadJob(rank, rankSize, domain), /*promptSeconds=*/10);
    });
  }
}

TEST(SendRecvOperationErrors, TensorCountsShapeAndDtype) {
  const LoneRank lone;
  OperationPtr op = MakeOperation("SendRecvOperation",
                                  {{"rank", 0}, {"rankSize", 2}, {"destRank", 1}, {"srcRank", 1}});
  EXPECT_EQ(op->GetInputNum(), 1u);
  EXPECT_EQ(op->GetOutputNum(), 1u);
  ExpectOutputMustFollowInput(*op);
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {4})};
  std::vector<HostTensor> none;
  EXPECT_EQ(RunOperation(*op, Tensors(none), Tensors(ins)), ERROR_INVALID_IN_TENSOR_NUM);
}

}  // namespace
}  // namespace testing
}  // namespace collops
