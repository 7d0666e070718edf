// Golden cases of the quantised LinearParallelOperation (W8A8 and W8A16), for thread and process
// ranks: each rank builds every rank's inputs from one seed and computes its golden in double
// from the integers and factors themselves (no BLAS, no float32), following ATB's golden.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/collops.h"

namespace collops {
namespace testing {

struct LinearQuantCase {
  int type = 0;       ///< 0 LINEAR_ALL_REDUCE or 3 PURE_LINEAR
  int quantType = 1;  ///< 0 PER_TENSOR, 1 PER_CHANNEL, 2 PER_GROUP, 3 PER_TOKEN
  int groupSize = 0;  ///< PER_GROUP
  /// int8: W8A8 (y is outDataType); float16 / bfloat16: W8A16 (y is x's dtype).
  DataType xDtype = ACL_INT8;
  int outDataType = ACL_FLOAT16;
  bool transWeight = true;
  bool hasResidual = false;
  bool hasBias = true;          ///< false: bias is an empty [0] tensor
  bool scaleWithRow = false;    ///< the scale as [1, n] instead of [n] (PER_CHANNEL, PER_TOKEN)
  std::vector<int64_t> xShape;  ///< [m, k] or [b, m, k]
  int64_t n = 1;
  uint64_t seed = 1;

  std::string Name() const;
  nlohmann::json Param() const;
};

/// Runs `c` as rank `rank` of `rankSize` with `commParams` and checks y against the golden with
/// ATB's per-dtype tolerance. Failures name `what` and the case.
void RunLinearQuantCase(const LinearQuantCase& c, const nlohmann::json& commParams, int rank,
                        int rankSize, const std::string& what);

/// The grid: both forms and every quantType each takes, both dtypes, both weight layouts, with
/// and without bias and residual, 2-D and 3-D x, for `type`.
std::vector<LinearQuantCase> LinearQuantCases(int type);

}  // namespace testing
}  // namespace collops
