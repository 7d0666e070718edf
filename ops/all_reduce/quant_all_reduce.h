// Quantised AllReduce (AllReduceOperation with quantType 1 per-tensor or 2 per-channel):
// y = (Σ_r x_r + R·offset)·scale, x int8 [..., n], scale float16 ([1], or [n] / [1, n]), offset
// float16 [1], y of outDataType (float16, bfloat16, float32) with x's shape.
//
// The int8 data crosses the wire as int8, never as a float copy: that halves the bytes float16
// would move. An engine with a path of its own runs it (Communicator::AllReduceQuantised: lccl),
// and the operation then asks for no workspace; on the others it is built from their AllGatherV
// and AllToAllV into a workspace of the int8 blocks received, so it runs on every backend:
//   local    R = 1: dequantise x, no communication.
//   oneshot  AllGatherV of x (int8), then every rank sums all R copies and dequantises the whole
//            tensor itself. One exchange; each rank receives (R - 1)·N bytes.
//   rsag     ATB's int8 pipeline: AllToAllV of int8 slices (rank r receives slice r of every
//            rank's x), rank r sums and dequantises its slice into y, then AllGatherV of the
//            dequantised slices in outDataType. Two exchanges; each rank receives
//            (R - 1)/R·N·(1 + sizeof(outDataType)) bytes.
// The int8 sums are exact, so both give the same bits, and every rank the same y (the scales
// agree: the signature check compares a digest of scale and offset across ranks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "collops/reduce.h"
#include "collops/tensor.h"

namespace collops {

enum class QuantAlgo { kAuto, kLocal, kOneShot, kReduceScatterAllGather };

/// "auto", "local", "oneshot", "rsag".
const char* QuantAlgoName(QuantAlgo algo);

/// COLLOPS_ALGO_QUANTALLREDUCE: "oneshot", "rsag", or "auto" / unset (kAuto); the lccl engine
/// reads the same knob for its own algorithms of those names. Throws Error(ERROR_INVALID_PARAM)
/// naming the variable for anything else.
QuantAlgo QuantAlgoFromEnv();

/// ATB's shape rules of the quantised inputs {x, scale, offset}, with ATB's codes: offset not [1],
/// n = x.shape[-1] not a multiple of 16, a per-tensor scale not [1], a per-channel scale not [n]
/// or [1, n], or n > 4194304 per channel -> ERROR_INVALID_TENSOR_DIM; scale of more than 2 dims ->
/// ERROR_INVALID_TENSOR_DIM_NUM. `where` starts the message.
void CheckQuantInputs(const std::string& where, int quantType, const std::vector<TensorDesc>& in);

/// One call's algorithm, where the engine has no path of its own, and the slices rank r
/// dequantises (rsag).
struct QuantAllReducePlan {
  QuantAlgo algo = QuantAlgo::kLocal;
  int64_t count = 0;                 ///< elements of x
  std::vector<int64_t> sliceCounts;  ///< rsag: elements of rank j's slice
  std::vector<int64_t> sliceStarts;  ///< rsag: where rank j's slice starts in x and y
  std::vector<int64_t> fullCounts;   ///< oneshot: count for every rank
  std::vector<int64_t> fullDispls;   ///< oneshot: j * count
  uint64_t workspaceBytes = 0;       ///< the int8 blocks received
};

/// The plan for `count` elements on `rankSize` ranks; `forced` kAuto chooses by R and size
/// (R = 2, or N up to kQuantOneShotMaxElements: oneshot; else rsag).
QuantAllReducePlan PlanQuantAllReduce(QuantAlgo forced, int rankSize, int rank, int64_t count);

/// Up to this many elements one exchange (oneshot) beats two (rsag) at every R.
constexpr int64_t kQuantOneShotMaxElements = 16 << 10;

/// A 64-bit digest of the bytes of scale and offset, for the cross-rank agreement check.
uint64_t QuantValuesDigest(const Tensor& scale, const Tensor& offset);

/// The QuantScale of scale and offset as CheckQuantInputs accepted them, for x of `x`'s shape.
QuantScale QuantScaleOf(int quantType, const Tensor& x, const Tensor& scale, const Tensor& offset);

/// Runs `plan` from the Communicator primitives: x as CheckQuantInputs accepted it, y of
/// outDataType; `workspace` holds plan.workspaceBytes.
void RunQuantAllReduce(const QuantAllReducePlan& plan, const QuantScale& quant, const Tensor& x,
                       const Tensor& y, uint8_t* workspace, Communicator& comm);

}  // namespace collops
