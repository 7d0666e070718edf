#include "quant_suite.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json QuantParam(const SuiteJob& job, int quantType, DataType out) {
  return job.Param({{"quantType", quantType}, {"outDataType", static_cast<int>(out)}});
}

/// x int8 of `shape`, scale and offset float16 of their shapes (zeros), or other dtypes.
std::vector<HostTensor> QuantInputs(const std::vector<int64_t>& shape,
                                    const std::vector<int64_t>& scaleShape,
                                    const std::vector<int64_t>& offsetShape = {1},
                                    DataType xType = ACL_INT8, DataType scaleType = ACL_FLOAT16,
                                    DataType offsetType = ACL_FLOAT16) {
  return {HostTensor(xType, shape), HostTensor(scaleType, scaleShape),
          HostTensor(offsetType, offsetShape)};
}

std::vector<TensorDesc> Descs(const std::vector<HostTensor>& tensors) {
  std::vector<TensorDesc> descs;
  for (const auto& t : tensors) descs.push_back(t.tensor().desc);
  return descs;
}

std::string Where(const SuiteJob& job, const std::string& what) {
  return Concat("quantised AllReduce ", what, " (", job.backend.empty() ? "hccl" : job.backend,
                ", rank ", job.rank, " of ", job.rankSize, ")");
}

}  // namespace

std::string QuantCase::Name() const {
  return Concat("quantType ", quantType, " ", DataTypeName(out), " x ",
                DimsToString(MakeDims(shape)), " scale ", DimsToString(MakeDims(scaleShape)));
}

QuantCase MakeQuantCase(int rankSize, int quantType, DataType out, std::vector<int64_t> shape,
                        bool scaleAsRow, uint64_t seed) {
  QuantCase c;
  c.quantType = quantType;
  c.out = out;
  c.shape = std::move(shape);
  const int64_t n = c.shape.back();
  const int64_t count = NumElements(MakeDims(c.shape));
  c.scaleShape = quantType == 1 ? std::vector<int64_t>{1}
                 : scaleAsRow   ? std::vector<int64_t>{1, n}
                                : std::vector<int64_t>{n};
  std::mt19937_64 rng(seed * 7919u + static_cast<uint64_t>(quantType) * 131u + out);
  for (int r = 0; r < rankSize; ++r) {
    std::vector<double> x(count);
    for (auto& v : x) v = static_cast<double>(static_cast<int>(rng() % 256) - 128);
    c.x.push_back(std::move(x));
  }
  // Scales k/256 and offsets in halves: exact in float16, and products that float16 holds.
  c.scale.resize(quantType == 1 ? 1 : n);
  for (auto& s : c.scale) s = static_cast<double>(1 + rng() % 64) / 256.0;
  c.offset = static_cast<double>(static_cast<int>(rng() % 9) - 4) / 2.0;
  c.golden.resize(count);
  c.exact.resize(count);
  const float offsetTimesR = static_cast<float>(rankSize) * static_cast<float>(c.offset);
  for (int64_t i = 0; i < count; ++i) {
    int64_t sum = 0;
    for (int r = 0; r < rankSize; ++r) sum += static_cast<int64_t>(c.x[r][i]);
    const double scale = c.scale[quantType == 1 ? 0 : i % n];
    c.golden[i] = (static_cast<double>(sum) + rankSize * c.offset) * scale;
    volatile float t = static_cast<float>(sum) + offsetTimesR;  // no fused multiply-add
    c.exact[i] = static_cast<double>(t * static_cast<float>(scale));
  }
  return c;
}

namespace {

/// One rank's call of a case: the operation, this rank's x with the scale and the offset, and y
/// as the operation infers it.
struct CaseCall {
  OperationPtr op;
  std::vector<HostTensor> ins;
  std::vector<HostTensor> outs;
};

CaseCall MakeCaseCall(const SuiteJob& job, const QuantCase& c) {
  CaseCall call;
  call.op = MakeOperation("AllReduceOperation", QuantParam(job, c.quantType, c.out), job.comm);
  call.ins = {HostTensor::FromValues(ACL_INT8, c.shape, c.x[job.rank]),
              HostTensor::FromValues(ACL_FLOAT16, c.scaleShape, c.scale),
              HostTensor::FromValues(ACL_FLOAT16, {1}, {c.offset})};
  call.outs = AllocateOutputs(*call.op, Tensors(call.ins));
  return call;
}

}  // namespace

