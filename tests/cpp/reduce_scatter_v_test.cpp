// Golden and error tests of ReduceScatterVOperation on thread ranks: ATB's own case, a grid of
// R × dtype × count layouts (zero counts, odd lengths, holes and out-of-order displacements,
// zero tails), one test per validation rule, and ranks that disagree on counts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>

#include "op_harness.h"
#include "ops/reduce_scatter_v/reduce_scatter_v_param.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

/// One rank's inputs: x [d0, d1], its host counts and the output's dim 0 (y_shape's length).
struct RankInputs {
  std::vector<int64_t> xShape;
  std::vector<int64_t> sendCounts;
  std::vector<int64_t> sdispls;
  int64_t recvCount = 0;
  int64_t outRows = 0;
};

nlohmann::json ThreadParamJson(int rank, int rankSize, const std::string& domain,
                               const std::string& reduceType = "sum") {
  return {{"rank", rank},
          {"rankSize", rankSize},
          {"commMode", 1},
          {"commDomain", domain},
          {"reduceType", reduceType}};
}

std::vector<HostTensor> MakeInputs(DataType dtype, const RankInputs& in,
                                   const std::vector<double>& xValues) {
  return {HostTensor::FromValues(dtype, in.xShape, xValues), HostTensor::Counts(in.sendCounts),
          HostTensor::Counts(in.sdispls), HostTensor::Counts({in.recvCount}),
          HostTensor(dtype, {in.outRows})};
}

double Fold(double acc, double v, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return acc + v;
    case ReduceOp::kProd:
      return acc * v;
    case ReduceOp::kMax:
      return std::max(acc, v);
    case ReduceOp::kMin:
      return std::min(acc, v);
  }
  return acc;
}

/// Runs `ranks` (one entry per rank) and checks every rank's output against plain loops over
/// the inputs: the reduced range first, zeros after it. `withParams` also passes the counts as
/// params (equal to the tensors, so they must be accepted).
void RunGolden(DataType dtype, ReduceOp op, const std::vector<RankInputs>& ranks, bool withParams) {
  const int rankSize = static_cast<int>(ranks.size());
  const std::string domain = UniqueDomain(ReduceOpName(op));
  std::vector<std::vector<double>> xs;
  for (int j = 0; j < rankSize; ++j) {
    xs.push_back(
        TestValues(dtype, NumElements(MakeDims(ranks[j].xShape)), 11, j, op == ReduceOp::kProd));
  }
  RunThreadRanks(rankSize, [&](int rank) {
    const RankInputs& mine = ranks[rank];
    std::vector<double> golden(mine.outRows * mine.xShape[1], 0.0);
    for (int64_t k = 0; k < mine.recvCount; ++k) {
      golden[k] = xs[0][ranks[0].sdispls[rank] + k];
      for (int j = 1; j < rankSize; ++j) {
        golden[k] = Fold(golden[k], xs[j][ranks[j].sdispls[rank] + k], op);
      }
    }
    nlohmann::json param = ThreadParamJson(rank, rankSize, domain, ReduceOpName(op));
    if (withParams) {
      param["sendCounts"] = mine.sendCounts;
      param["sdispls"] = mine.sdispls;
      param["recvCount"] = mine.recvCount;
    }
    OperationPtr operation = MakeOperation("ReduceScatterVOperation", param);
    std::vector<HostTensor> ins = MakeInputs(dtype, mine, xs[rank]);
    std::vector<HostTensor> outs = AllocateOutputs(*operation, Tensors(ins));
    ASSERT_EQ(outs[0].shape(), (std::vector<int64_t>{mine.outRows, mine.xShape[1]}));
    // Garbage in the output proves the tail is zeroed by the operation, not by the allocation.
    for (int64_t k = 0; k < outs[0].numel(); ++k) {
      DoubleToElement(dtype, 5, static_cast<uint8_t*>(outs[0].data()) + k * DataTypeSize(dtype));
    }
    ASSERT_EQ(RunOperation(*operation, Tensors(ins), Tensors(outs)), NO_ERROR)
        << LastErrorMessage();
    ExpectClose(outs[0], golden, Concat("rank ", rank, " recvCount ", mine.recvCount));
  });
}

