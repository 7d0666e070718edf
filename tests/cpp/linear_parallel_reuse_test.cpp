// One LinearParallelOperation called again and again: the product's primitives and scratchpad are
// kept per row count and dtype, so a later call with other rows, k, n, dtype or weight values must
// still give that call's own product. PURE_LINEAR without residual has oneDNN write y in its own
// dtype, and LINEAR_ALL_REDUCE of a bfloat16 y sums the partials oneDNN writes into y there, with
// no float32 copy in the workspace.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "collops/registry.h"
#include "op_harness.h"
#include "ops/linear_parallel/linear_parallel_param.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

nlohmann::json PureLinear(bool transWeight, bool residual) {
  return {{"rank", 0},
          {"rankSize", 1},
          {"commMode", 1},
          {"commDomain", UniqueDomain()},
          {"type", PURE_LINEAR},
          {"transWeight", transWeight},
          {"hasResidual", residual}};
}

/// x [rows, k] . W + residual in double, W = weight^T for a weight [n, k] (transWeight).
std::vector<double> Golden(const std::vector<double>& x, const std::vector<double>& w,
                           const std::vector<double>& residual, int64_t rows, int64_t k, int64_t n,
                           bool transWeight) {
  std::vector<double> y(rows * n, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = residual.empty() ? 0.0 : residual[j];
      for (int64_t p = 0; p < k; ++p) sum += x[i * k + p] * w[transWeight ? j * k + p : p * n + j];
      y[i * n + j] = sum;
    }
  }
  return y;
}

struct Call {
  DataType dtype;
  int64_t rows, k, n;
};

/// Runs `op` on x and weight of `call` (values from `seed`) into `weight` (reused when its shape
/// and dtype fit, so the weight's address can stay while its values change) and checks y.
void RunAndCheck(Operation& op, const Call& call, uint64_t seed, bool transWeight, bool residual,
                 std::vector<HostTensor>& weight, uint64_t* workspace = nullptr) {
  const std::string what = Concat(DtypeTestName(call.dtype), " rows ", call.rows, " k ", call.k,
                                  " n ", call.n, " seed ", seed, transWeight ? " trans" : "");
  const std::vector<int64_t> wShape =
      transWeight ? std::vector<int64_t>{call.n, call.k} : std::vector<int64_t>{call.k, call.n};
  const auto x = TestValues(call.dtype, call.rows * call.k, seed, 0, true);
  const auto w = TestValues(call.dtype, call.k * call.n, seed + 1, 0, true);
  const auto r = residual ? TestValues(call.dtype, call.n, seed + 2, 0) : std::vector<double>{};
  HostTensor fresh = HostTensor::FromValues(call.dtype, wShape, w);
  if (!weight.empty() && weight[0].dtype() == call.dtype && weight[0].shape() == wShape) {
    std::memcpy(weight[0].data(), fresh.data(), fresh.tensor().dataSize);  // same address
  } else {
    weight = {fresh};
  }
  HostTensor xt = HostTensor::FromValues(call.dtype, {call.rows, call.k}, x);
  std::vector<HostTensor> rt;
  if (residual) rt.push_back(HostTensor::FromValues(call.dtype, {call.n}, r));
  std::vector<Tensor> inTensors = {xt.tensor(), weight[0].tensor()};
  if (residual) inTensors.push_back(rt[0].tensor());
  std::vector<HostTensor> outs = AllocateOutputs(op, inTensors);
  ASSERT_EQ(RunOperation(op, inTensors, Tensors(outs)), NO_ERROR) << what << LastErrorMessage();
  ExpectClose(outs[0], Golden(x, w, r, call.rows, call.k, call.n, transWeight), what);
  if (workspace != nullptr) {
    VariantPack pack;
    pack.inTensors = inTensors;
    pack.outTensors = Tensors(outs);
    ASSERT_EQ(op.Setup(pack, *workspace, nullptr), NO_ERROR) << what << LastErrorMessage();
  }
}