void RunQuantCase(const SuiteJob& job, const QuantCase& c) {
  const std::string what = Where(job, c.Name());
  CaseCall call = MakeCaseCall(job, c);
  std::vector<HostTensor>& outs = call.outs;
  ASSERT_EQ(outs.size(), 1u) << what;
  EXPECT_EQ(outs[0].dtype(), c.out) << what;
  EXPECT_EQ(outs[0].shape(), c.shape) << what;
  const Status status = RunOperation(*call.op, Tensors(call.ins), Tensors(outs));
  ASSERT_EQ(status, NO_ERROR) << what << ": " << StatusName(status) << ": " << LastErrorMessage();
  ExpectClose(outs[0], c.golden, what + " vs ATB's golden");
  ExpectExactly(outs[0], c.exact, what + " vs the float32 steps");
}

uint64_t QuantWorkspaceBytes(const SuiteJob& job, const QuantCase& c) {
  CaseCall call = MakeCaseCall(job, c);
  uint64_t workspaceSize = ~uint64_t{0};
  const Status status =
      call.op->Setup(VariantPack{Tensors(call.ins), Tensors(call.outs)}, workspaceSize, nullptr);
  EXPECT_EQ(status, NO_ERROR) << Where(job, c.Name()) << ": " << StatusName(status) << ": "
                              << LastErrorMessage();
  return workspaceSize;
}

void RunQuantAllReduceCases(const SuiteJob& job) {
  // 67 x 1024 int8 = 68608 bytes: beyond kSuiteShmBytes, and above the sizes from which R >= 3
  // takes rsag (kQuantOneShotMaxElements; lccl's own: shm_policy.h) while the smaller ones take
  // oneshot.
  const std::vector<std::vector<int64_t>> shapes = {{0, 32}, {16}, {3, 48}, {2, 5, 64}, {67, 1024}};
  uint64_t seed = 1;
  for (int quantType : {1, 2}) {
    for (DataType out : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT}) {
      for (const auto& shape : shapes) {
        const QuantCase c = MakeQuantCase(job.rankSize, quantType, out, shape, seed % 2 == 0, seed);
        ++seed;
        RunQuantCase(job, c);
      }
    }
  }
}