/// A consistent layout for R ranks: rank i receives recv[i] elements (zeros and odd lengths
/// mixed); sender j places its chunks in rank order (odd j: reverse order) with one-element
/// holes, so displacements are uneven and differ per sender; outputs get a spare row on odd ranks
/// so the zero tail is exercised, and an empty receive on an even rank gives an output of 0 rows.
std::vector<RankInputs> Layout(int rankSize, int64_t d1, int pattern) {
  std::vector<int64_t> recv(rankSize);
  for (int i = 0; i < rankSize; ++i) {
    recv[i] = (i + pattern) % 3 == 0 ? 0 : 2 * i + 3 + 17 * pattern;
  }
  std::vector<RankInputs> ranks(rankSize);
  for (int j = 0; j < rankSize; ++j) {
    RankInputs& r = ranks[j];
    r.sendCounts = recv;
    r.sdispls.assign(rankSize, 0);
    int64_t pos = 0;
    for (int step = 0; step < rankSize; ++step) {
      const int i = j % 2 == 0 ? step : rankSize - 1 - step;
      pos += (i + j) % 2;
      r.sdispls[i] = pos;
      pos += recv[i];
    }
    pos += j;  // trailing elements no rank receives
    r.xShape = {(pos + d1 - 1) / d1, d1};
    r.recvCount = recv[j];
    r.outRows = (recv[j] + d1 - 1) / d1 + j % 2;
  }
  return ranks;
}

class ReduceScatterVGolden : public ::testing::TestWithParam<std::tuple<int, DataType, ReduceOp>> {
};

TEST_P(ReduceScatterVGolden, MatchesReference) {
  const auto [rankSize, dtype, op] = GetParam();
  const std::vector<std::pair<int64_t, int>> layouts = {{1, 0}, {3, 1}, {4, 2}, {1, 3}};
  for (const auto& [d1, pattern] : layouts) {
    SCOPED_TRACE(Concat("d1 ", d1, " pattern ", pattern));
    RunGolden(dtype, op, Layout(rankSize, d1, pattern), pattern == 1);
  }
}

std::string GoldenName(const ::testing::TestParamInfo<std::tuple<int, DataType, ReduceOp>>& info) {
  return Concat("R", std::get<0>(info.param), "_", DtypeTestName(std::get<1>(info.param)), "_",
                ReduceOpName(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(ReduceScatterV, ReduceScatterVGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(ReducibleDtypes()),
                                            ::testing::Values(ReduceOp::kSum)),
                         GoldenName);
INSTANTIATE_TEST_SUITE_P(
    ReduceScatterVOps, ReduceScatterVGolden,
    ::testing::Combine(::testing::Values(3, 4), ::testing::ValuesIn(ReducibleDtypes()),
                       ::testing::Values(ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin)),
    GoldenName);

class ReduceScatterVAtbCase : public ::testing::TestWithParam<DataType> {};

// ATB's test: both ranks hold x = [[0],[1],[2],[3],[4]], sendCounts [2,3], sdispls [0,2].
TEST_P(ReduceScatterVAtbCase, MatchesAtb) {
  const DataType dtype = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeOperation("ReduceScatterVOperation", ThreadParamJson(rank, 2, domain));
    const int64_t recvCount = rank == 0 ? 2 : 3;
    std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {5, 1}, {0, 1, 2, 3, 4}),
                                   HostTensor::Counts({2, 3}), HostTensor::Counts({0, 2}),
                                   HostTensor::Counts({recvCount}),
                                   HostTensor(ACL_INT64, {recvCount})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    ASSERT_EQ(outs[0].shape(), (std::vector<int64_t>{recvCount, 1}));
    ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
    const std::vector<double> expected =
        rank == 0 ? std::vector<double>{0, 2} : std::vector<double>{4, 6, 8};
    ExpectExactly(outs[0], expected, Concat("rank ", rank));
  });
}

INSTANTIATE_TEST_SUITE_P(ReduceScatterV, ReduceScatterVAtbCase,
                         ::testing::ValuesIn(ReducibleDtypes()),
                         [](const auto& info) { return DtypeTestName(info.param); });

// ---- Errors -----------------------------------------------------------------------------------

void ExpectCreateFails(const nlohmann::json& extra, const std::vector<std::string>& pieces) {
  nlohmann::json param = {{"rank", 0}, {"rankSize", 2}};
  param.update(extra);
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("ReduceScatterVOperation", param, &op), ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  for (const auto& piece : pieces) EXPECT_THAT(LastErrorMessage(), HasSubstr(piece));
}

