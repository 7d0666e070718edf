// Golden and negative tests of AllToAllOperation on thread ranks: plain and transpose modes over
// every movable dtype × R × shapes (empty, odd lengths, several ranks of dims).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "op_harness.h"
#include "ops/all_to_all/all_to_all_param.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

AllToAllParam ParamFor(int rank, int rankSize, const std::string& domain, bool transpose) {
  AllToAllParam p;
  p.rank = rank;
  p.rankSize = rankSize;
  p.commMode = COMM_MULTI_THREAD;
  p.backend = "lccl";
  p.commDomain = domain;
  p.transpose = transpose;
  return p;
}

/// Plain: rank `me` gets chunk `me` of every rank's x.flat, in rank order.
std::vector<double> PlainGolden(const std::vector<std::vector<double>>& xs, int me) {
  const size_t ranks = xs.size();
  const size_t chunk = xs[0].size() / ranks;
  std::vector<double> y;
  for (size_t i = 0; i < ranks; ++i) {
    for (size_t k = 0; k < chunk; ++k) y.push_back(xs[i][me * chunk + k]);
  }
  return y;
}

/// Transpose: rank `me` stacks column block `me` ([H, W/R]) of every rank's x [H, W].
std::vector<double> TransposeGolden(const std::vector<std::vector<double>>& xs, int64_t h,
                                    int64_t w, int me) {
  const int64_t ranks = static_cast<int64_t>(xs.size());
  const int64_t block = w / ranks;
  std::vector<double> y;
  for (int64_t i = 0; i < ranks; ++i) {
    for (int64_t row = 0; row < h; ++row) {
      for (int64_t c = 0; c < block; ++c) y.push_back(xs[i][row * w + me * block + c]);
    }
  }
  return y;
}

class AllToAllGolden : public ::testing::TestWithParam<std::tuple<int, DataType, bool>> {};

TEST_P(AllToAllGolden, MatchesReference) {
  const auto [rankSize, dtype, transpose] = GetParam();
  const int64_t r = rankSize;
  const std::vector<std::vector<int64_t>> shapes =
      transpose ? std::vector<std::vector<int64_t>>{{3, r}, {5, 3 * r},  {0, 2 * r},
                                                    {4, 0}, {1, 37 * r}, {17, 2 * r}}
                : std::vector<std::vector<int64_t>>{{0},       {r},        {3, 5 * r},
                                                    {2, r, 7}, {1001 * r}, {3, 2 * r, 1}};
  const std::string domain = UniqueDomain();
  for (const std::vector<int64_t>& shape : shapes) {
    const int64_t n = NumElements(MakeDims(shape));
    std::vector<std::vector<double>> xs;
    for (int i = 0; i < rankSize; ++i) xs.push_back(TestValues(dtype, n, 21, i));
    const std::string what = Concat("shape ", DimsToString(MakeDims(shape)));
    RunThreadRanks(rankSize, [&](int rank) {
      Operation* raw = nullptr;
      ASSERT_EQ(CreateOperation(ParamFor(rank, rankSize, domain, transpose), &raw), NO_ERROR)
          << LastErrorMessage();
      OperationPtr op(raw);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, shape, xs[rank])};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      const std::vector<int64_t> expectedShape =
          transpose ? std::vector<int64_t>{shape[0] * r, shape[1] / r} : shape;
      ASSERT_EQ(outs[0].shape(), expectedShape) << what;
      ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR)
          << what << ": " << LastErrorMessage();
      ExpectExactly(
          outs[0],
          transpose ? TransposeGolden(xs, shape[0], shape[1], rank) : PlainGolden(xs, rank),
          Concat(what, ", rank ", rank));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(AllToAll, AllToAllGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(MovableDtypes()),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         DtypeTestName(std::get<1>(info.param)),
                                         std::get<2>(info.param) ? "_transpose" : "_plain");
                         });

// ---- Errors -------------------------------------------------------------------------------

Status InferShapeOf(int rankSize, bool transpose, const std::vector<int64_t>& shape) {
  OperationPtr op = MakeOperation("AllToAllOperation",
                                  {{"rank", 0}, {"rankSize", rankSize}, {"transpose", transpose}});
  TensorDesc x;
  x.dtype = ACL_FLOAT16;
  x.shape = MakeDims(shape);
  std::vector<TensorDesc> out;
  return op->InferShape({x}, out);
}

