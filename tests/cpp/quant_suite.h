// The quantised AllReduce suite (AllReduceOperation with quantType 1 or 2): ATB's golden
// y = (Σ_r x_r + R·offset)·scale over quantType × outDataType × shapes, and every error rule with
// its Status, run by one rank of any engine's job (thread ranks, forked lccl processes, mpirun
// ranks, hierarchical hccl, c10d through the Python twin in tests/python). RunEveryOp runs it with
// the int8 dtype, so every engine that runs the op suite runs this too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collops/collops.h"
#include "op_harness.h"
#include "op_suite.h"

namespace collops {
namespace testing {

/// One golden case: every rank's x, the shared scale and offset, and the expected y.
struct QuantCase {
  int quantType = 1;
  DataType out = ACL_FLOAT16;
  std::vector<int64_t> shape;          ///< x's shape [..., n]
  std::vector<int64_t> scaleShape;     ///< [1], [n] or [1, n]
  std::vector<std::vector<double>> x;  ///< per rank, int8 values
  std::vector<double> scale;           ///< float16 values
  double offset = 0;                   ///< a float16 value
  /// (Σ x + R·offset)·scale in float64: ATB's golden, compared with ATB's tolerance.
  std::vector<double> golden;
  /// The same formula in the documented float32 steps (exact int8 sum, one float32 addition,
  /// one float32 multiplication): y must equal it rounded to `out`, bit for bit, on every rank.
  std::vector<double> exact;

  std::string Name() const;
};

/// The case for `rankSize` ranks: x in the whole int8 range, scales and offset exact in float16.
QuantCase MakeQuantCase(int rankSize, int quantType, DataType out, std::vector<int64_t> shape,
                        bool scaleAsRow, uint64_t seed);

/// Runs one case on this rank of `job` (quantType and outDataType from the case) and checks y
/// against both goldens; gtest failures name the case and the rank.
void RunQuantCase(const SuiteJob& job, const QuantCase& c);

/// The workspace Setup asks for on this rank of `job` for case `c` (Setup only, no Execute).
uint64_t QuantWorkspaceBytes(const SuiteJob& job, const QuantCase& c);

/// quantType {1, 2} × outDataType {float16, bfloat16, float32} × shapes from empty to beyond
/// kSuiteShmBytes (per channel: scale [n] and [1, n] alternately).
void RunQuantAllReduceCases(const SuiteJob& job);

/// Every create, shape, dtype and aliasing rule of the quantised form (each with ATB's Status
/// and the field in the message), and the cross-rank rules (one rank's scale, count or form
/// differs: ERROR_RANK_MISMATCH on every rank).
void RunQuantAllReduceErrors(const SuiteJob& job);

}  // namespace testing
}  // namespace collops
