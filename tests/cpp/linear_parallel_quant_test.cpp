// Golden and error tests of the quantised LinearParallelOperation (W8A8 and W8A16; quantType 0 to
// 3 on types 0 LINEAR_ALL_REDUCE and 3 PURE_LINEAR): thread ranks at every golden R, serial and
// overlapped, process ranks on lccl and the default backend, and one test per validation rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "linear_golden.h"
#include "linear_quant_golden.h"
#include "op_harness.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

class LinearParallelQuantGolden
    : public ::testing::TestWithParam<std::tuple<int, int, const char*>> {};

TEST_P(LinearParallelQuantGolden, MatchesFloat64Reference) {
  const auto [rankSize, type, algo] = GetParam();
  ScopedLinearAlgorithm scoped(algo);
  const std::vector<LinearQuantCase> cases = LinearQuantCases(type);
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize, [&](int rank) {
    const nlohmann::json job = {
        {"rank", rank}, {"rankSize", rankSize}, {"commMode", 1}, {"commDomain", domain}};
    for (const LinearQuantCase& c : cases) RunLinearQuantCase(c, job, rank, rankSize, algo);
  });
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelQuantGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::Values(0, 3),
                                            ::testing::Values("serial", "overlap")),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         std::get<1>(info.param) == 0 ? "AllReduce" : "Pure", "_",
                                         std::get<2>(info.param));
                         });

// Between processes, overlapped: lccl and the default backend, R = 2 and 3.
class LinearParallelQuantProcessGolden
    : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(LinearParallelQuantProcessGolden, OverlappedChunksMatchFloat64Reference) {
  const auto [rankSize, backend] = GetParam();
  RunLinearProcessRanks(
      rankSize, backend, "linear_quant", [&](int rank, const nlohmann::json& job) {
        for (int type : {0, 3}) {
          for (const LinearQuantCase& c : LinearQuantCases(type)) {
            RunLinearQuantCase(c, job, rank, rankSize, "quantised, between processes");
          }
        }
      });
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelQuantProcessGolden, LinearProcessParams(),
                         LinearProcessParamName());

// ---- errors at creation: one per rule ----------------------------------------------------------

TEST(LinearParallelQuantErrors, RejectsUnknownQuantType) {
  for (int quant : {4, -2}) {
    EXPECT_EQ(CreateLinearParallel({{"quantType", quant}}), ERROR_INVALID_PARAM) << quant;
    EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat("quantType = ", quant, " is not one of")));
  }
}

TEST(LinearParallelQuantErrors, QuantisesTypes0And3Only) {
  for (int type : {1, 2, 4}) {
    nlohmann::json twoDim = {{"agDim", 2}, {"rsDim", 1}};
    EXPECT_EQ(CreateLinearParallel(
                  {{"type", type}, {"quantType", 1}, {"outDataType", 1}, {"twoDimTPInfo", twoDim}}),
              ERROR_INVALID_PARAM)
        << type;
    EXPECT_THAT(LastErrorMessage(), HasSubstr("quantType = 1 (PER_CHANNEL) is supported with "
                                              "type = 0 (LINEAR_ALL_REDUCE) and 3 (PURE_LINEAR) "
                                              "only, got type = " +
                                              std::to_string(type)));
  }
  EXPECT_THAT(LastErrorMessage(), HasSubstr("(AG_LINEAR_RS)"));
  for (int type : {0, 3}) {
    for (int quant : {0, 1, 3}) {
      EXPECT_EQ(CreateLinearParallel({{"type", type}, {"quantType", quant}, {"outDataType", 27}}),
                NO_ERROR);
    }
    EXPECT_EQ(CreateLinearParallel({{"type", type}, {"quantType", 2}, {"quantGroupSize", 64}}),
              NO_ERROR);
  }
}