TEST(AllToAllErrors, RejectsNumelNotDivisibleByRankSize) {
  EXPECT_EQ(InferShapeOf(3, false, {2, 2}), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("(4 elements)"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rankSize = 3"));
}

TEST(AllToAllErrors, TransposeRejectsNon2DInput) {
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{4}, {2, 2, 2}}) {
    EXPECT_EQ(InferShapeOf(2, true, shape), ERROR_INVALID_TENSOR_DIM);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("transpose needs a 2-D x [H, W]"));
  }
}

TEST(AllToAllErrors, TransposeRejectsWidthNotDivisibleByRankSize) {
  // 10 elements would split evenly; the column blocks would not.
  EXPECT_EQ(InferShapeOf(2, true, {2, 5}), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("W = 5"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rankSize = 2"));
}

TEST(AllToAllErrors, RejectsNonBoolTranspose) {
  Operation* op = nullptr;
  EXPECT_EQ(
      CreateOperation("AllToAllOperation", R"({"rank":0,"rankSize":2,"transpose":"yes"})", &op),
      ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("transpose"));
}

TEST(AllToAllErrors, WorkspaceIsXBytesForTransposeOnly) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(1, [&](int rank) {
    for (const bool transpose : {false, true}) {
      Operation* raw = nullptr;
      ASSERT_EQ(CreateOperation(ParamFor(rank, 1, domain, transpose), &raw), NO_ERROR);
      OperationPtr op(raw);
      std::vector<HostTensor> ins = {HostTensor(ACL_INT64, {3, 4})};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      VariantPack pack{Tensors(ins), Tensors(outs)};
      uint64_t workspaceSize = 1;
      ASSERT_EQ(op->Setup(pack, workspaceSize, nullptr), NO_ERROR) << LastErrorMessage();
      EXPECT_EQ(workspaceSize, transpose ? 3u * 4u * 8u : 0u);
      if (transpose) {
        EXPECT_EQ(op->Execute(pack, nullptr, 0, nullptr), ERROR_INVALID_WORKSPACE_SIZE);
      }
    }
  });
}

// A workspace on x or y would be overwritten while it is read: the call must be refused, not
// return NO_ERROR with wrong elements.
TEST(AllToAllErrors, WorkspaceOverlappingXOrYIsInvalidParam) {
  Operation* raw = nullptr;
  ASSERT_EQ(CreateOperation(ParamFor(0, 1, UniqueDomain(), true), &raw), NO_ERROR);
  OperationPtr op(raw);
  // One buffer: x [2, 4] floats, then y [2, 4], then 72 spare bytes.
  HostTensor buffer(ACL_FLOAT, {34});
  const Tensor x = View(buffer, 0, {2, 4});
  const Tensor y = View(buffer, 8, {2, 4});
  VariantPack pack{{x}, {y}};
  uint64_t workspaceSize = 0;
  ASSERT_EQ(op->Setup(pack, workspaceSize, nullptr), NO_ERROR) << LastErrorMessage();
  ASSERT_EQ(workspaceSize, 32u);
  uint8_t* base = static_cast<uint8_t*>(buffer.data());
  EXPECT_EQ(op->Execute(pack, base + 60, workspaceSize, nullptr), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(),
              HasSubstr("AllToAllOperation (rank 0): the workspace (32 bytes in use) overlaps "
                        "outTensors[0] (y): the workspace starts at byte 28 of y"));
  EXPECT_EQ(op->Execute(pack, base + 4, workspaceSize, nullptr), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("overlaps inTensors[0] (x): the workspace starts at "
                                            "byte 4 of x"));
  // Right after y, and larger than Setup asked for: only the bytes in use count.
  EXPECT_EQ(op->Execute(pack, base + 64, workspaceSize, nullptr), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(op->Execute(pack, base + 64, workspaceSize + 40, nullptr), NO_ERROR)
      << LastErrorMessage();
}

TEST(AllToAllErrors, RanksWithDifferentElementCountsGetRankMismatchOnEveryRank) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    Operation* raw = nullptr;
    ASSERT_EQ(CreateOperation(ParamFor(rank, 3, domain, false), &raw), NO_ERROR);
    OperationPtr op(raw);
    std::vector<HostTensor> ins = {HostTensor(ACL_INT8, {rank == 2 ? 6 : 3})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 has 3 but rank 2 has 6"));
  });
}

TEST(AllToAllErrors, RanksWithDifferentModesGetRankMismatchOnEveryRank) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    Operation* raw = nullptr;
    ASSERT_EQ(CreateOperation(ParamFor(rank, 2, domain, rank == 1), &raw), NO_ERROR);
    OperationPtr op(raw);
    std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {2, 2})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 runs AllToAllOperation but rank 1 runs "
                                              "AllToAllOperation/transpose"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
