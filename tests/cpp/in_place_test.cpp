// Which memory an operation's input and output may share (OperationBase::CheckAliasing): the one
// in-place form of each op that has one gives the right result on thread ranks (the process,
// mpirun and hierarchical engines run the same forms in the op suite), and every other overlap
// is ERROR_INVALID_PARAM naming the tensors, before any rank communicates.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "op_harness.h"
#include "op_suite.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

class InPlaceOnThreads : public ::testing::TestWithParam<int> {};

TEST_P(InPlaceOnThreads, EveryInPlaceFormMatchesReference) {
  const int rankSize = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize, [&](int rank) {
    const SuiteJob job = ThreadJob(rank, rankSize, domain);
    for (DataType dtype : {ACL_INT8, ACL_BF16, ACL_FLOAT}) RunInPlaceForms(job, dtype);
  });
}

INSTANTIATE_TEST_SUITE_P(InPlace, InPlaceOnThreads, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return Concat("R", info.param); });

nlohmann::json ThreadParam(int rank, int rankSize, const std::string& domain,
                           nlohmann::json extra = nlohmann::json::object()) {
  extra["rank"] = rank;
  extra["rankSize"] = rankSize;
  extra["commMode"] = 1;
  extra["commDomain"] = domain;
  return extra;
}

TEST(InPlaceErrors, AllToAllOutputOnItsInputIsInvalidParam) {
  OperationPtr op = MakeOperation("AllToAllOperation", ThreadParam(0, 1, UniqueDomain()));
  HostTensor x(ACL_FLOAT, {8});
  EXPECT_EQ(RunOperation(*op, {x.tensor()}, {x.tensor()}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("y overlaps x (x starts at byte 0 of y)"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("peers may still read x while y is written"));
}

TEST(InPlaceErrors, AllToAllVOutputInsideItsInputIsInvalidParam) {
  OperationPtr op = MakeOperation(
      "AllToAllVOperation",
      ThreadParam(0, 1, UniqueDomain(),
                  {{"sendCounts", {4}}, {"sdispls", {0}}, {"recvCounts", {4}}, {"rdispls", {0}}}));
  HostTensor buffer(ACL_INT8, {8});
  EXPECT_EQ(RunOperation(*op, {View(buffer, 0, {8})}, {View(buffer, 2, {1, 4})}),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("y overlaps x (y starts at byte 2 of x)"));
}

TEST(InPlaceErrors, AllReduceShiftedByOneElementIsInvalidParam) {
  OperationPtr op = MakeOperation("AllReduceOperation", ThreadParam(0, 1, UniqueDomain()));
  HostTensor buffer(ACL_FLOAT, {5});
  EXPECT_EQ(RunOperation(*op, {View(buffer, 0, {4})}, {View(buffer, 1, {4})}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("the one in-place form supported is x == y"));
}

TEST(InPlaceErrors, AllGatherInputInAnotherRanksBlockIsInvalidParamOnThatRank) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeOperation("AllGatherOperation", ThreadParam(rank, 2, domain));
    HostTensor y(ACL_FLOAT, {2, 3});
    EXPECT_EQ(RunOperation(*op, {View(y, (1 - rank) * 3, {3})}, {y.tensor()}), ERROR_INVALID_PARAM);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("the one in-place form supported is x == y[rank]"));
  });
}

TEST(InPlaceErrors, ReduceScatterVInPlaceWithATailIsInvalidParam) {
  // The tail past recvCount is zeroed before the peers have read x, so it may not lie on x.
  OperationPtr op = MakeOperation("ReduceScatterVOperation", ThreadParam(0, 1, UniqueDomain()));
  HostTensor buffer(ACL_FLOAT, {6, 1});
  HostTensor counts = HostTensor::Counts({4}), displs = HostTensor::Counts({0}),
             recv = HostTensor::Counts({4}), yShape(ACL_INT8, {5});
  EXPECT_EQ(RunOperation(*op,
                         {View(buffer, 0, {4, 1}), counts.tensor(), displs.tensor(), recv.tensor(),
                          yShape.tensor()},
                         {View(buffer, 0, {5, 1})}),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("with out.numel() == recvCount"));
}

TEST(InPlaceErrors, AllGatherVBlocksThatOverlapInOutAreInvalidParam) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeOperation("AllGatherVOperation", ThreadParam(rank, 2, domain));
    const int64_t mine = rank == 0 ? 1 : 3;
    HostTensor x(ACL_FLOAT, {3}),
        sendCount = HostTensor::Counts({mine}), recvCounts = HostTensor::Counts({1, 3}),
        rdispls = HostTensor::Counts({0, 0}), yShape(ACL_INT8, {5}), out(ACL_FLOAT, {5});
    EXPECT_EQ(RunOperation(*op,
                           {x.tensor(), sendCount.tensor(), recvCounts.tensor(), rdispls.tensor(),
                            yShape.tensor()},
                           {out.tensor()}),
              ERROR_INVALID_PARAM);
    EXPECT_THAT(LastErrorMessage(),
                HasSubstr("the blocks of rank 0 (rdispls[0] = 0, recvCounts[0] = 1) and rank 1 "
                          "(rdispls[1] = 0, recvCounts[1] = 3) overlap in out"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
