// Golden and error tests of LinearParallelOperation on thread ranks: every type x dtype x R, both
// weight layouts, with and without residual, 2-D and 3-D x, serial and overlapped (chunked), plus
// one test per validation rule. Process ranks and the other engines run linear_golden's cases
// through the op suite (process_ops_test.cpp, tests/mpi, hierarchical_golden_test.cpp). The
// quantised forms have their own file (linear_parallel_quant_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <tuple>

#include "linear_golden.h"
#include "op_harness.h"
#include "ops/linear_parallel/linear_parallel_param.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json ThreadJob(int rank, int rankSize, const std::string& domain) {
  return {{"rank", rank}, {"rankSize", rankSize}, {"commMode", 1}, {"commDomain", domain}};
}

const char* ShortTypeName(int type) {
  static const char* kTypes[] = {"AllReduce", "ReduceScatter", "AllGather", "Pure"};
  return kTypes[type];
}

class LinearParallelGolden
    : public ::testing::TestWithParam<std::tuple<int, DataType, int, const char*>> {};

TEST_P(LinearParallelGolden, MatchesFloat64Reference) {
  const auto [rankSize, dtype, type, algo] = GetParam();
  ScopedLinearAlgorithm scoped(algo);
  std::vector<LinearCase> cases;
  uint64_t seed = 0;
  for (bool trans : {true, false}) {
    for (bool residual : {false, true}) {
      for (bool threeDims : {false, true}) {
        LinearCase c;
        c.type = type;
        c.dtype = dtype;
        c.transWeight = trans;
        c.hasResidual = residual;
        c.keepIntermediate = type == ALL_GATHER_LINEAR && residual;
        // Rows a multiple of R (LINEAR_REDUCE_SCATTER cuts dim0 by R); odd k and n.
        c.xShape = threeDims ? std::vector<int64_t>{rankSize, 3, 19}
                             : std::vector<int64_t>{5 * rankSize, 33};
        c.n = threeDims ? 13 : 40;
        c.seed = ++seed + 100 * type;
        cases.push_back(c);
      }
    }
  }
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize, [&](int rank) {
    for (const LinearCase& c : cases) {
      RunLinearCase(c, ThreadJob(rank, rankSize, domain), rank, rankSize, nullptr, algo);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    LinearParallel, LinearParallelGolden,
    ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                       ::testing::Values(ACL_FLOAT16, ACL_BF16, ACL_FLOAT),
                       ::testing::Values(LINEAR_ALL_REDUCE, LINEAR_REDUCE_SCATTER,
                                         ALL_GATHER_LINEAR, PURE_LINEAR),
                       ::testing::Values("serial", "overlap")),
    [](const auto& info) {
      return Concat("R", std::get<0>(info.param), "_", DtypeTestName(std::get<1>(info.param)), "_",
                    ShortTypeName(std::get<2>(info.param)), "_", std::get<3>(info.param));
    });

TEST(LinearParallelGoldenEdges, EmptyRowsZeroKAndOutDataType) {
  const std::string domain = UniqueDomain();
  std::vector<LinearCase> cases;
  for (int type = 0; type < 4; ++type) {
    LinearCase empty;  // no rows at all
    empty.type = type;
    empty.xShape = {0, 8};
    empty.n = 5;
    cases.push_back(empty);
    LinearCase zeroK;  // k = 0: y is the residual alone
    zeroK.type = type;
    zeroK.dtype = ACL_BF16;
    zeroK.hasResidual = true;
    zeroK.xShape = {4, 0};
    zeroK.n = 6;
    cases.push_back(zeroK);
    for (int out : {ACL_FLOAT, ACL_FLOAT16, ACL_BF16}) {
      LinearCase c;  // bfloat16 in, outDataType out (float32: the accumulator itself)
      c.type = type;
      c.dtype = out == ACL_BF16 ? ACL_FLOAT16 : ACL_BF16;
      c.outDataType = out;
      c.hasResidual = true;
      c.xShape = {4, 70};
      c.n = 9;
      c.seed = 7 + out;
      cases.push_back(c);
    }
  }
  RunThreadRanks(2, [&](int rank) {
    for (const LinearCase& c : cases) {
      RunLinearCase(c, ThreadJob(rank, 2, domain), rank, 2, nullptr, "edges");
    }
  });
}

// Overlapped chunks between processes (the op suite runs the sizes' own choice): lccl and the
// default backend, R = 2 and 3, every type and dtype.
class LinearParallelProcessGolden : public ::testing::TestWithParam<std::tuple<int, std::string>> {
};

TEST_P(LinearParallelProcessGolden, OverlappedChunksMatchFloat64Reference) {
  const auto [rankSize, backend] = GetParam();
  RunLinearProcessRanks(rankSize, backend, "linear", [&](int rank, const nlohmann::json& job) {
    for (DataType dtype : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT}) {
      for (const LinearCase& c : LinearSuiteCases(dtype, rankSize)) {
        RunLinearCase(c, job, rank, rankSize, nullptr, "overlap between processes");
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelProcessGolden, LinearProcessParams(),
                         LinearProcessParamName());

// The bound the goldens use where ranks sum partials rounded to y's dtype (LinearBoundMagnitude)
// admits that computation, which |g| alone does not, and still rejects wrong sums.
TEST(LinearParallelBound, AdmitsRoundedPartialsAndRejectsWrongSums) {
  const int rankSize = 3;
  const int64_t rows = 15, k = 33, n = 40;
  const DataType dtype = ACL_BF16;
  std::vector<std::vector<double>> partials(rankSize, std::vector<double>(rows * n, 0.0));
  for (int r = 0; r < rankSize; ++r) {
    const auto x = LinearUniform(dtype, rows * k, 5, r, 1, -1.0, 1.0);
    const auto w = LinearUniform(dtype, k * n, 5, r, 2, -1.0, 1.0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t t = 0; t < k; ++t) partials[r][i * n + j] += x[i * k + t] * w[j * k + t];
      }
    }
  }
  std::vector<double> golden(rows * n, 0.0), sumOfMagnitudes(rows * n, 0.0);
  for (int r = 0; r < rankSize; ++r) {
    for (size_t i = 0; i < golden.size(); ++i) {
      golden[i] += partials[r][i];
      sumOfMagnitudes[i] += std::fabs(partials[r][i]);
    }
  }
  const std::vector<double> magnitude = LinearBoundMagnitude(dtype, sumOfMagnitudes, golden);
  // y = round(sum over the ranks but `skip` of roundPartial(P_r)), the sum exact.
  auto sumOf = [&](const std::function<double(double)>& roundPartial, int skip) {
    std::vector<double> y(golden.size(), 0.0);
    for (size_t i = 0; i < y.size(); ++i) {
      for (int r = 0; r < rankSize; ++r) {
        if (r != skip) y[i] += roundPartial(partials[r][i]);
      }
      y[i] = RoundTrip(dtype, y[i]);
    }
    return y;
  };
  auto rounded = [&](double v) { return RoundTrip(dtype, v); };
  // A bfloat16 ulp of v (8 significant bits).
  auto ulp = [](double v) { return v == 0 ? 0.0 : std::ldexp(1.0, std::ilogb(v) - 7); };
  const std::vector<double> atb = sumOf(rounded, -1);
  EXPECT_EQ(FirstBeyondBound(dtype, atb, golden, magnitude), -1)
      << "ATB's graph: partials rounded once, summed, rounded once";
  std::vector<double> ofGolden(golden.size());
  for (size_t i = 0; i < golden.size(); ++i) ofGolden[i] = std::fabs(golden[i]);
  EXPECT_NE(FirstBeyondBound(dtype, atb, golden, ofGolden), -1)
      << "thr * max(1, |g|) rejects honest rounded partials where they cancel";
  EXPECT_NE(FirstBeyondBound(dtype, sumOf(rounded, 1), golden, magnitude), -1)
      << "rank 1's partial dropped";
  const std::vector<double> twiceUp =
      sumOf([&](double v) { return rounded(v) + 2 * ulp(rounded(v)); }, -1);
  EXPECT_NE(FirstBeyondBound(dtype, twiceUp, golden, magnitude), -1)
      << "every partial rounded up twice more (two ulps too high)";
}

// ---- errors: one per rule --------------------------------------------------------------------

TEST(LinearParallelErrors, RejectsUnknownType) {
  EXPECT_EQ(CreateLinearParallel({{"type", 7}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("type = 7 is not one of"));
  EXPECT_EQ(CreateLinearParallel({{"type", -1}}), ERROR_INVALID_PARAM);
}

TEST(LinearParallelErrors, RejectsUnsupportedAtbTypes) {
  for (int type : {5, 6}) {
    EXPECT_EQ(CreateLinearParallel({{"type", type}}), ERROR_INVALID_PARAM) << type;
    EXPECT_THAT(LastErrorMessage(), HasSubstr("is not supported"));
  }
  EXPECT_THAT(LastErrorMessage(), HasSubstr("GMM_RS_ALLTOALLVC"));
}

TEST(LinearParallelErrors, KeepIntermediateNeedsAllGatherLinear) {
  EXPECT_EQ(CreateLinearParallel({{"type", 0}, {"keepIntermediate", true}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("keepIntermediate = true needs type = 2"));
  EXPECT_EQ(CreateLinearParallel({{"type", 2}, {"keepIntermediate", true}}), NO_ERROR);
}

TEST(LinearParallelErrors, RejectsOutDataTypeOtherThanFloats) {
  EXPECT_EQ(CreateLinearParallel({{"outDataType", ACL_INT8}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outDataType = 2"));
  EXPECT_EQ(CreateLinearParallel({{"outDataType", ACL_BF16}}), NO_ERROR);
}

TEST(LinearParallelErrors, AtbBackendRules) {
  EXPECT_EQ(CreateLinearParallel({{"backend", "lcoc"}, {"rankSize", 3}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("power of 2"));
  EXPECT_EQ(CreateLinearParallel({{"backend", "lcoc"}, {"rankSize", 4}}), NO_ERROR);
  EXPECT_EQ(CreateLinearParallel({{"backend", "mc2"}, {"type", 0}, {"commMode", 1}}),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("type = 1 (LINEAR_REDUCE_SCATTER) only"));
  EXPECT_EQ(CreateLinearParallel({{"backend", "mc2"}, {"type", 1}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("commMode = 1"));
  EXPECT_EQ(CreateLinearParallel(
                {{"backend", "mc2"}, {"type", 1}, {"commMode", 1}, {"hasResidual", true}}),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("no residual"));
  EXPECT_EQ(CreateLinearParallel({{"backend", "mc2"}, {"type", 1}, {"commMode", 1}}), NO_ERROR);
  EXPECT_EQ(CreateLinearParallel({{"backend", "lccc"}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("backend = \"lccc\""));
}

TEST(LinearParallelErrors, RejectsNonFloatAndMixedDtypes) {
  EXPECT_EQ(InferLinearParallel({}, {LinearDesc(ACL_INT32, {2, 4}), LinearDesc(ACL_INT32, {3, 4})}),
            ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("x has dtype int32"));
  EXPECT_EQ(
      InferLinearParallel({}, {LinearDesc(ACL_BF16, {2, 4}), LinearDesc(ACL_FLOAT16, {3, 4})}),
      ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("weight has dtype float16 but x has bfloat16"));
  EXPECT_EQ(InferLinearParallel({{"hasResidual", true}},
                                {LinearDesc(ACL_BF16, {2, 4}), LinearDesc(ACL_BF16, {3, 4}),
                                 LinearDesc(ACL_FLOAT, {3})}),
            ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("residual has dtype float32"));
}

TEST(LinearParallelErrors, RejectsWrongDimCounts) {
  EXPECT_EQ(InferLinearParallel({}, {LinearDesc(ACL_FLOAT, {4}), LinearDesc(ACL_FLOAT, {3, 4})}),
            ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("[m, k] or [b, m, k]"));
  EXPECT_EQ(
      InferLinearParallel({}, {LinearDesc(ACL_FLOAT, {1, 2, 2, 4}), LinearDesc(ACL_FLOAT, {3, 4})}),
      ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_EQ(
      InferLinearParallel({}, {LinearDesc(ACL_FLOAT, {2, 4}), LinearDesc(ACL_FLOAT, {1, 3, 4})}),
      ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("weight has shape [1, 3, 4]"));
  EXPECT_EQ(InferLinearParallel({{"hasResidual", true}},
                                {LinearDesc(ACL_FLOAT, {2, 4}), LinearDesc(ACL_FLOAT, {3, 4}),
                                 LinearDesc(ACL_FLOAT, {1, 3})}),
            ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("residual has shape [1, 3]"));
}

TEST(LinearParallelErrors, RejectsWeightOfOtherK) {
  EXPECT_EQ(InferLinearParallel({}, {LinearDesc(ACL_FLOAT, {2, 4}), LinearDesc(ACL_FLOAT, {4, 3})}),
            ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("k = 4; with transWeight = true"));
  EXPECT_EQ(InferLinearParallel({{"transWeight", false}},
                                {LinearDesc(ACL_FLOAT, {2, 4}), LinearDesc(ACL_FLOAT, {3, 4})}),
            ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("must be [k, n]"));
  EXPECT_EQ(InferLinearParallel({{"transWeight", false}},
                                {LinearDesc(ACL_FLOAT, {2, 4}), LinearDesc(ACL_FLOAT, {4, 3})}),
            NO_ERROR);
}

TEST(LinearParallelErrors, RejectsResidualOfOtherN) {
  EXPECT_EQ(InferLinearParallel({{"hasResidual", true}},
                                {LinearDesc(ACL_FLOAT, {2, 4}), LinearDesc(ACL_FLOAT, {3, 4}),
                                 LinearDesc(ACL_FLOAT, {4})}),
            ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("the weight gives n = 3"));
}

TEST(LinearParallelErrors, ReduceScatterNeedsDim0DivisibleByRankSize) {
  EXPECT_EQ(InferLinearParallel({{"type", 1}},
                                {LinearDesc(ACL_FLOAT, {3, 4}), LinearDesc(ACL_FLOAT, {5, 4})}),
            ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("dim0 = 3 is not divisible by rankSize = 2"));
}

TEST(LinearParallelErrors, ResidualInputCountFollowsHasResidual) {
  EXPECT_EQ(InferLinearParallel({{"hasResidual", true}},
                                {LinearDesc(ACL_FLOAT, {2, 4}), LinearDesc(ACL_FLOAT, {3, 4})}),
            ERROR_INVALID_IN_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("x, weight, residual"));
}

TEST(LinearParallelErrors, RejectsOutputOverlappingAnInput) {
  OperationPtr op = MakeOperation("LinearParallelOperation", {{"rank", 0},
                                                              {"rankSize", 1},
                                                              {"commMode", 1},
                                                              {"commDomain", UniqueDomain()},
                                                              {"transWeight", false}});
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {2, 4}), HostTensor(ACL_FLOAT, {4, 4})};
  // y [2, 4] inside the weight's memory.
  const std::vector<Tensor> outs = {View(ins[1], 4, {2, 4})};
  EXPECT_EQ(RunOperation(*op, Tensors(ins), outs), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("y overlaps weight"));
}

TEST(LinearParallelErrors, RejectsUnknownAlgorithm) {
  ScopedLinearAlgorithm scoped("pipelined");
  OperationPtr op = MakeOperation(
      "LinearParallelOperation",
      {{"rank", 0}, {"rankSize", 1}, {"commMode", 1}, {"commDomain", UniqueDomain()}});
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {2, 4}), HostTensor(ACL_FLOAT, {3, 4})};
  std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
  EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_INVALID_PARAM);
  EXPECT_THAT(
      LastErrorMessage(),
      HasSubstr("COLLOPS_ALGO_LINEARPARALLEL=\"pipelined\" is not one of serial, overlap, auto"));
}

TEST(LinearParallelErrors, RanksWithDifferentRowsGetRankMismatch) {
  // 2 x 6 and 3 x 4 outputs hold 12 elements each: the rows themselves must agree.
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeOperation("LinearParallelOperation", ThreadJob(rank, 2, domain));
    const int64_t rows = rank == 0 ? 2 : 3, n = rank == 0 ? 6 : 4;
    std::vector<HostTensor> ins = {HostTensor(ACL_BF16, {rows, 8}), HostTensor(ACL_BF16, {n, 8})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("LINEAR_ALL_REDUCE 1x2"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("LINEAR_ALL_REDUCE 1x3"));
  });
}

TEST(LinearParallelErrors, RanksSummingDifferentDtypesGetRankMismatch) {
  // The ranks sum y's dtype: rank 0's float32 partials cannot meet rank 1's bfloat16 ones.
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    for (int type : {LINEAR_ALL_REDUCE, LINEAR_REDUCE_SCATTER}) {
      nlohmann::json param = ThreadJob(rank, 2, domain);
      param["type"] = type;
      param["outDataType"] = rank == 0 ? ACL_FLOAT : ACL_BF16;
      OperationPtr op = MakeOperation("LinearParallelOperation", param);
      std::vector<HostTensor> ins = {HostTensor(ACL_BF16, {4, 8}), HostTensor(ACL_BF16, {2, 8})};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH) << type;
      EXPECT_THAT(LastErrorMessage(), HasSubstr("f32 but rank 1 runs")) << type;
    }
  });
}

TEST(LinearParallelErrors, RanksWithDifferentTypesGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    nlohmann::json param = ThreadJob(rank, 2, domain);
    param["type"] = rank == 0 ? LINEAR_ALL_REDUCE : LINEAR_REDUCE_SCATTER;
    OperationPtr op = MakeOperation("LinearParallelOperation", param);
    std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {4, 8}), HostTensor(ACL_FLOAT, {2, 8})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("LINEAR_REDUCE_SCATTER"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
