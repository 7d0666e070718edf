// Golden cases of LinearParallelOperation, shared by the thread-rank tests and the op suite (every
// engine with real ranks): each rank builds every rank's inputs from the same seed and computes
// its own golden in double, independently of the library (no BLAS, no float32 accumulation).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "collops/collops.h"

namespace collops {
namespace testing {

struct LinearCase {
  int type = 0;  ///< LinearParallelType
  bool transWeight = true;
  bool hasResidual = false;
  bool keepIntermediate = false;
  DataType dtype = ACL_FLOAT;
  int outDataType = -1;         ///< the param; -1 = x's dtype
  std::vector<int64_t> xShape;  ///< [m, k] or [b, m, k], the same on every rank
  int64_t n = 1;
  uint64_t seed = 1;
  /// AG_LINEAR_RS's twoDimTPInfo (type 4 only).
  int agDim = 0;
  int rsDim = 0;
  int innerDimIsAg = 1;

  /// "LINEAR_ALL_REDUCE bfloat16 x [4, 19] n 13 transWeight residual".
  std::string Name() const;
  /// The op's params beyond the communicator's.
  nlohmann::json Param() const;
};

/// Runs `c` as rank `rank` of `rankSize` with `commParams` (rank, rankSize, backend, ...), on
/// `comm` when not null, and checks y (and the intermediate) against the golden with ATB's
/// per-dtype threshold thr, scaled as LinearBoundMagnitude says (the intermediate exactly).
/// Failures name `what` and the case.
void RunLinearCase(const LinearCase& c, const nlohmann::json& commParams, int rank, int rankSize,
                   Communicator* comm, const std::string& what);

/// A short grid for engines that run every op (op_suite): types 0-3, both weight layouts, with
/// and without residual, 2-D and 3-D x, for `dtype`; and AG_LINEAR_RS on the grids rankSize x 1,
/// 1 x rankSize and, for even rankSize > 2, rankSize / 2 x 2, each with one innerDimIsAg.
std::vector<LinearCase> LinearSuiteCases(DataType dtype, int rankSize);

/// What y's error may scale with, per element: |g| (ATB's rule, |a - g| <= thr * max(1, |g|)),
/// plus, where the ranks sum partials rounded to a float16/bfloat16 y (`partialsMagnitude` holds
/// sum_r |P_r| of the exact partials; empty for types 2 and 3), sum_r |P_r|. Each rounding errs
/// by at most u times the value it rounds (u = 2^-8 bfloat16, 2^-11 float16): the R partials
/// (sum_r |P_r|), their sum S (|S| <= sum_r |P_r|) and y = S + residual (|g|), so
/// |a - g| <= u * (2 sum_r |P_r| + |g|) <= thr * (sum_r |P_r| + |g|) for thr >= 2u. Cancellation
/// makes |g| alone too small a scale: the partials' rounding does not shrink with their sum.
std::vector<double> LinearBoundMagnitude(DataType yDtype,
                                         const std::vector<double>& partialsMagnitude,
                                         const std::vector<double>& golden);

/// Values in [lo, hi) as `dtype` stores them, different per (seed, rank, what): every rank makes
/// every rank's inputs alike.
std::vector<double> LinearUniform(DataType dtype, int64_t count, uint64_t seed, int rank, int what,
                                  double lo, double hi);
/// The rows of x [m, k] or [b, m, k]: m or b * m.
int64_t Rows(const std::vector<int64_t>& xShape);

/// Sets COLLOPS_ALGO_LINEARPARALLEL for one scope (before any rank thread starts).
class ScopedLinearAlgorithm {
 public:
  explicit ScopedLinearAlgorithm(const char* algo);
  ~ScopedLinearAlgorithm();
  ScopedLinearAlgorithm(const ScopedLinearAlgorithm&) = delete;
  ScopedLinearAlgorithm& operator=(const ScopedLinearAlgorithm&) = delete;
};

/// Runs body(rank, job) on `rankSize` process ranks of `backend` (job: their comm params, in
/// commDomain `domain`) with overlapped chunks, COLLOPS_TIMEOUT 30 and a 90 s deadline.
void RunLinearProcessRanks(int rankSize, const std::string& backend, const std::string& domain,
                           const std::function<void(int rank, const nlohmann::json& job)>& body);

/// The parameters of the process-rank golden suites: R in {2, 3} on lccl and hccl.
inline auto LinearProcessParams() {
  return ::testing::Combine(::testing::Values(2, 3),
                            ::testing::Values(std::string("lccl"), std::string("hccl")));
}

/// Names a process-rank golden case "R<ranks>_<backend>".
struct LinearProcessParamName {
  std::string operator()(const ::testing::TestParamInfo<std::tuple<int, std::string>>& info) const {
    return "R" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
  }
};

/// The status of creating a LinearParallelOperation as rank 0 of 2 with `extra` params.
Status CreateLinearParallel(const nlohmann::json& extra);
/// The status of InferShape on `ins` of a LinearParallelOperation, rank 1 of 2, `extra` params.
Status InferLinearParallel(const nlohmann::json& extra, const std::vector<TensorDesc>& ins);
TensorDesc LinearDesc(DataType dtype, const std::vector<int64_t>& shape);

}  // namespace testing
}  // namespace collops