void RunQuantAllReduceErrors(const SuiteJob& job) {
  // Create: ATB's ERROR_INVALID_PARAM rules, each naming its field.
  struct CreateRule {
    nlohmann::json extra;
    const char* field;
  };
  const std::vector<CreateRule> createRules = {
      {{{"quantType", 1}, {"outDataType", 1}, {"allReduceType", "max"}}, "allReduceType"},
      {{{"quantType", 2}, {"outDataType", 1}, {"allReduceType", "prod"}}, "allReduceType"},
      {{{"quantType", 3}, {"outDataType", 1}}, "quantType"},
      {{{"quantType", -1}, {"outDataType", 1}}, "quantType"},
      {{{"quantType", 1}}, "outDataType"},
      {{{"quantType", 1}, {"outDataType", 2}}, "outDataType"},
      {{{"quantType", 2}, {"outDataType", 9}}, "outDataType"},
      {{{"outDataType", 1}}, "outDataType"},
  };
  for (const CreateRule& rule : createRules) {
    const std::string what = Where(job, Concat("create ", rule.extra.dump()));
    Operation* raw = nullptr;
    EXPECT_EQ(CreateOperation("AllReduceOperation", job.Param(rule.extra), job.comm, &raw),
              ERROR_INVALID_PARAM)
        << what;
    OperationPtr owned(raw);
    EXPECT_THAT(LastErrorMessage(), HasSubstr(rule.field)) << what;
  }

  // Inputs: ATB's shape rules and codes, the dtype table, the tensor count. Each is checked by
  // InferShape and by Setup (the same Status), except where the tensors would be too large.
  struct InputRule {
    const char* what;
    int quantType;
    std::vector<HostTensor> ins;
    Status status;
    const char* field;
    bool setupToo;
  };
  std::vector<InputRule> inputRules;
  auto add = [&](const char* what, int quantType, std::vector<HostTensor> ins, Status status,
                 const char* field, bool setupToo = true) {
    inputRules.push_back({what, quantType, std::move(ins), status, field, setupToo});
  };
  add("n % 16 != 0", 1, QuantInputs({2, 24}, {1}), ERROR_INVALID_TENSOR_DIM, "multiple of 16");
  add("n % 16 != 0 per channel", 2, QuantInputs({40}, {40}), ERROR_INVALID_TENSOR_DIM,
      "multiple of 16");
  add("offset [2]", 1, QuantInputs({2, 16}, {1}, {2}), ERROR_INVALID_TENSOR_DIM, "offset");
  add("offset [1, 1]", 2, QuantInputs({2, 16}, {16}, {1, 1}), ERROR_INVALID_TENSOR_DIM, "offset");
  add("scale of 3 dims", 2, QuantInputs({2, 16}, {1, 1, 16}), ERROR_INVALID_TENSOR_DIM_NUM,
      "scale");
  add("scale of 3 dims per tensor", 1, QuantInputs({2, 16}, {1, 1, 1}),
      ERROR_INVALID_TENSOR_DIM_NUM, "scale");
  add("per-tensor scale [16]", 1, QuantInputs({2, 16}, {16}), ERROR_INVALID_TENSOR_DIM, "scale");
  add("per-tensor scale [1, 1]", 1, QuantInputs({2, 16}, {1, 1}), ERROR_INVALID_TENSOR_DIM,
      "scale");
  add("per-channel scale [32] for n = 16", 2, QuantInputs({2, 16}, {32}), ERROR_INVALID_TENSOR_DIM,
      "scale");
  add("per-channel scale [2, 16]", 2, QuantInputs({2, 16}, {2, 16}), ERROR_INVALID_TENSOR_DIM,
      "scale");
  add("per-channel scale [1]", 2, QuantInputs({2, 16}, {1}), ERROR_INVALID_TENSOR_DIM, "scale");
  add("n > 4194304 per channel", 2, {}, ERROR_INVALID_TENSOR_DIM, "4194304", false);
  add("x float16", 1, QuantInputs({2, 16}, {1}, {1}, ACL_FLOAT16), ERROR_INVALID_TENSOR_DTYPE,
      "(x)");
  add("scale float32", 1, QuantInputs({2, 16}, {1}, {1}, ACL_INT8, ACL_FLOAT),
      ERROR_INVALID_TENSOR_DTYPE, "(scale)");
  add("offset bfloat16", 2, QuantInputs({2, 16}, {16}, {1}, ACL_INT8, ACL_FLOAT16, ACL_BF16),
      ERROR_INVALID_TENSOR_DTYPE, "(offset)");
  add("x alone", 1, {HostTensor(ACL_INT8, {2, 16})}, ERROR_INVALID_IN_TENSOR_NUM, "scale");
  for (InputRule& rule : inputRules) {
    const std::string what = Where(job, rule.what);
    OperationPtr op =
        MakeOperation("AllReduceOperation", QuantParam(job, rule.quantType, ACL_FLOAT16), job.comm);
    std::vector<TensorDesc> descs = Descs(rule.ins);
    if (rule.ins.empty()) {  // descriptions only: 8 MiB of data would test nothing more
      TensorDesc x, scale, offset;
      x.dtype = ACL_INT8;
      x.shape = MakeDims({1, 4194320});
      scale.dtype = offset.dtype = ACL_FLOAT16;
      scale.shape = MakeDims({4194320});
      offset.shape = MakeDims({1});
      descs = {x, scale, offset};
    }
    std::vector<TensorDesc> outDescs;
    EXPECT_EQ(op->InferShape(descs, outDescs), rule.status) << what << ": " << LastErrorMessage();
    EXPECT_THAT(LastErrorMessage(), HasSubstr(rule.field)) << what;
    if (!rule.setupToo) continue;
    HostTensor y(ACL_FLOAT16, rule.ins[0].shape());
    std::vector<Tensor> outs = {y.tensor()};
    EXPECT_EQ(RunOperation(*op, Tensors(rule.ins), outs), rule.status)
        << what << " (Setup): " << LastErrorMessage();
    EXPECT_THAT(LastErrorMessage(), HasSubstr(rule.field)) << what << " (Setup)";
  }

  // Outputs that disagree with outDataType or x's shape, and a scale inside y.
  {
    OperationPtr op = MakeOperation("AllReduceOperation", QuantParam(job, 1, ACL_BF16), job.comm);
    std::vector<HostTensor> ins = QuantInputs({2, 16}, {1});
    std::vector<HostTensor> wrongType = {HostTensor(ACL_FLOAT16, {2, 16})};
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(wrongType)), ERROR_INVALID_TENSOR_DTYPE)
        << Where(job, "y float16 for outDataType 27") << ": " << LastErrorMessage();
    std::vector<HostTensor> wrongShape = {HostTensor(ACL_BF16, {32})};
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(wrongShape)), ERROR_INVALID_TENSOR_DIM)
        << Where(job, "y [32] for x [2, 16]") << ": " << LastErrorMessage();
    std::vector<HostTensor> y = {HostTensor(ACL_BF16, {2, 16})};
    std::vector<Tensor> aliased = Tensors(ins);
    aliased[1] = View(y[0], 3, {1});
    aliased[1].desc.dtype = ACL_FLOAT16;
    EXPECT_EQ(RunOperation(*op, aliased, Tensors(y)), ERROR_INVALID_PARAM)
        << Where(job, "scale inside y") << ": " << LastErrorMessage();
    EXPECT_THAT(LastErrorMessage(), HasSubstr("scale"));
  }

  if (job.rankSize < 2) return;
  // Ranks that disagree: every rank gets ERROR_RANK_MISMATCH naming what differs, and no rank
  // writes y.
  const int last = job.rankSize - 1;
  struct MismatchRule {
    const char* what;
    std::function<void(std::vector<HostTensor>&)> change;  // applied on the last rank only
    int lastQuantType;
    const char* needle;
  };
  const std::vector<MismatchRule> mismatches = {
      {"scale differs on the last rank",
       [](std::vector<HostTensor>& ins) {
         ins[1] = HostTensor::FromValues(ACL_FLOAT16, {1}, {0.25});
       },
       1, "scale and offset"},
      {"offset differs on the last rank",
       [](std::vector<HostTensor>& ins) {
         ins[2] = HostTensor::FromValues(ACL_FLOAT16, {1}, {1.5});
       },
       1, "scale and offset"},
      {"count differs on the last rank",
       [](std::vector<HostTensor>& ins) { ins[0] = HostTensor(ACL_INT8, {3, 16}); }, 1,
       "element count"},
      {"per channel on the last rank",
       [](std::vector<HostTensor>& ins) {
         ins[1] = HostTensor::FromValues(ACL_FLOAT16, {16}, std::vector<double>(16, 0.5));
       },
       2, "operation"},
  };
  for (const MismatchRule& rule : mismatches) {
    const std::string what = Where(job, rule.what);
    const int quantType = job.rank == last ? rule.lastQuantType : 1;
    OperationPtr op =
        MakeOperation("AllReduceOperation", QuantParam(job, quantType, ACL_FLOAT16), job.comm);
    std::vector<HostTensor> ins = {HostTensor(ACL_INT8, {2, 16}),
                                   HostTensor::FromValues(ACL_FLOAT16, {1}, {0.5}),
                                   HostTensor::FromValues(ACL_FLOAT16, {1}, {-1.0})};
    if (job.rank == last) rule.change(ins);
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    const std::vector<double> sentinel(outs[0].numel(), 7.0);
    outs[0] = HostTensor::FromValues(ACL_FLOAT16, outs[0].shape(), sentinel);
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH)
        << what << ": " << LastErrorMessage();
    EXPECT_THAT(LastErrorMessage(), HasSubstr(rule.needle)) << what;
    EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat("rank ", last))) << what;
    ExpectExactly(outs[0], sentinel, what + ": y must stay unwritten");
  }
  // A plain AllReduce of int8 on one rank against quantised ones elsewhere.
  {
    const std::string what = Where(job, "plain int8 AllReduce on the last rank");
    OperationPtr op =
        MakeOperation("AllReduceOperation",
                      job.rank == last ? job.Param() : QuantParam(job, 1, ACL_FLOAT16), job.comm);
    std::vector<HostTensor> ins = QuantInputs({2, 16}, {1});
    if (job.rank == last) ins.erase(ins.begin() + 1, ins.end());
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH)
        << what << ": " << LastErrorMessage();
    EXPECT_THAT(LastErrorMessage(), HasSubstr("operation")) << what;
  }
}

}  // namespace testing
}  // namespace collops