TEST(ReduceScatterVErrors, RejectsUnknownReduceType) {
  ExpectCreateFails({{"reduceType", "mean"}}, {"reduceType", "mean"});
}
TEST(ReduceScatterVErrors, RejectsSendCountsParamOfWrongLength) {
  ExpectCreateFails({{"sendCounts", {1, 2, 3}}}, {"sendCounts", "3 entries", "rankSize = 2"});
}
TEST(ReduceScatterVErrors, RejectsNegativeSendCountsParam) {
  ExpectCreateFails({{"sendCounts", {1, -2}}}, {"sendCounts[1] = -2"});
}
TEST(ReduceScatterVErrors, RejectsSdisplsParamOfWrongLength) {
  ExpectCreateFails({{"sdispls", {0}}}, {"sdispls", "1 entries", "rankSize = 2"});
}
TEST(ReduceScatterVErrors, RejectsNegativeSdisplsParam) {
  ExpectCreateFails({{"sdispls", {-1, 0}}}, {"sdispls[0] = -1"});
}
TEST(ReduceScatterVErrors, RejectsRecvCountParamBelowMinusOne) {
  ExpectCreateFails({{"recvCount", -2}}, {"recvCount = -2"});
}

/// Valid inputs for every rank of 2: x [4, 2], each rank sends 3 elements to each rank.
RankInputs ValidTwoRankInputs() { return {{4, 2}, {3, 3}, {0, 4}, 3, 2}; }

/// Runs `in` on both ranks of a 2-rank group (same inputs, so both must fail in Setup, before
/// any data moves) and checks the status and message pieces on each.
void ExpectSetupFails(const RankInputs& in, Status status, const std::vector<std::string>& pieces,
                      nlohmann::json extra = {}) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    nlohmann::json param = ThreadParamJson(rank, 2, domain);
    if (!extra.is_null()) param.update(extra);
    OperationPtr op = MakeOperation("ReduceScatterVOperation", param);
    std::vector<HostTensor> ins =
        MakeInputs(ACL_FLOAT, in, std::vector<double>(NumElements(MakeDims(in.xShape)), 1.0));
    std::vector<HostTensor> outs = {HostTensor(ACL_FLOAT, {in.outRows, in.xShape[1]})};
    uint64_t workspaceSize = 0;
    EXPECT_EQ(op->Setup({Tensors(ins), Tensors(outs)}, workspaceSize, nullptr), status);
    for (const auto& piece : pieces) EXPECT_THAT(LastErrorMessage(), HasSubstr(piece));
    EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat("rank ", rank)));
  });
}

TEST(ReduceScatterVErrors, RejectsSendCountsTensorOfWrongLength) {
  RankInputs in = ValidTwoRankInputs();
  in.sendCounts = {3, 3, 0};
  ExpectSetupFails(in, ERROR_INVALID_PARAM, {"sendCounts has 3 entries"});
}
TEST(ReduceScatterVErrors, RejectsNegativeSendCount) {
  RankInputs in = ValidTwoRankInputs();
  in.sendCounts = {3, -1};
  ExpectSetupFails(in, ERROR_INVALID_PARAM, {"sendCounts[1] = -1"});
}
TEST(ReduceScatterVErrors, RejectsSdisplsTensorOfWrongLength) {
  RankInputs in = ValidTwoRankInputs();
  in.sdispls = {0};
  ExpectSetupFails(in, ERROR_INVALID_PARAM, {"sdispls has 1 entries"});
}
TEST(ReduceScatterVErrors, RejectsNegativeSdispl) {
  RankInputs in = ValidTwoRankInputs();
  in.sdispls = {-4, 4};
  ExpectSetupFails(in, ERROR_INVALID_PARAM, {"sdispls[0] = -4"});
}
TEST(ReduceScatterVErrors, RejectsRangePastTheEndOfX) {
  RankInputs in = ValidTwoRankInputs();
  in.sdispls = {0, 6};
  ExpectSetupFails(in, ERROR_INVALID_PARAM,
                   {"sendCounts[1] + sdispls[1] = 3 + 6", "x.numel() = 8"});
}
TEST(ReduceScatterVErrors, RejectsRangeThatOverflows) {
  RankInputs in = ValidTwoRankInputs();
  in.sdispls = {0, std::numeric_limits<int64_t>::max() - 1};
  ExpectSetupFails(in, ERROR_INVALID_PARAM, {"sendCounts[1] + sdispls[1]", "x.numel() = 8"});
}
TEST(ReduceScatterVErrors, RejectsNegativeRecvCount) {
  RankInputs in = ValidTwoRankInputs();
  in.recvCount = -3;
  ExpectSetupFails(in, ERROR_INVALID_PARAM, {"recvCount = -3"});
}
TEST(ReduceScatterVErrors, RejectsRecvCountLargerThanOutput) {
  RankInputs in = ValidTwoRankInputs();
  in.outRows = 1;
  ExpectSetupFails(in, ERROR_INVALID_PARAM, {"recvCount = 3", "out.numel() = 2"});
}
TEST(ReduceScatterVErrors, RejectsRecvCountTensorWithTwoValues) {
  const std::string domain = UniqueDomain();
  OperationPtr op = MakeOperation("ReduceScatterVOperation", ThreadParamJson(0, 1, domain));
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {2, 1}), HostTensor::Counts({2}),
                                 HostTensor::Counts({0}), HostTensor::Counts({2, 2}),
                                 HostTensor(ACL_FLOAT, {2})};
  std::vector<HostTensor> outs = {HostTensor(ACL_FLOAT, {2, 1})};
  EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("recvCount holds 2 values"));
}
TEST(ReduceScatterVErrors, RejectsCountTensorsThatAreNotInt64) {
  OperationPtr op = MakeOperation("ReduceScatterVOperation", {{"rank", 0}, {"rankSize", 1}});
  std::vector<TensorDesc> in(5);
  for (auto& d : in) d.dtype = ACL_INT64;
  in[0] = {ACL_FLOAT, ACL_FORMAT_ND, MakeDims({2, 1})};
  in[1].shape = in[2].shape = in[3].shape = in[4].shape = MakeDims({1});
  in[2].dtype = ACL_INT32;
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape(in, out), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("(sdispls) has dtype int32"));
}

