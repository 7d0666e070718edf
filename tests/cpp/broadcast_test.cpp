// Golden and error tests of BroadcastOperation on thread ranks: every movable dtype × R × root
// (first and last rank) × size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "op_harness.h"
#include "ops/broadcast/broadcast_param.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

BroadcastParam ThreadParam(int rank, int rankSize, int root, const std::string& domain) {
  BroadcastParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.rankRoot = root;
  param.commMode = COMM_MULTI_THREAD;
  param.commDomain = domain;
  return param;
}

OperationPtr MakeBroadcast(const BroadcastParam& param) {
  Operation* raw = nullptr;
  EXPECT_EQ(CreateOperation(param, &raw), NO_ERROR) << LastErrorMessage();
  return OperationPtr(raw);
}

/// (rankSize, dtype, root is the last rank rather than rank 0)
class BroadcastGolden : public ::testing::TestWithParam<std::tuple<int, DataType, bool>> {};

TEST_P(BroadcastGolden, EveryRankGetsTheRootsData) {
  const auto [rankSize, dtype, lastRoot] = GetParam();
  const int root = lastRoot ? rankSize - 1 : 0;
  const std::string domain = UniqueDomain();
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{0}, {1}, {3, 5}, {4, 0}, {2, 3, 37}, {4099}}) {
    const int64_t n = NumElements(MakeDims(shape));
    std::vector<std::vector<double>> inputs;
    for (int r = 0; r < rankSize; ++r) inputs.push_back(TestValues(dtype, n, 11, r));
    const std::vector<double> golden = inputs[root];
    RunThreadRanks(rankSize, [&](int rank) {
      OperationPtr op = MakeBroadcast(ThreadParam(rank, rankSize, root, domain));
      ASSERT_NE(op, nullptr);
      EXPECT_EQ(op->GetInputNum(), 1u);
      EXPECT_EQ(op->GetOutputNum(), 0u);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, shape, inputs[rank])};
      ASSERT_EQ(RunOperation(*op, Tensors(ins), {}), NO_ERROR) << LastErrorMessage();
      ExpectExactly(ins[0], golden,
                    Concat("rank ", rank, " root ", root, " x ", DimsToString(MakeDims(shape))));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Broadcast, BroadcastGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(MovableDtypes()),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         DtypeTestName(std::get<1>(info.param)),
                                         std::get<2>(info.param) ? "_rootLast" : "_root0");
                         });

TEST(BroadcastErrors, RejectsRankRootNotBelowRankSize) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("BroadcastOperation", R"({"rank":0,"rankSize":2,"rankRoot":2})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("BroadcastOperation"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rankRoot = 2"));

  BroadcastParam param = ThreadParam(0, 4, 4, "");
  EXPECT_EQ(CreateOperation(param, &op), ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rankRoot = 4"));
}

TEST(BroadcastErrors, RejectsNegativeRankRoot) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation(ThreadParam(0, 4, -1, ""), &op), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rankRoot = -1"));
}

TEST(BroadcastErrors, RejectsAnOutputTensor) {
  OperationPtr op = MakeBroadcast(ThreadParam(0, 1, 0, UniqueDomain()));
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {3})};
  std::vector<HostTensor> outs = {HostTensor(ACL_FLOAT, {3})};
  EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_INVALID_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outTensors"));
}

TEST(BroadcastErrors, RanksWithDifferentRootsGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    OperationPtr op = MakeBroadcast(ThreadParam(rank, 3, rank == 2 ? 1 : 0, domain));
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(ACL_INT32, {5}, TestValues(ACL_INT32, 5, 3, rank))};
    const std::vector<double> before = ins[0].ToDoubles();
    EXPECT_EQ(RunOperation(*op, Tensors(ins), {}), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 has rankRoot 0"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 2 has 1"));
    ExpectExactly(ins[0], before, "x must be untouched after a mismatch");
  });
}

TEST(BroadcastErrors, RanksWithDifferentCountsGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(4, [&](int rank) {
    OperationPtr op = MakeBroadcast(ThreadParam(rank, 4, 3, domain));
    const int64_t n = rank == 1 ? 7 : 8;
    std::vector<HostTensor> ins = {HostTensor(ACL_BF16, {n})};
    EXPECT_EQ(RunOperation(*op, Tensors(ins), {}), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 has 8"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1 has 7"));
  });
}

TEST(BroadcastErrors, RanksWithDifferentDtypesGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeBroadcast(ThreadParam(rank, 2, 0, domain));
    std::vector<HostTensor> ins = {HostTensor(rank == 0 ? ACL_INT64 : ACL_DOUBLE, {2})};
    EXPECT_EQ(RunOperation(*op, Tensors(ins), {}), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 has int64"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1 has float64"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