TEST(LinearParallelQuantErrors, PerGroupNeedsAPositiveGroupSize) {
  for (int group : {0, -8}) {
    EXPECT_EQ(CreateLinearParallel({{"quantType", 2}, {"quantGroupSize", group}}),
              ERROR_INVALID_PARAM);
    EXPECT_THAT(LastErrorMessage(),
                HasSubstr("quantType = 2 (PER_GROUP) needs quantGroupSize > 0"));
  }
}

TEST(LinearParallelQuantErrors, GroupSizeOnlyWithPerGroup) {
  for (int quant : {-1, 0, 1, 3}) {
    EXPECT_EQ(
        CreateLinearParallel({{"quantType", quant}, {"quantGroupSize", 128}, {"outDataType", 1}}),
        ERROR_INVALID_PARAM)
        << quant;
    EXPECT_THAT(LastErrorMessage(), HasSubstr("quantGroupSize = 128 is read only with quantType "
                                              "= 2 (PER_GROUP)"));
  }
}

TEST(LinearParallelQuantErrors, QuantisedOutDataTypeIsFloat16OrBfloat16) {
  EXPECT_EQ(CreateLinearParallel({{"quantType", 1}, {"outDataType", 0}}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outDataType = 0 with quantType = 1 (PER_CHANNEL)"));
  EXPECT_EQ(CreateLinearParallel({{"quantType", 0}, {"outDataType", -1}}), NO_ERROR);
  EXPECT_EQ(CreateLinearParallel({{"quantType", 0}, {"outDataType", 1}}), NO_ERROR);
  EXPECT_EQ(CreateLinearParallel({{"outDataType", 0}}),
            NO_ERROR);  // unquantised: float32 y is allowed
}

// ---- errors of the tensors: one per rule -------------------------------------------------------

/// InferShape of a quantised op with `extra` params (quantType 1, outDataType 1 by default) on
/// `ins`.
Status Infer(const nlohmann::json& extra, const std::vector<TensorDesc>& ins) {
  nlohmann::json param = {{"quantType", 1}, {"outDataType", 1}};
  for (const auto& [key, value] : extra.items()) param[key] = value;
  return InferLinearParallel(param, ins);
}

/// x int8 [4, 16], weight int8 [8, 16], bias int32 [8], scale float32 [8]: a valid W8A8 call.
std::vector<TensorDesc> W8A8() {
  return {LinearDesc(ACL_INT8, {4, 16}), LinearDesc(ACL_INT8, {8, 16}), LinearDesc(ACL_INT32, {8}),
          LinearDesc(ACL_FLOAT, {8})};
}

/// x bfloat16 [4, 16], weight int8 [8, 16], offset and scale bfloat16 [8]: a valid W8A16 call.
std::vector<TensorDesc> W8A16() {
  return {LinearDesc(ACL_BF16, {4, 16}), LinearDesc(ACL_INT8, {8, 16}), LinearDesc(ACL_BF16, {8}),
          LinearDesc(ACL_BF16, {8})};
}

TEST(LinearParallelQuantErrors, ValidCallsPass) {
  EXPECT_EQ(Infer({}, W8A8()), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(Infer({{"outDataType", -1}}, W8A16()), NO_ERROR) << LastErrorMessage();
}

TEST(LinearParallelQuantErrors, InputCountFollowsQuantType) {
  EXPECT_EQ(Infer({}, {LinearDesc(ACL_INT8, {4, 16}), LinearDesc(ACL_INT8, {8, 16})}),
            ERROR_INVALID_IN_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("(x, weight, bias, scale)"));
  EXPECT_EQ(Infer({{"quantType", 3}, {"hasResidual", true}}, W8A8()), ERROR_INVALID_IN_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("(x, weight, bias, scale, residual, perTokenScale)"));
}

TEST(LinearParallelQuantErrors, W8A8NeedsOutDataType) {
  EXPECT_EQ(Infer({{"outDataType", -1}}, W8A8()), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[0] (x) is int8 (W8A8), so outDataType"));
}

TEST(LinearParallelQuantErrors, PerGroupIsW8A16Only) {
  std::vector<TensorDesc> ins = W8A8();
  ins[3] = LinearDesc(ACL_FLOAT, {8, 2});
  EXPECT_EQ(Infer({{"quantType", 2}, {"quantGroupSize", 8}}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("which quantType = 2 (PER_GROUP) does not take"));
}

TEST(LinearParallelQuantErrors, PerTokenIsW8A8Only) {
  std::vector<TensorDesc> ins = W8A16();
  ins.push_back(LinearDesc(ACL_FLOAT, {4}));
  EXPECT_EQ(Infer({{"quantType", 3}, {"outDataType", -1}}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("quantType = 3 (PER_TOKEN) needs an int8 x (W8A8)"));
}

TEST(LinearParallelQuantErrors, W8A16OutDataTypeIsXsDtype) {
  EXPECT_EQ(Infer({{"outDataType", 1}}, W8A16()), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("outDataType = 1 but inTensors[0] (x) is bfloat16"));
  EXPECT_EQ(Infer({{"outDataType", 27}}, W8A16()), NO_ERROR);
}

TEST(LinearParallelQuantErrors, XIsInt8Float16OrBfloat16) {
  std::vector<TensorDesc> ins = W8A16();
  for (DataType dtype : {ACL_FLOAT, ACL_INT32}) {
    ins[0] = LinearDesc(dtype, {4, 16});
    EXPECT_EQ(Infer({{"outDataType", -1}}, ins), ERROR_INVALID_TENSOR_DTYPE);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("takes int8 (W8A8) or float16 / bfloat16 (W8A16)"));
  }
}

TEST(LinearParallelQuantErrors, WeightIsInt8) {
  std::vector<TensorDesc> ins = W8A16();
  ins[1] = LinearDesc(ACL_BF16, {8, 16});
  EXPECT_EQ(Infer({{"outDataType", -1}}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[1] (weight) has dtype bfloat16; accepted: "
                                            "int8"));
}

TEST(LinearParallelQuantErrors, ScaleDtypeFollowsTheForm) {
  std::vector<TensorDesc> ins = W8A8();
  ins[3] = LinearDesc(ACL_FLOAT16, {8});
  EXPECT_EQ(Infer({}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[3] (scale) has dtype float16; it must be "
                                            "float32 (W8A8)"));
  ins = W8A16();
  ins[3] = LinearDesc(ACL_FLOAT, {8});
  EXPECT_EQ(Infer({{"outDataType", -1}}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[3] (scale) has dtype float32; it must be "
                                            "bfloat16"));
}

TEST(LinearParallelQuantErrors, ScaleShapeFollowsQuantType) {
  std::vector<TensorDesc> ins = W8A8();
  ins[3] = LinearDesc(ACL_FLOAT, {8});
  EXPECT_EQ(Infer({{"quantType", 0}}, ins), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[3] (scale) has shape [8]; it must be [1] "
                                            "(PER_TENSOR)"));
  ins[3] = LinearDesc(ACL_FLOAT, {9});
  EXPECT_EQ(Infer({}, ins), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("it must be [n] or [1, n] = [8] or [1, 8]"));
  ins[3] = LinearDesc(ACL_FLOAT, {1, 1, 8});
  EXPECT_EQ(Infer({}, ins), ERROR_INVALID_TENSOR_DIM_NUM);
  ins[3] = LinearDesc(ACL_FLOAT, {1, 8});
  EXPECT_EQ(Infer({}, ins), NO_ERROR);
  // PER_GROUP: [n, k / G] for a weight [n, k], [k / G, n] for [k, n].
  ins = W8A16();
  ins[2] = ins[3] = LinearDesc(ACL_BF16, {2, 8});
  EXPECT_EQ(Infer({{"quantType", 2}, {"quantGroupSize", 8}, {"outDataType", -1}}, ins),
            ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("[n, k / quantGroupSize] = [8, 2]"));
  ins[2] = ins[3] = LinearDesc(ACL_BF16, {8, 2});
  EXPECT_EQ(Infer({{"quantType", 2}, {"quantGroupSize", 8}, {"outDataType", -1}}, ins), NO_ERROR);
  ins[1] = LinearDesc(ACL_INT8, {16, 8});
  EXPECT_EQ(
      Infer({{"quantType", 2}, {"quantGroupSize", 8}, {"outDataType", -1}, {"transWeight", false}},
            ins),
      ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("[k / quantGroupSize, n] = [2, 8]"));
}

TEST(LinearParallelQuantErrors, GroupSizeDividesK) {
  std::vector<TensorDesc> ins = W8A16();
  ins[2] = ins[3] = LinearDesc(ACL_BF16, {8, 1});
  EXPECT_EQ(Infer({{"quantType", 2}, {"quantGroupSize", 12}, {"outDataType", -1}}, ins),
            ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("k = 16, not a multiple of quantGroupSize = 12"));
}

TEST(LinearParallelQuantErrors, BiasFollowsTheForm) {
  std::vector<TensorDesc> ins = W8A8();
  ins[2] = LinearDesc(ACL_FLOAT, {8});
  EXPECT_EQ(Infer({}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[2] (bias) has dtype float32; it must be "
                                            "int32"));
  ins[2] = LinearDesc(ACL_INT32, {1, 8});
  EXPECT_EQ(Infer({}, ins), ERROR_INVALID_TENSOR_DIM_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[2] (bias) has shape [1, 8]"));
  ins[2] = LinearDesc(ACL_INT32, {7});
  EXPECT_EQ(Infer({}, ins), ERROR_INVALID_TENSOR_DIM);
  ins[2] = LinearDesc(ACL_INT32, {0});
  EXPECT_EQ(Infer({}, ins), NO_ERROR);
  // W8A16: the offset has the scale's dtype and shape, or is empty.
  ins = W8A16();
  ins[2] = LinearDesc(ACL_FLOAT16, {8});
  EXPECT_EQ(Infer({{"outDataType", -1}}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[2] (bias) has dtype float16"));
  ins[2] = LinearDesc(ACL_BF16, {1});
  EXPECT_EQ(Infer({{"outDataType", -1}}, ins), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("like the scale, or [0] for no offset"));
  ins[2] = LinearDesc(ACL_BF16, {0});
  EXPECT_EQ(Infer({{"outDataType", -1}}, ins), NO_ERROR);
}

TEST(LinearParallelQuantErrors, PerTokenScaleIsFloat32PerRow) {
  std::vector<TensorDesc> ins = W8A8();
  ins.push_back(LinearDesc(ACL_FLOAT16, {4}));
  EXPECT_EQ(Infer({{"quantType", 3}}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[4] (perTokenScale) has dtype float16"));
  ins[4] = LinearDesc(ACL_FLOAT, {5});
  EXPECT_EQ(Infer({{"quantType", 3}}, ins), ERROR_INVALID_TENSOR_DIM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("[rows of x] = [4]"));
  ins[0] = LinearDesc(ACL_INT8, {2, 2, 16});
  ins[4] = LinearDesc(ACL_FLOAT, {4});
  EXPECT_EQ(Infer({{"quantType", 3}}, ins), NO_ERROR);
}

TEST(LinearParallelQuantErrors, ResidualHasYsDtype) {
  std::vector<TensorDesc> ins = W8A8();
  ins.push_back(LinearDesc(ACL_INT8, {8}));
  EXPECT_EQ(Infer({{"hasResidual", true}}, ins), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("inTensors[4] (residual) has dtype int8; a quantised "
                                            "op adds it to y, so it must be y's float16"));
  ins[4] = LinearDesc(ACL_FLOAT16, {8});
  EXPECT_EQ(Infer({{"hasResidual", true}}, ins), NO_ERROR);
}

}  // namespace
}  // namespace testing
}  // namespace collops