std::vector<TensorDesc> Descs(DataType xDtype, std::vector<int64_t> xShape,
                              std::vector<int64_t> yShape) {
  std::vector<TensorDesc> in(5);
  in[0] = {xDtype, ACL_FORMAT_ND, MakeDims(xShape)};
  for (int i = 1; i < 4; ++i) in[i] = {ACL_INT64, ACL_FORMAT_ND, MakeDims({2})};
  in[3].shape = MakeDims({1});
  in[4] = {ACL_INT8, ACL_FORMAT_ND, MakeDims(yShape)};
  return in;
}

TEST(ReduceScatterVErrors, InferShapeGivesYShapeRowsByXColumns) {
  OperationPtr op = MakeOperation("ReduceScatterVOperation", {{"rank", 1}, {"rankSize", 2}});
  std::vector<TensorDesc> out;
  ASSERT_EQ(op->InferShape(Descs(ACL_BF16, {5, 3}, {4}), out), NO_ERROR) << LastErrorMessage();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype, ACL_BF16);
  EXPECT_EQ(DimsToString(out[0].shape), "[4, 3]");
}
TEST(ReduceScatterVErrors, RejectsXThatIsNot2D) {
  OperationPtr op = MakeOperation("ReduceScatterVOperation", {{"rank", 1}, {"rankSize", 2}});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape(Descs(ACL_FLOAT, {10}, {4}), out), ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("x has shape [10] with 1 dims"));
  EXPECT_EQ(op->InferShape(Descs(ACL_FLOAT, {2, 5, 1}, {4}), out), ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("x has shape [2, 5, 1] with 3 dims"));
}
TEST(ReduceScatterVErrors, RejectsYShapeThatIsNot1D) {
  OperationPtr op = MakeOperation("ReduceScatterVOperation", {{"rank", 0}, {"rankSize", 2}});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape(Descs(ACL_FLOAT, {5, 1}, {2, 2}), out), ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("y_shape has shape [2, 2]"));
}
TEST(ReduceScatterVErrors, RejectsNonReducibleDtype) {
  OperationPtr op = MakeOperation("ReduceScatterVOperation", {{"rank", 0}, {"rankSize", 2}});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape(Descs(ACL_UINT8, {5, 1}, {2}), out), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("(x) has dtype uint8"));
}

