// AG_LINEAR_RS (LinearParallelOperation type 4, ATB's 2-D tensor parallel): goldens on R = 4
// thread and process ranks for every grid (agDim, rsDim) in {(2, 2), (4, 1), (1, 4)} with both
// innerDimIsAg, and one test per rule of twoDimTPInfo. The golden (linear_golden.cpp) writes the
// grid out on its own. The op suite (op_suite.cpp) runs the same type on the other engines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "linear_golden.h"
#include "op_harness.h"
#include "ops/linear_parallel/linear_parallel_param.h"
#include "process_ranks.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRanks = 4;

/// The cases of one grid: both weight layouts, with and without residual, 2-D and 3-D x, and
/// one float32 output.
std::vector<LinearCase> GridCases(int agDim, int rsDim, int innerDimIsAg, DataType dtype) {
  std::vector<LinearCase> cases;
  uint64_t seed = 300 + 10 * agDim + innerDimIsAg;
  for (bool trans : {true, false}) {
    for (bool residual : {false, true}) {
      LinearCase c;
      c.type = AG_LINEAR_RS;
      c.dtype = dtype;
      c.agDim = agDim;
      c.rsDim = rsDim;
      c.innerDimIsAg = innerDimIsAg;
      c.transWeight = trans;
      c.hasResidual = residual;
      // dim0 = 4 (and 4 * agDim) divides by every rsDim here; odd k and n.
      c.xShape = residual ? std::vector<int64_t>{4, 3, 17} : std::vector<int64_t>{4, 29};
      c.n = residual ? 11 : 23;
      c.outDataType = dtype != ACL_FLOAT && trans && residual ? ACL_FLOAT : -1;
      c.seed = ++seed;
      cases.push_back(c);
    }
  }
  return cases;
}

nlohmann::json ThreadJob(int rank, const std::string& domain) {
  return {{"rank", rank}, {"rankSize", kRanks}, {"commMode", 1}, {"commDomain", domain}};
}

using Grid = std::tuple<int, int, int>;  // agDim, rsDim, innerDimIsAg

std::string GridName(const Grid& grid) {
  return Concat("AG", std::get<0>(grid), "_RS", std::get<1>(grid), "_inner",
                std::get<2>(grid) != 0 ? "Ag" : "Rs");
}

const auto kGrids = ::testing::Values(Grid{2, 2, 1}, Grid{2, 2, 0}, Grid{4, 1, 1}, Grid{4, 1, 0},
                                      Grid{1, 4, 1}, Grid{1, 4, 0});

class LinearParallelTwoDimGolden : public ::testing::TestWithParam<std::tuple<Grid, DataType>> {};

