// What a Setup of the same tensor descriptions as the last successful one still checks: it skips
// only the checks that read the descriptions alone (OperationBase::Setup), so new data pointers,
// new host counts and another layout are each checked again, and a failed Setup forgets the
// descriptions it was given.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "op_harness.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

Status SetupOf(Operation& op, const VariantPack& pack) {
  uint64_t workspaceSize = 0;
  return op.Setup(pack, workspaceSize, nullptr);
}

TEST(SetupOfTheSameDescs, StillChecksTheData) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {4});
  ASSERT_EQ(SetupOf(*op, {{x.tensor()}, {y.tensor()}}), NO_ERROR) << LastErrorMessage();
  Tensor noData = y.tensor();
  noData.deviceData = nullptr;
  EXPECT_EQ(SetupOf(*op, {{x.tensor()}, {noData}}), ERROR_INVALID_TENSOR_ADDR);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outTensors[0] (y) has no data"));
  Tensor shortData = x.tensor();
  shortData.dataSize = 4;
  ASSERT_EQ(SetupOf(*op, {{x.tensor()}, {y.tensor()}}), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(SetupOf(*op, {{shortData}, {y.tensor()}}), ERROR_INVALID_TENSOR_SIZE);
}

TEST(SetupOfTheSameDescs, StillRefusesAnOverlap) {
  // The aliasing rule reads the data pointers, which the descriptions do not hold.
  OperationPtr op = MakeOperation(
      "AllGatherOperation",
      {{"rank", 0}, {"rankSize", 1}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {1, 4});
  HostTensor both(ACL_FLOAT, {8});
  ASSERT_EQ(SetupOf(*op, {{x.tensor()}, {y.tensor()}}), NO_ERROR) << LastErrorMessage();
  Tensor xInBoth = x.tensor();
  xInBoth.deviceData = static_cast<float*>(both.tensor().deviceData) + 1;
  Tensor yInBoth = y.tensor();
  yInBoth.deviceData = both.tensor().deviceData;
  EXPECT_EQ(SetupOf(*op, {{xInBoth}, {yInBoth}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("overlaps"));
}

TEST(SetupOfOtherDescs, ChecksThemAgainstInference) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {4});
  HostTensor y5(ACL_FLOAT, {5});
  HostTensor yInt(ACL_INT32, {4});
  ASSERT_EQ(SetupOf(*op, {{x.tensor()}, {y.tensor()}}), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(SetupOf(*op, {{x.tensor()}, {y5.tensor()}}), ERROR_INVALID_TENSOR_DIM);
  ASSERT_EQ(SetupOf(*op, {{x.tensor()}, {y.tensor()}}), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(SetupOf(*op, {{x.tensor()}, {yInt.tensor()}}), ERROR_INVALID_TENSOR_DTYPE);
}

TEST(SetupOfOtherDescs, ReplacesTheDescsExecuteAccepts) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x4(ACL_FLOAT, {4});
  HostTensor y4(ACL_FLOAT, {4});
  HostTensor x5(ACL_FLOAT, {5});
  HostTensor y5(ACL_FLOAT, {5});
  const VariantPack four{{x4.tensor()}, {y4.tensor()}};
  const VariantPack five{{x5.tensor()}, {y5.tensor()}};
  ASSERT_EQ(SetupOf(*op, four), NO_ERROR) << LastErrorMessage();
  ASSERT_EQ(SetupOf(*op, five), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(op->Execute(four, nullptr, 0, nullptr), ERROR_INVALID_TENSOR_INI_MATCH);
  EXPECT_EQ(op->Execute(five, nullptr, 0, nullptr), NO_ERROR) << LastErrorMessage();
  ASSERT_EQ(SetupOf(*op, four), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(op->Execute(five, nullptr, 0, nullptr), ERROR_INVALID_TENSOR_INI_MATCH);
  EXPECT_EQ(op->Execute(four, nullptr, 0, nullptr), NO_ERROR) << LastErrorMessage();
}

TEST(SetupOfTheSameDescs, AfterAFailedSetupIsAFullSetup) {
  OperationPtr op = SingleRankAllReduce();
  HostTensor x(ACL_FLOAT, {4});
  HostTensor y(ACL_FLOAT, {4});
  const VariantPack good{{x.tensor()}, {y.tensor()}};
  ASSERT_EQ(SetupOf(*op, good), NO_ERROR) << LastErrorMessage();
  Tensor noData = y.tensor();
  noData.deviceData = nullptr;
  ASSERT_EQ(SetupOf(*op, {{x.tensor()}, {noData}}), ERROR_INVALID_TENSOR_ADDR);
  // The failed Setup left the operation not set up, whatever descriptions it had before.
  EXPECT_EQ(op->Execute(good, nullptr, 0, nullptr), ERROR_INVALID_TENSOR_INI_MATCH);
  ASSERT_EQ(SetupOf(*op, good), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(op->Execute(good, nullptr, 0, nullptr), NO_ERROR) << LastErrorMessage();
}

TEST(SetupOfTheSameDescs, ReadsTheHostCountsAgain) {
  // AllGatherV of one rank: x = [3] int8, sendCount, recvCounts, rdispls, y_shape = [4].
  OperationPtr op = MakeOperation(
      "AllGatherVOperation",
      {{"rank", 0}, {"rankSize", 1}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
  HostTensor x = HostTensor::FromValues(ACL_INT8, {3}, {1, 2, 3});
  std::vector<HostTensor> ins = {std::move(x), HostTensor::Counts({3}), HostTensor::Counts({3}),
                                 HostTensor::Counts({0}), HostTensor(ACL_INT8, {4})};
  std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
  ASSERT_EQ(SetupOf(*op, {Tensors(ins), Tensors(outs)}), NO_ERROR) << LastErrorMessage();
  // The same descriptions, counts that no longer fit y: 3 elements from displacement 2 of 4.
  std::vector<int64_t> rdispls = {2};
  ins[3].tensor().hostData = rdispls.data();
  EXPECT_EQ(SetupOf(*op, {Tensors(ins), Tensors(outs)}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rdispls"));
  rdispls = {1};
  ASSERT_EQ(SetupOf(*op, {Tensors(ins), Tensors(outs)}), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(op->Execute({Tensors(ins), Tensors(outs)}, nullptr, 0, nullptr), NO_ERROR)
      << LastErrorMessage();
  ExpectExactly(outs[0], {0, 1, 2, 3}, "y after the rebound displacement");
}

}  // namespace
}  // namespace testing
}  // namespace collops