TEST(ReduceScatterVErrors, RejectsSendCountsParamThatDiffersFromTensor) {
  ExpectSetupFails(ValidTwoRankInputs(), ERROR_INVALID_PARAM,
                   {"param sendCounts = [3, 2]", "sendCounts tensor holds [3, 3]"},
                   {{"sendCounts", {3, 2}}});
}
TEST(ReduceScatterVErrors, RejectsSdisplsParamThatDiffersFromTensor) {
  ExpectSetupFails(ValidTwoRankInputs(), ERROR_INVALID_PARAM,
                   {"param sdispls = [0, 3]", "sdispls tensor holds [0, 4]"},
                   {{"sdispls", {0, 3}}});
}
TEST(ReduceScatterVErrors, RejectsRecvCountParamThatDiffersFromTensor) {
  ExpectSetupFails(ValidTwoRankInputs(), ERROR_INVALID_PARAM,
                   {"param recvCount = 4", "recvCount tensor holds 3"}, {{"recvCount", 4}});
}

// Host counts may be rebound between Setup and Execute; the param rule is checked again.
TEST(ReduceScatterVErrors, ExecuteRejectsCountsReboundAwayFromParams) {
  const std::string domain = UniqueDomain();
  nlohmann::json param = ThreadParamJson(0, 1, domain);
  param["sendCounts"] = {2};
  OperationPtr op = MakeOperation("ReduceScatterVOperation", param);
  std::vector<HostTensor> ins = MakeInputs(ACL_INT32, {{2, 1}, {2}, {0}, 2, 2}, {1, 2});
  std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
  VariantPack pack{Tensors(ins), Tensors(outs)};
  uint64_t workspaceSize = 0;
  ASSERT_EQ(op->Setup(pack, workspaceSize, nullptr), NO_ERROR) << LastErrorMessage();
  std::vector<int64_t> rebound = {1};
  pack.inTensors[1].hostData = rebound.data();
  std::vector<uint8_t> workspace(workspaceSize);
  EXPECT_EQ(op->Execute(pack, workspace.data(), workspaceSize, nullptr), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("param sendCounts = [2]"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCounts tensor holds [1]"));
}

// In place, out is this rank's piece of x; a block that a peer reads overlapping that piece, if
// accepted, would let the peer read this rank's result instead of x (wrong data, NO_ERROR).
// Both ranks send the same 4 elements of x to both ranks, so both in-place calls are refused
// (in Setup, before any communication); out of place the same counts are legal.
TEST(ReduceScatterVErrors, InPlaceOutOnABlockAPeerReadsIsInvalidParam) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    const int peer = 1 - rank;
    const int64_t shared = rank == 0 ? 0 : 4;
    const RankInputs in = {{8, 1}, {4, 4}, {shared, shared}, 4, 4};
    std::vector<HostTensor> ins = MakeInputs(ACL_FLOAT, in, {1, 2, 3, 4, 5, 6, 7, 8});
    {
      OperationPtr op = MakeOperation("ReduceScatterVOperation", ThreadParamJson(rank, 2, domain));
      const Tensor out = View(ins[0], shared, {4, 1});
      EXPECT_EQ(RunOperation(*op, Tensors(ins), {out}), ERROR_INVALID_PARAM);
      EXPECT_THAT(LastErrorMessage(),
                  HasSubstr(Concat("out starting at x.flat[sdispls[", rank, "] = ", shared, "]")));
      EXPECT_THAT(LastErrorMessage(),
                  HasSubstr(Concat("the block sent to rank ", peer, " (sdispls[", peer,
                                   "] = ", shared, ", sendCounts[", peer, "] = 4) overlaps it")));
    }
    OperationPtr op = MakeOperation("ReduceScatterVOperation", ThreadParamJson(rank, 2, domain));
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
    ExpectExactly(outs[0], {1 + 5, 2 + 6, 3 + 7, 4 + 8}, "out of place, shared blocks");
  });
}

TEST(ReduceScatterVErrors, RanksThatDisagreeOnCountsGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    OperationPtr op = MakeOperation("ReduceScatterVOperation", ThreadParamJson(rank, 3, domain));
    RankInputs in = {{6, 1}, {2, 2, 2}, {0, 2, 4}, 2, 2};
    if (rank == 1) in.sendCounts = {2, 2, 1};  // rank 2 still expects 2 from rank 1
    std::vector<HostTensor> ins = MakeInputs(ACL_FLOAT16, in, TestValues(ACL_FLOAT16, 6, 3, rank));
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1 sends 1 elements to rank 2 (sendCounts)"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 2 expects 2 from rank 1 (recvCount)"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