TEST_P(LinearParallelTwoDimGolden, MatchesFloat64Reference) {
  const auto [grid, dtype] = GetParam();
  const auto [agDim, rsDim, inner] = grid;
  const std::vector<LinearCase> cases = GridCases(agDim, rsDim, inner, dtype);
  const std::string domain = UniqueDomain();
  RunThreadRanks(kRanks, [&](int rank) {
    for (const LinearCase& c : cases) {
      RunLinearCase(c, ThreadJob(rank, domain), rank, kRanks, nullptr, "thread ranks");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelTwoDimGolden,
                         ::testing::Combine(kGrids,
                                            ::testing::Values(ACL_FLOAT16, ACL_BF16, ACL_FLOAT)),
                         [](const auto& info) {
                           return Concat(GridName(std::get<0>(info.param)), "_",
                                         DtypeTestName(std::get<1>(info.param)));
                         });

// Process ranks, on lccl and on the default backend (hccl: auto).
class LinearParallelTwoDimProcessGolden
    : public ::testing::TestWithParam<std::tuple<Grid, std::string>> {};

TEST_P(LinearParallelTwoDimProcessGolden, MatchesFloat64Reference) {
  const auto [grid, backend] = GetParam();
  const auto [agDim, rsDim, inner] = grid;
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "30";
  options.deadlineSeconds = 90;
  RunProcessRanks(
      kRanks,
      [&, agDim = agDim, rsDim = rsDim, inner = inner, backend = backend](int rank) {
        const nlohmann::json job = {
            {"rank", rank}, {"rankSize", kRanks}, {"backend", backend}, {"commDomain", "twodim"}};
        for (DataType dtype : {ACL_BF16, ACL_FLOAT}) {
          for (const LinearCase& c : GridCases(agDim, rsDim, inner, dtype)) {
            RunLinearCase(c, job, rank, kRanks, nullptr, "process ranks");
          }
        }
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelTwoDimProcessGolden,
                         ::testing::Combine(kGrids, ::testing::Values(std::string("lccl"),
                                                                      std::string("hccl"))),
                         [](const auto& info) {
                           return Concat(GridName(std::get<0>(info.param)), "_",
                                         std::get<1>(info.param));
                         });

// ---- errors: one per rule ---------------------------------------------------------------------

Status CreateWith(nlohmann::json extra) {
  nlohmann::json param = {{"rank", 0}, {"rankSize", kRanks}, {"type", AG_LINEAR_RS}};
  for (const auto& [key, value] : extra.items()) param[key] = value;
  Operation* op = nullptr;
  const Status status = CreateOperation("LinearParallelOperation", param, &op);
  if (op != nullptr) DestroyOperation(op);
  return status;
}

nlohmann::json Grid2D(int agDim, int rsDim, int inner = 1) {
  return {{"agDim", agDim}, {"rsDim", rsDim}, {"innerDimIsAg", inner}};
}

TEST(LinearParallelTwoDimErrors, GridMustCoverRankSize) {
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", Grid2D(2, 2)}}), NO_ERROR);
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", Grid2D(2, 3)}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("twoDimTPInfo.agDim * twoDimTPInfo.rsDim = rankSize"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("2 * 3 != rankSize = 4"));
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", Grid2D(8, 1)}}), ERROR_INVALID_PARAM);
}

TEST(LinearParallelTwoDimErrors, GridMustBeSet) {
  // ATB's defaults (0, 0) leave the grid unset; a negative pair multiplies to rankSize.
  EXPECT_EQ(CreateWith({}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("twoDimTPInfo.agDim >= 1"));
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", Grid2D(-2, -2)}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("agDim = -2, rsDim = -2"));
}

TEST(LinearParallelTwoDimErrors, InnerDimIsAgIsZeroOrOne) {
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", Grid2D(2, 2, 0)}}), NO_ERROR);
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", Grid2D(2, 2, 2)}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("twoDimTPInfo.innerDimIsAg = 2"));
}

TEST(LinearParallelTwoDimErrors, OtherTypesIgnoreTheGrid) {
  // As ATB: twoDimTPInfo is read by type 4 only.
  for (int type : {0, 1, 2, 3}) {
    EXPECT_EQ(CreateWith({{"type", type}, {"twoDimTPInfo", Grid2D(3, 5, 7)}}), NO_ERROR) << type;
  }
}

TEST(LinearParallelTwoDimErrors, NestedKeysAreCheckedLikeTopLevelOnes) {
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", {{"agDim", 2}, {"rsDim", 2}, {"agdim", 2}}}}),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("unknown param \"twoDimTPInfo.agdim\""));
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", {{"agDim", "2"}, {"rsDim", 2}}}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("param \"twoDimTPInfo.agDim\" must be an integer"));
  EXPECT_EQ(CreateWith({{"twoDimTPInfo", 4}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("param \"twoDimTPInfo\" must be an object"));
}

TEST(LinearParallelTwoDimErrors, TypesFiveAndSixAreRefusedByName) {
  EXPECT_EQ(CreateWith({{"type", 5}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("ALLTOALLVC_AG_GMM) is not supported"));
  EXPECT_EQ(CreateWith({{"type", 6}, {"moeInfo", {{"epSize", 2}, {"tpSize", 2}}}}),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("GMM_RS_ALLTOALLVC) is not supported"));
  // moeInfo itself loads (ATB's params carry it) and the other types ignore it.
  EXPECT_EQ(CreateWith({{"type", 0}, {"moeInfo", {{"localExpertNums", 2}}}}), NO_ERROR);
}

TEST(LinearParallelTwoDimErrors, GatheredRowsMustDivideByRsDim) {
  OperationPtr op = MakeOperation(
      "LinearParallelOperation",
      {{"rank", 1}, {"rankSize", kRanks}, {"type", AG_LINEAR_RS}, {"twoDimTPInfo", Grid2D(1, 4)}});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({Desc(ACL_FLOAT, {6, 8}), Desc(ACL_FLOAT, {5, 8})}, out),
            ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("dim0 = 6 times twoDimTPInfo.agDim = 1"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("not divisible by twoDimTPInfo.rsDim = 4"));
  // 2 x 2: 6 rows gather to 12, which 2 divides: 6 rows of y.
  OperationPtr square = MakeOperation(
      "LinearParallelOperation",
      {{"rank", 1}, {"rankSize", kRanks}, {"type", AG_LINEAR_RS}, {"twoDimTPInfo", Grid2D(2, 2)}});
  ASSERT_EQ(square->InferShape({Desc(ACL_FLOAT, {3, 2, 8}), Desc(ACL_FLOAT, {5, 8})}, out),
            NO_ERROR);
  EXPECT_EQ(DimsToString(out[0].shape), "[3, 2, 5]");
}

TEST(LinearParallelTwoDimErrors, RanksWithDifferentGridsGetRankMismatch) {
  // Ranks that disagree on innerDimIsAg would pair different groups: all fail before any data
  // moves.
  const std::string domain = UniqueDomain();
  RunThreadRanks(kRanks, [&](int rank) {
    nlohmann::json param = ThreadJob(rank, domain);
    param["type"] = AG_LINEAR_RS;
    param["twoDimTPInfo"] = Grid2D(2, 2, rank == 3 ? 0 : 1);
    OperationPtr op = MakeOperation("LinearParallelOperation", param);
    std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {4, 8}), HostTensor(ACL_FLOAT, {2, 8})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("AG_LINEAR_RS"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
