// BarrierOperation on thread ranks: no rank leaves before the last one arrives; an op with no
// tensors passes the base class's generic checks; ranks running another op get a mismatch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "op_harness.h"
#include "ops/barrier/barrier_param.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

OperationPtr MakeBarrier(int rank, int rankSize, const std::string& domain) {
  BarrierParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.commMode = COMM_MULTI_THREAD;
  param.backend = "lccl";
  param.commDomain = domain;
  Operation* raw = nullptr;
  EXPECT_EQ(CreateOperation(param, &raw), NO_ERROR) << LastErrorMessage();
  return OperationPtr(raw);
}

class BarrierGolden : public ::testing::TestWithParam<int> {};

// In every round one rank (a different one each round) arrives late. Each rank counts itself in
// just before it enters; a rank that leaves must see every rank of this round counted. The delay
// only gives an early leaver time to be caught; the assertion is on the counter.
TEST_P(BarrierGolden, NoRankLeavesBeforeTheLastArrives) {
  const int rankSize = GetParam();
  const std::string domain = UniqueDomain();
  constexpr int kRounds = 6;
  std::atomic<int> arrived{0};
  RunThreadRanks(rankSize, [&](int rank) {
    OperationPtr op = MakeBarrier(rank, rankSize, domain);
    ASSERT_NE(op, nullptr);
    for (int round = 0; round < kRounds; ++round) {
      if (rank == round % rankSize) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      arrived.fetch_add(1, std::memory_order_seq_cst);
      ASSERT_EQ(RunOperation(*op, {}, {}), NO_ERROR) << LastErrorMessage();
      EXPECT_GE(arrived.load(std::memory_order_seq_cst), rankSize * (round + 1))
          << "rank " << rank << " left round " << round << " before every rank arrived";
    }
  });
  EXPECT_EQ(arrived.load(), rankSize * kRounds);
}

// One Setup, many Executes: the op holds no per-call state that a second Execute would trip on.
TEST_P(BarrierGolden, RepeatedExecuteAfterOneSetup) {
  const int rankSize = GetParam();
  const std::string domain = UniqueDomain();
  constexpr int kRounds = 20;
  std::atomic<int> arrived{0};
  RunThreadRanks(rankSize, [&](int rank) {
    OperationPtr op = MakeBarrier(rank, rankSize, domain);
    ASSERT_NE(op, nullptr);
    VariantPack pack;
    uint64_t workspaceSize = 123;
    ASSERT_EQ(op->Setup(pack, workspaceSize, nullptr), NO_ERROR) << LastErrorMessage();
    EXPECT_EQ(workspaceSize, 0u);
    for (int round = 0; round < kRounds; ++round) {
      arrived.fetch_add(1);
      ASSERT_EQ(op->Execute(pack, nullptr, 0, nullptr), NO_ERROR) << LastErrorMessage();
      EXPECT_GE(arrived.load(), rankSize * (round + 1)) << "round " << round;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Barrier, BarrierGolden, ::testing::ValuesIn(GoldenRankSizes()),
                         [](const auto& info) { return Concat("R", info.param); });

TEST(BarrierErrors, HasNoTensors) {
  OperationPtr op = MakeOperation("BarrierOperation", {{"rank", 0}, {"rankSize", 2}});
  EXPECT_EQ(op->GetName(), "BarrierOperation");
  EXPECT_EQ(op->GetInputNum(), 0u);
  EXPECT_EQ(op->GetOutputNum(), 0u);
  std::vector<TensorDesc> out = {TensorDesc{}};
  EXPECT_EQ(op->InferShape({}, out), NO_ERROR) << LastErrorMessage();
  EXPECT_TRUE(out.empty());

  TensorDesc x;
  x.dtype = ACL_FLOAT;
  x.shape = MakeDims({2});
  EXPECT_EQ(op->InferShape({x}, out), ERROR_INVALID_IN_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("expects 0 inTensors"));
}

// Tensor-count errors are found before the communicator is touched, so one rank suffices.
TEST(BarrierErrors, RejectsTensorsBeforeCommunicating) {
  const LoneRank lone;
  OperationPtr op = MakeOperation("BarrierOperation", {{"rank", 0}, {"rankSize", 2}});
  std::vector<HostTensor> one = {HostTensor(ACL_FLOAT, {2})};
  std::vector<HostTensor> none;
  EXPECT_EQ(RunOperation(*op, Tensors(one), Tensors(none)), ERROR_INVALID_IN_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("BarrierOperation"));
  EXPECT_EQ(RunOperation(*op, Tensors(none), Tensors(one)), ERROR_INVALID_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outTensors"));
  VariantPack empty;
  EXPECT_EQ(op->Execute(empty, nullptr, 0, nullptr), ERROR_INVALID_TENSOR_INI_MATCH);
}

TEST(BarrierErrors, RejectsBadCommParams) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("BarrierOperation", R"({"rank":2,"rankSize":2})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rank = 2"));
  EXPECT_EQ(CreateOperation("BarrierOperation", R"({"rankSize":0})", &op), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rankSize"));
  // Barrier has no op fields: a Send/Recv field is an unknown key here.
  EXPECT_EQ(CreateOperation("BarrierOperation", R"({"rankSize":2,"destRank":1})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("destRank"));
  BarrierParam typed;
  typed.rankSize = 2;
  typed.rsv[3] = 1;
  EXPECT_EQ(CreateOperation(typed, &op), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rsv[3]"));
  EXPECT_EQ(op, nullptr);
}

// A rank that runs another collective where the others run Barrier must not be let through: all
// ranks fail, and the message names both ops and both ranks.
TEST(BarrierErrors, RankRunningAnotherOpGetsRankMismatchEverywhere) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    const nlohmann::json param = {{"rank", rank},
                                  {"rankSize", 3},
                                  {"commMode", 1},
                                  {"backend", "lccl"},
                                  {"commDomain", domain}};
    if (rank == 2) {
      OperationPtr op = MakeOperation("AllReduceOperation", param);
      std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {4})};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    } else {
      OperationPtr op = MakeOperation("BarrierOperation", param);
      EXPECT_EQ(RunOperation(*op, {}, {}), ERROR_RANK_MISMATCH);
    }
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 runs BarrierOperation"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 2 runs AllReduceOperation"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
