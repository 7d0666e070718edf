// Golden and error tests of AllGatherOperation on thread ranks: every movable dtype × R × shape.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "op_harness.h"
#include "ops/all_gather/all_gather_param.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

AllGatherParam ThreadParam(int rank, int rankSize, const std::string& domain) {
  AllGatherParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.commMode = COMM_MULTI_THREAD;
  param.commDomain = domain;
  return param;
}

OperationPtr MakeAllGather(const AllGatherParam& param) {
  Operation* raw = nullptr;
  EXPECT_EQ(CreateOperation(param, &raw), NO_ERROR) << LastErrorMessage();
  return OperationPtr(raw);
}

class AllGatherGolden : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(AllGatherGolden, MatchesReference) {
  const auto [rankSize, dtype] = GetParam();
  const std::string domain = UniqueDomain();
  // Empty, one element, odd lengths, and 7 dims (y then has the maximum 8).
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {0}, {1}, {3, 5}, {2, 0, 4}, {2, 3, 37}, {4099}, {1, 2, 1, 3, 1, 2, 1}}) {
    const int64_t n = NumElements(MakeDims(shape));
    std::vector<std::vector<double>> inputs;
    std::vector<double> golden;  // y.flat = concat over ranks of x.flat, in rank order
    for (int r = 0; r < rankSize; ++r) {
      inputs.push_back(TestValues(dtype, n, 7, r));
      golden.insert(golden.end(), inputs[r].begin(), inputs[r].end());
    }
    std::vector<int64_t> yShape = {rankSize};
    yShape.insert(yShape.end(), shape.begin(), shape.end());
    RunThreadRanks(rankSize, [&](int rank) {
      OperationPtr op = MakeAllGather(ThreadParam(rank, rankSize, domain));
      ASSERT_NE(op, nullptr);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, shape, inputs[rank])};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      ASSERT_EQ(outs.size(), 1u);
      EXPECT_EQ(outs[0].shape(), yShape);
      EXPECT_EQ(outs[0].dtype(), dtype);
      ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
      ExpectExactly(outs[0], golden, Concat("rank ", rank, " x ", DimsToString(MakeDims(shape))));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(AllGather, AllGatherGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(MovableDtypes())),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         DtypeTestName(std::get<1>(info.param)));
                         });

TEST(AllGatherErrors, EightDimInputHasNoRoomForTheRankDim) {
  OperationPtr op = MakeOperation("AllGatherOperation", {{"rank", 0}, {"rankSize", 2}});
  TensorDesc x;
  x.dtype = ACL_FLOAT;
  x.shape = MakeDims({1, 2, 1, 2, 1, 2, 1, 2});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({x}, out), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("AllGatherOperation"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("x has 8 dims"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("9 dims"));
}

TEST(AllGatherErrors, RejectsRankOutsideRankSize) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllGatherOperation", R"({"rank":3,"rankSize":3})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rank = 3"));
}

TEST(AllGatherErrors, RejectsUnknownKey) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllGatherOperation", R"({"rank":0,"rankSize":2,"root":1})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("root"));
}

TEST(AllGatherErrors, RejectsOutputOfWrongShape) {
  OperationPtr op = MakeAllGather(ThreadParam(0, 1, UniqueDomain()));
  std::vector<HostTensor> ins = {HostTensor(ACL_INT32, {4})};
  std::vector<HostTensor> outs = {HostTensor(ACL_INT32, {4})};  // must be [1, 4]
  EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("[1, 4]"));
}

TEST(AllGatherErrors, RanksWithDifferentCountsGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    OperationPtr op = MakeAllGather(ThreadParam(rank, 3, domain));
    const int64_t n = rank == 2 ? 5 : 4;
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(ACL_FLOAT, {n}, TestValues(ACL_FLOAT, n, 1, rank))};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 2"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("element count"));
  });
}

TEST(AllGatherErrors, RanksWithDifferentDtypesGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeAllGather(ThreadParam(rank, 2, domain));
    const DataType dtype = rank == 1 ? ACL_INT16 : ACL_FLOAT16;
    std::vector<HostTensor> ins = {HostTensor(dtype, {6})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 has float16"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1 has int16"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
