// The W8A8 LinearParallelOperation multiplies the weight's bytes as they are at each call: the
// same buffer passed again and again, rewritten in place between calls (a write the op has no way
// to see), another buffer, and two buffers in turn, each written while the other was in use.
// Anything the op kept of a weight between calls (a repacked copy, say) would compute with old
// bytes here. Every call is checked against a golden each rank computes from every rank's inputs
// in double; thread ranks serial and overlapped, process ranks on lccl and hccl.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

#include "linear_golden.h"
#include "op_harness.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

constexpr int64_t kRows = 6, kK = 64, kN = 24;

/// Integers in [lo, hi], one sequence per (rank, what, version): every rank makes every rank's.
std::vector<double> Ints(int64_t count, int lo, int hi, int rank, int what, int version) {
  std::mt19937_64 gen(static_cast<uint64_t>(rank) * 1000003 + what * 1009 + version);
  std::uniform_int_distribution<int> pick(lo, hi);
  std::vector<double> v(count);
  for (auto& e : v) e = pick(gen);
  return v;
}

/// Rank r's inputs of a call: x and the weight of `version`, its bias and scale.
struct RankCall {
  std::vector<double> x, w, bias, scale;
  RankCall(int rank, int version, int step)
      : x(Ints(kRows * kK, -128, 127, rank, 0, step)),
        w(Ints(kN * kK, -128, 127, rank, 1, version)),
        bias(Ints(kN, -20000, 20000, rank, 2, 0)),
        scale(Ints(kN, 1, 100, rank, 3, 0)) {
    for (auto& s : scale) s *= 1.0 / 65536;  // exact in float32
  }
};

/// y = sum over ranks of (x . W + bias) * scale[col], in double; W = weight^T (transWeight).
std::vector<double> Golden(int rankSize, int version, int step, bool transWeight) {
  std::vector<double> y(kRows * kN, 0.0);
  for (int r = 0; r < rankSize; ++r) {
    const RankCall in(r, version, step);
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        double sum = in.bias[j];
        for (int64_t t = 0; t < kK; ++t) {
          sum += in.x[i * kK + t] * in.w[transWeight ? j * kK + t : t * kN + j];
        }
        y[i * kN + j] += sum * in.scale[j];
      }
    }
  }
  return y;
}

/// One step of a rank's calls: the weight's values, written into one of two buffers just before
/// the call (memcpy: the op is not told).
struct Step {
  int version;  ///< of the weight's values
  int buffer;   ///< 0 or 1: which of the two weight buffers (another address)
};

/// Runs the steps as rank `rank` (job: its comm params) and checks each y.
void RunSteps(const nlohmann::json& job, int rank, int rankSize, bool transWeight,
              const std::string& what) {
  nlohmann::json param = job;
  param["type"] = 0;
  param["transWeight"] = transWeight;
  param["quantType"] = 1;
  param["outDataType"] = ACL_FLOAT16;
  OperationPtr op = MakeOperation("LinearParallelOperation", param);
  ASSERT_NE(op, nullptr);
  const std::vector<Step> steps = {
      {1, 0}, {1, 0}, {1, 0},  // the same bytes in the same buffer, call after call
      {2, 0}, {2, 0},          // rewritten in place, then passed again
      {3, 0},                  // rewritten again
      {4, 1}, {4, 1},          // another buffer
      {5, 0},                  // back to the first, rewritten while the other was in use
      {6, 1}, {7, 0}, {8, 1},  // the two in turn, each rewritten before its call
      {8, 1}, {9, 1},          // rewritten after a call with the same bytes
  };
  const std::vector<int64_t> wShape =
      transWeight ? std::vector<int64_t>{kN, kK} : std::vector<int64_t>{kK, kN};
  std::vector<HostTensor> weights = {HostTensor(ACL_INT8, wShape), HostTensor(ACL_INT8, wShape)};
  for (size_t s = 0; s < steps.size(); ++s) {
    const Step& step = steps[s];
    const std::string where = Concat(what, " rank ", rank, " step ", s, " version ", step.version,
                                     " buffer ", step.buffer);
    const RankCall in(rank, step.version, static_cast<int>(s));
    HostTensor values = HostTensor::FromValues(ACL_INT8, wShape, in.w);
    HostTensor& weight = weights[step.buffer];
    std::memcpy(weight.data(), values.data(), values.tensor().dataSize);  // in place
    std::vector<HostTensor> ins = {HostTensor::FromValues(ACL_INT8, {kRows, kK}, in.x),
                                   HostTensor::FromValues(ACL_INT32, {kN}, in.bias),
                                   HostTensor::FromValues(ACL_FLOAT, {kN}, in.scale)};
    const std::vector<Tensor> inTensors = {ins[0].tensor(), weight.tensor(), ins[1].tensor(),
                                           ins[2].tensor()};
    std::vector<HostTensor> outs = AllocateOutputs(*op, inTensors);
    ASSERT_EQ(RunOperation(*op, inTensors, Tensors(outs)), NO_ERROR) << where << LastErrorMessage();
    ExpectClose(outs[0], Golden(rankSize, step.version, static_cast<int>(s), transWeight), where);
  }
}

class LinearParallelWeightWritesGolden
    : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(LinearParallelWeightWritesGolden, MultipliesTheWeightAsLastWritten) {
  const auto [rankSize, algo] = GetParam();
  ScopedLinearAlgorithm scoped(algo);
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize, [&](int rank) {
    const nlohmann::json job = {
        {"rank", rank}, {"rankSize", rankSize}, {"commMode", 1}, {"commDomain", domain}};
    for (bool transWeight : {true, false}) {
      RunSteps(job, rank, rankSize, transWeight, algo);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelWeightWritesGolden,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values("serial", "overlap")),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         std::get<1>(info.param));
                         });

class LinearParallelWeightWritesProcessGolden
    : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(LinearParallelWeightWritesProcessGolden, MultipliesTheWeightAsLastWritten) {
  const auto [rankSize, backend] = GetParam();
  RunLinearProcessRanks(
      rankSize, backend, "linear_writes", [&](int rank, const nlohmann::json& job) {
        for (bool transWeight : {true, false}) {
          RunSteps(job, rank, rankSize, transWeight, "between processes, overlapped");
        }
      });
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelWeightWritesProcessGolden,
                         LinearProcessParams(), LinearProcessParamName());

}  // namespace
}  // namespace testing
}  // namespace collops
