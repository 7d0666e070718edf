// Quantised AllReduce (AllReduceOperation with quantType 1 per-tensor or 2 per-channel):
// y = (Σ_r x_r + R·offset)·scale, x int8 [..., n], scale float16 ([1], or [n] / [1, n]), offset
// float16 [1], y of outDataType (float16, bfloat16, float32) with x's shape.
//
// The int8 data crosses the wire as int8, never as a float copy: that halves the bytes float16
// would move. Every algorithm is built from the Communicator primitives, so it runs on every
// backend:
//   local    R = 1: dequantise x, no communication.
//   gather   AllGatherV of x (int8), then every rank sums all R copies and dequantises the whole
//            tensor itself. One round; each rank receives (R - 1)·N bytes.
//   scatter  The seed's pipeline: AllToAllV of int8 slices (rank r receives slice r of every
//            rank's x), rank r sums and dequantises its slice into y, then AllGatherV of the
//            dequantised slices in outDataType. Two rounds; each rank receives
//            (R - 1)/R·N·(1 + sizeof(outDataType)) bytes.
// The int8 sums are exact, so both give the same bits, and every rank the same y (the scales
// agree: the signature check compares a digest of scale and offset across ranks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "collops/tensor.h"

namespace collops {

enum class QuantAlgo { kAuto, kLocal, kGather, kScatter };

/// "auto", "local", "gather", "scatter".
const char* QuantAlgoName(QuantAlgo algo);

/// COLLOPS_ALGO_ALLREDUCE_QUANT: "gather", "scatter", or "auto" / unset (kAuto). Throws
/// Error(ERROR_INVALID_PARAM) naming the variable for anything else.
QuantAlgo QuantAlgoFromEnv();

/// ATB's shape rules of the quantised inputs {x, scale, offset}, with ATB's codes: offset not [1],
/// n = x.shape[-1] not a multiple of 16, a per-tensor scale not [1], a per-channel scale not [n]
/// or [1, n], or n > 4194304 per channel -> ERROR_INVALID_TENSOR_DIM; scale of more than 2 dims ->
/// ERROR_INVALID_TENSOR_DIM_NUM. `where` starts the message.
void CheckQuantInputs(const std::string& where, int quantType, const std::vector<TensorDesc>& in);

/// One call's algorithm and the slices rank r dequantises (scatter).
struct QuantAllReducePlan {
  QuantAlgo algo = QuantAlgo::kLocal;
  int64_t count = 0;                 ///< elements of x
  std::vector<int64_t> sliceCounts;  ///< scatter: elements of rank j's slice
  std::vector<int64_t> sliceStarts;  ///< scatter: where rank j's slice starts in x and y
  std::vector<int64_t> fullCounts;   ///< gather: count for every rank
  std::vector<int64_t> fullDispls;   ///< gather: j * count
  uint64_t workspaceBytes = 0;       ///< the int8 blocks received
};

/// The plan for `count` elements on `rankSize` ranks; `forced` kAuto chooses by R and size
/// (R = 2, or N up to kQuantGatherMaxElements: gather; else scatter).
QuantAllReducePlan PlanQuantAllReduce(QuantAlgo forced, int rankSize, int rank, int64_t count);

/// Below this many elements a gather (one round) beats a scatter (two) at every R.
constexpr int64_t kQuantGatherMaxElements = 16 << 10;

/// A 64-bit digest of the bytes of scale and offset, for the cross-rank agreement check.
uint64_t QuantValuesDigest(const Tensor& scale, const Tensor& offset);

/// Runs `plan`: x, scale, offset as CheckQuantInputs accepted them; y of `outDtype`; `workspace`
/// holds plan.workspaceBytes.
void RunQuantAllReduce(const QuantAllReducePlan& plan, int quantType, const Tensor& x,
                       const Tensor& scale, const Tensor& offset, const Tensor& y,
                       uint8_t* workspace, Communicator& comm);

}  // namespace collops
