// Golden tests of AllReduceOperation on thread ranks: every reduction × dtype × R × size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "op_harness.h"
#include "ops/all_reduce/all_reduce_param.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

struct AllReduceCase {
  int rankSize;
  DataType dtype;
  ReduceOp op;
};

class AllReduceGolden : public ::testing::TestWithParam<std::tuple<int, DataType, ReduceOp>> {};

TEST_P(AllReduceGolden, MatchesReference) {
  const auto [rankSize, dtype, op] = GetParam();
  const std::string domain = UniqueDomain();
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{0}, {1}, {3, 5}, {2, 3, 37}, {4099}}) {
    const int64_t n = NumElements(MakeDims(shape));
    std::vector<std::vector<double>> inputs;
    for (int r = 0; r < rankSize; ++r) {
      inputs.push_back(TestValues(dtype, n, 42, r, op == ReduceOp::kProd));
    }
    const std::vector<double> golden = FoldRanks(inputs, op);
    RunThreadRanks(rankSize, [&](int rank) {
      AllReduceParam param;
      param.rank = rank;
      param.rankSize = rankSize;
      param.commMode = COMM_MULTI_THREAD;
      param.commDomain = domain;
      param.allReduceType = ReduceOpName(op);
      Operation* raw = nullptr;
      ASSERT_EQ(CreateOperation(param, &raw), NO_ERROR) << LastErrorMessage();
      OperationPtr operation(raw);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, shape, inputs[rank])};
      std::vector<HostTensor> outs = AllocateOutputs(*operation, Tensors(ins));
      ASSERT_EQ(RunOperation(*operation, Tensors(ins), Tensors(outs)), NO_ERROR)
          << LastErrorMessage();
      ExpectClose(outs[0], golden, Concat("rank ", rank, " shape ", DimsToString(MakeDims(shape))));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(AllReduce, AllReduceGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(ReducibleDtypes()),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kProd,
                                                              ReduceOp::kMax, ReduceOp::kMin)),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         DtypeTestName(std::get<1>(info.param)), "_",
                                         ReduceOpName(std::get<2>(info.param)));
                         });

TEST(AllReduceErrors, RejectsUnknownReduceType) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllReduceOperation",
                            R"({"rank":0,"rankSize":2,"allReduceType":"proo"})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), ::testing::HasSubstr("allReduceType"));
  EXPECT_THAT(LastErrorMessage(), ::testing::HasSubstr("proo"));
}

TEST(AllReduceErrors, RejectsNonReducibleDtype) {
  OperationPtr op = MakeOperation("AllReduceOperation", {{"rank", 0}, {"rankSize", 1}});
  std::vector<TensorDesc> out;
  TensorDesc x;
  x.dtype = ACL_UINT8;
  x.shape = MakeDims({4});
  EXPECT_EQ(op->InferShape({x}, out), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), ::testing::HasSubstr("uint8"));
}

TEST(AllReduceErrors, RanksWithDifferentCountsGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    OperationPtr op =
        MakeOperation("AllReduceOperation",
                      {{"rank", rank}, {"rankSize", 3}, {"commMode", 1}, {"commDomain", domain}});
    const int64_t n = rank == 2 ? 5 : 4;
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(ACL_FLOAT, {n}, TestValues(ACL_FLOAT, n, 1, rank))};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), ::testing::HasSubstr("rank 2"));
  });
}

// The name a call agrees on is the operation's own reduction (built once, at creation): ranks
// created with different allReduceTypes disagree, named, on every call.
TEST(AllReduceErrors, RanksWithDifferentReduceTypesGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op =
        MakeOperation("AllReduceOperation", {{"rank", rank},
                                             {"rankSize", 2},
                                             {"commMode", 1},
                                             {"commDomain", domain},
                                             {"allReduceType", rank ? "max" : "sum"}});
    std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {4})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    for (int call = 0; call < 2; ++call) {
      EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
      EXPECT_THAT(LastErrorMessage(), ::testing::HasSubstr("rank 0 runs AllReduceOperation/sum"));
      EXPECT_THAT(LastErrorMessage(), ::testing::HasSubstr("rank 1 runs AllReduceOperation/max"));
    }
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