TEST(LinearParallelReuse, EveryCallGetsItsOwnProduct) {
  const std::vector<Call> calls = {
      {ACL_BF16, 6, 70, 9},     // a primitive for 6 rows
      {ACL_BF16, 6, 70, 9},     // the same shapes and weight address, other weight values
      {ACL_BF16, 1, 70, 9},     // another row count
      {ACL_BF16, 6, 70, 9},     // back to the first primitive
      {ACL_FLOAT, 6, 70, 9},    // another dtype, the same k and n
      {ACL_FLOAT16, 6, 70, 9},  // float16 (widened where oneDNN has no float16 kernel)
      {ACL_FLOAT16, 6, 70, 9},  // the widened weight is the new one
      {ACL_BF16, 33, 40, 17},   // other k and n
      {ACL_BF16, 4, 0, 5},      // k = 0: zeros
      {ACL_BF16, 6, 70, 9},
  };
  for (bool transWeight : {true, false}) {
    for (bool residual : {false, true}) {
      OperationPtr op =
          MakeOperation("LinearParallelOperation", PureLinear(transWeight, residual), nullptr);
      std::vector<HostTensor> weight;
      uint64_t seed = 10;
      for (const Call& call : calls) {
        RunAndCheck(*op, call, seed, transWeight, residual, weight);
        seed += 3;
      }
    }
  }
}

TEST(LinearParallelReuse, DirectProductNeedsNoWorkspace) {
  OperationPtr plain = MakeOperation("LinearParallelOperation", PureLinear(true, false), nullptr);
  OperationPtr withResidual =
      MakeOperation("LinearParallelOperation", PureLinear(true, true), nullptr);
  std::vector<HostTensor> weight;
  uint64_t bytes = 1;
  RunAndCheck(*plain, {ACL_FLOAT, 8, 64, 16}, 3, true, false, weight, &bytes);
  EXPECT_EQ(bytes, 0u) << "float32 y is the product itself";
  RunAndCheck(*withResidual, {ACL_BF16, 8, 64, 16}, 3, true, true, weight, &bytes);
  EXPECT_GT(bytes, 0u) << "the residual is added to a float32 product before the rounding";
  // Where the CPU multiplies bfloat16 (oneDNN does not widen it), y needs no float32 copy.
  if (__builtin_cpu_supports("avx512bf16")) {
    RunAndCheck(*plain, {ACL_BF16, 8, 64, 16}, 3, true, false, weight, &bytes);
    EXPECT_EQ(bytes, 0u) << "oneDNN writes bfloat16 y directly";
  }
}

// LINEAR_ALL_REDUCE of a bfloat16 y: oneDNN writes each rank's partial into y, which is summed in
// place, the residual added there: no float32 copy of the product in the workspace.
TEST(LinearParallelReuse, AllReduceSumsInPlaceOnY) {
  if (!__builtin_cpu_supports("avx512bf16")) GTEST_SKIP() << "oneDNN widens bfloat16 here";
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    for (bool residual : {false, true}) {
      OperationPtr op = MakeOperation("LinearParallelOperation", {{"rank", rank},
                                                                  {"rankSize", 2},
                                                                  {"commMode", 1},
                                                                  {"commDomain", domain},
                                                                  {"hasResidual", residual}});
      std::vector<HostTensor> ins = {HostTensor(ACL_BF16, {8, 64}), HostTensor(ACL_BF16, {16, 64})};
      if (residual) ins.push_back(HostTensor(ACL_BF16, {16}));
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      VariantPack pack;
      pack.inTensors = Tensors(ins);
      pack.outTensors = Tensors(outs);
      uint64_t bytes = 1;
      ASSERT_EQ(op->Setup(pack, bytes, nullptr), NO_ERROR) << LastErrorMessage();
      EXPECT_EQ(bytes, 0u) << (residual ? "with" : "without") << " residual";
    }
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
