// Golden and error tests of ReduceScatterOperation on thread ranks: every reduction × dtype × R ×
// shape (empty and odd-sized chunks included), plus one test per validation rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "op_harness.h"
#include "ops/reduce_scatter/reduce_scatter_param.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

class ReduceScatterGolden : public ::testing::TestWithParam<std::tuple<int, DataType, ReduceOp>> {};

ReduceScatterParam ThreadParam(int rank, int rankSize, const std::string& domain,
                               const std::string& reduceType = "sum") {
  ReduceScatterParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.commMode = COMM_MULTI_THREAD;
  param.commDomain = domain;
  param.reduceType = reduceType;
  return param;
}

TEST_P(ReduceScatterGolden, MatchesReference) {
  const auto [rankSize, dtype, op] = GetParam();
  const std::string domain = UniqueDomain();
  // Rows per rank n and the trailing dims: n = 0 is an empty chunk for every rank.
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> shapes = {
      {0, {3}}, {1, {}}, {3, {5}}, {2, {3, 7}}, {1, {1031}}, {37, {}}};
  for (const auto& [n, inner] : shapes) {
    std::vector<int64_t> shape = {rankSize * n};
    shape.insert(shape.end(), inner.begin(), inner.end());
    const int64_t numel = NumElements(MakeDims(shape));
    const int64_t chunk = numel / rankSize;
    std::vector<std::vector<double>> inputs;
    for (int r = 0; r < rankSize; ++r) {
      inputs.push_back(TestValues(dtype, numel, 7, r, op == ReduceOp::kProd));
    }
    const std::vector<double> reduced = FoldRanks(inputs, op);
    RunThreadRanks(rankSize, [&](int rank) {
      Operation* raw = nullptr;
      ASSERT_EQ(CreateOperation(ThreadParam(rank, rankSize, domain, ReduceOpName(op)), &raw),
                NO_ERROR)
          << LastErrorMessage();
      OperationPtr operation(raw);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, shape, inputs[rank])};
      std::vector<HostTensor> outs = AllocateOutputs(*operation, Tensors(ins));
      std::vector<int64_t> expectedShape = shape;
      expectedShape[0] = n;
      ASSERT_EQ(outs[0].shape(), expectedShape);
      ASSERT_EQ(RunOperation(*operation, Tensors(ins), Tensors(outs)), NO_ERROR)
          << LastErrorMessage();
      const std::vector<double> golden(reduced.begin() + rank * chunk,
                                       reduced.begin() + (rank + 1) * chunk);
      ExpectClose(outs[0], golden,
                  Concat("rank ", rank, " x shape ", DimsToString(MakeDims(shape))));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(ReduceScatter, ReduceScatterGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(ReducibleDtypes()),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kProd,
                                                              ReduceOp::kMax, ReduceOp::kMin)),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         DtypeTestName(std::get<1>(info.param)), "_",
                                         ReduceOpName(std::get<2>(info.param)));
                         });

TEST(ReduceScatterErrors, RejectsUnknownReduceType) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("ReduceScatterOperation",
                            R"({"rank":0,"rankSize":2,"reduceType":"avg"})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("reduceType"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("avg"));
}

TEST(ReduceScatterErrors, TypedCreateRejectsUnknownReduceType) {
  ReduceScatterParam param;
  param.rankSize = 2;
  param.reduceType = "Sum";
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation(param, &op), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("reduceType = \"Sum\""));
}

TEST(ReduceScatterErrors, InferShapeRejectsDim0NotDivisibleByRankSize) {
  OperationPtr op = MakeOperation("ReduceScatterOperation", {{"rank", 1}, {"rankSize", 3}});
  TensorDesc x;
  x.dtype = ACL_FLOAT;
  x.shape = MakeDims({7, 2});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({x}, out), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("dim0 = 7"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rankSize = 3"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1"));
}

TEST(ReduceScatterErrors, SetupRejectsDim0NotDivisibleByRankSize) {
  // The rule is checked before any communicator is acquired, so one rank of two can run alone.
  const LoneRank lone;
  OperationPtr op = MakeOperation(
      "ReduceScatterOperation",
      {{"rank", 0}, {"rankSize", 2}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
  std::vector<HostTensor> ins = {HostTensor(ACL_INT32, {5})};
  std::vector<HostTensor> outs = {HostTensor(ACL_INT32, {2})};
  EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("dim0 = 5"));
}

TEST(ReduceScatterErrors, RejectsNonReducibleDtype) {
  OperationPtr op = MakeOperation("ReduceScatterOperation", {{"rank", 0}, {"rankSize", 1}});
  TensorDesc x;
  x.dtype = ACL_DOUBLE;
  x.shape = MakeDims({4});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({x}, out), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("float64"));
}

TEST(ReduceScatterErrors, RejectsOutputOfWrongShape) {
  OperationPtr op = MakeOperation(
      "ReduceScatterOperation",
      {{"rank", 0}, {"rankSize", 1}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {4, 2})};
  std::vector<HostTensor> outs = {HostTensor(ACL_FLOAT, {2, 2})};
  EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outTensors[0] (y)"));
}

TEST(ReduceScatterErrors, RanksWithDifferentCountsGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    Operation* raw = nullptr;
    ASSERT_EQ(CreateOperation(ThreadParam(rank, 3, domain), &raw), NO_ERROR);
    OperationPtr op(raw);
    const int64_t rows = rank == 2 ? 9 : 6;
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(ACL_FLOAT, {rows}, TestValues(ACL_FLOAT, rows, 1, rank))};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 has 6"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 2 has 9"));
  });
}

TEST(ReduceScatterErrors, RanksWithDifferentReduceTypesGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    Operation* raw = nullptr;
    ASSERT_EQ(CreateOperation(ThreadParam(rank, 2, domain, rank == 0 ? "sum" : "max"), &raw),
              NO_ERROR);
    OperationPtr op(raw);
    std::vector<HostTensor> ins = {HostTensor(ACL_INT16, {4})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 runs ReduceScatterOperation/sum"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1 runs ReduceScatterOperation/max"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
