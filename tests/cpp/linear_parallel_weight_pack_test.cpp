// The W8A8 LinearParallelOperation's repacked weight: a weight passed again with the same
// contentId (collops/tensor.h) is repacked once into oneDNN's layout and reused while the id
// repeats; a new id (new bytes in place, another buffer) or id 0 never computes with an old
// pack. Every call is checked against a golden each rank computes from every rank's inputs in
// double; thread ranks serial and overlapped, process ranks on lccl and the default backend.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

#include "linear_golden.h"
#include "op_harness.h"
#include "ops/linear_parallel/linear_parallel_operation.h"
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

/// One step of a rank's calls: the weight's values, its buffer, its contentId, and what the
/// op's pack count must be after the call ("same": as before it; "more": above it).
struct Step {
  int version;  ///< of the weight's values, written into the buffer before the call
  int buffer;   ///< 0 or 1: which of two weight buffers (another address)
  uint64_t id;  ///< 0: unknown
  enum { kSame, kMore } packs;
};

/// Runs the steps as rank `rank` (job: its comm params) and checks each y and pack count.
/// `exact`: each pack is one reorder (one chunk: one primitive layout).
void RunSteps(const nlohmann::json& job, int rank, int rankSize, bool transWeight, bool exact,
              const std::string& what) {
  nlohmann::json param = job;
  param["type"] = 0;
  param["transWeight"] = transWeight;
  param["quantType"] = 1;
  param["outDataType"] = ACL_FLOAT16;
  OperationPtr op = MakeOperation("LinearParallelOperation", param);
  auto* linear = dynamic_cast<LinearParallelOperation*>(op.get());
  ASSERT_NE(linear, nullptr);
  const uint64_t a = NewContentId(), b = NewContentId(), c = NewContentId();
  const std::vector<Step> steps = {
      {1, 0, a, Step::kSame},  // first call with id a: the stored layout, no pack
      {1, 0, a, Step::kMore},  // a again: packed
      {1, 0, a, Step::kSame},  // and reused
      {1, 0, a, Step::kSame},
      {2, 0, b, Step::kSame},  // new bytes in place, new id: the stored layout (the new bytes)
      {2, 0, b, Step::kMore},  // b again: packed anew
      {3, 0, 0, Step::kSame},  // new bytes, id unknown: never packed
      {3, 0, 0, Step::kSame},
      {3, 0, b, Step::kSame},  // b after an unknown call: not twice in a row, stored layout
      {4, 1, c, Step::kSame},  // another buffer
      {4, 1, c, Step::kMore},
      {4, 1, c, Step::kSame},
      {5, 1, 0, Step::kSame},  // the pack of c is not used for id 0
  };
  const std::vector<int64_t> wShape =
      transWeight ? std::vector<int64_t>{kN, kK} : std::vector<int64_t>{kK, kN};
  std::vector<HostTensor> weights = {HostTensor(ACL_INT8, wShape), HostTensor(ACL_INT8, wShape)};
  uint64_t packs = 0, onePack = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const Step& step = steps[s];
    const std::string where = Concat(what, " rank ", rank, " step ", s, " version ", step.version,
                                     " id ", step.id == 0 ? "0" : "set");
    const RankCall in(rank, step.version, static_cast<int>(s));
    HostTensor values = HostTensor::FromValues(ACL_INT8, wShape, in.w);
    HostTensor& weight = weights[step.buffer];
    std::memcpy(weight.data(), values.data(), values.tensor().dataSize);  // in place
    weight.tensor().contentId = step.id;
    std::vector<HostTensor> ins = {HostTensor::FromValues(ACL_INT8, {kRows, kK}, in.x),
                                   HostTensor::FromValues(ACL_INT32, {kN}, in.bias),
                                   HostTensor::FromValues(ACL_FLOAT, {kN}, in.scale)};
    const std::vector<Tensor> inTensors = {ins[0].tensor(), weight.tensor(), ins[1].tensor(),
                                           ins[2].tensor()};
    std::vector<HostTensor> outs = AllocateOutputs(*op, inTensors);
    ASSERT_EQ(RunOperation(*op, inTensors, Tensors(outs)), NO_ERROR) << where << LastErrorMessage();
    ExpectClose(outs[0], Golden(rankSize, step.version, static_cast<int>(s), transWeight), where);
    const uint64_t now = linear->WeightPacks();
    if (step.packs == Step::kSame) {
      EXPECT_EQ(now, packs) << where << ": no repack expected";
    } else {
      EXPECT_GT(now, packs) << where << ": the weight must be repacked";
      if (onePack == 0) onePack = now - packs;
      EXPECT_EQ(now - packs, onePack) << where << ": as many reorders as the first pack";
      if (exact) EXPECT_EQ(now - packs, 1u) << where;
    }
    packs = now;
  }
}

class LinearParallelWeightPackGolden
    : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(LinearParallelWeightPackGolden, RepacksOncePerIdAndNeverComputesWithAnOldPack) {
  const auto [rankSize, algo] = GetParam();
  ScopedLinearAlgorithm scoped(algo);
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize, [&](int rank) {
    const nlohmann::json job = {
        {"rank", rank}, {"rankSize", rankSize}, {"commMode", 1}, {"commDomain", domain}};
    for (bool transWeight : {true, false}) {
      RunSteps(job, rank, rankSize, transWeight, std::string(algo) == "serial", algo);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelWeightPackGolden,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values("serial", "overlap")),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         std::get<1>(info.param));
                         });

class LinearParallelWeightPackProcessGolden
    : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(LinearParallelWeightPackProcessGolden, RepacksOncePerIdAndNeverComputesWithAnOldPack) {
  const auto [rankSize, backend] = GetParam();
  RunLinearProcessRanks(rankSize, backend, "linear_pack", [&](int rank, const nlohmann::json& job) {
    for (bool transWeight : {true, false}) {
      RunSteps(job, rank, rankSize, transWeight, false, "between processes, overlapped");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(LinearParallel, LinearParallelWeightPackProcessGolden,
                         LinearProcessParams(), LinearProcessParamName());

}  // namespace
}  // namespace testing
}  // namespace collops
