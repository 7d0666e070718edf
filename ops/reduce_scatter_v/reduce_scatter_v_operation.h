// ReduceScatterVOperation: uneven reduce-scatter over flat element ranges.
//
// Inputs: x [d0, d1] (exactly 2 dims, reducible dtype), sendCounts [R], sdispls [R], recvCount [1]
// (int64 host counts), y_shape [m] (any dtype, exactly 1 dim; only its length is used: it is
// ATB's carrier for the output's dim 0). Output: out [m, d1], x's dtype.
//   out.flat[0 : recvCount] = reduce_j x_j.flat[sdispls_j[rank] : +sendCounts_j[rank]]
//   out.flat[recvCount :]   = 0
// Rules: x not 2-D or y_shape not 1-D → ERROR_INVALID_TENSOR_DIM_NUM (the rule is about the
// number of dims, as the base's 1..8-dims check). Every count and displacement >= 0, count
// vectors of rankSize entries, sendCounts[i] + sdispls[i] <= x.numel() (overflow-safe),
// 0 <= recvCount <= out.numel(), and count params, when given, equal to their tensors →
// otherwise ERROR_INVALID_PARAM. Across ranks every rank j must send sendCounts_j[rank] ==
// recvCount of this rank, else ERROR_RANK_MISMATCH on every rank before any data moves.
// In place (out = x.flat[sdispls[rank]:], out.numel() == recvCount) is refused when a block sent
// to another rank overlaps that piece: the peer could read it after this rank wrote its result.
// Execute zeroes only the tail past recvCount, then the communicator reduces in rank order
// (float16/bfloat16 accumulate in float32), so equal ranges give bit-identical results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collops/operation_base.h"
#include "collops/reduce.h"
#include "ops/reduce_scatter_v/reduce_scatter_v_param.h"

namespace collops {

class ReduceScatterVOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "ReduceScatterVOperation";
  /// Checks the communication params, reduceType and any count params given; no communication.
  static void ValidateParam(const ReduceScatterVParam& param);
  explicit ReduceScatterVOperation(const ReduceScatterVParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  void PrepareImpl(const VariantPack& pack) override;
  InPlaceForm InPlaceFormImpl(const VariantPack& pack) const override;
  /// The counts of the last PrepareImpl make the in-place form unsafe when a block sent to another
  /// rank overlaps this rank's piece x.flat[sdispls[rank] : +recvCount].
  std::string InPlaceRefusalImpl(const VariantPack& pack) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  /// Throws ERROR_INVALID_PARAM when a given count param differs from its tensor's values.
  void CheckParamMatches(const char* name, const std::vector<int64_t>& param,
                         const std::vector<int64_t>& tensor) const;

  ReduceOp reduceOp_;
  /// "<op>/<reduction>", the name its calls agree on (signature.h), built once: not per call.
  std::string signatureName_;
  // The count params as given (empty / -1 = not given), checked against the tensors.
  std::vector<int64_t> paramSendCounts_;
  std::vector<int64_t> paramSdispls_;
  int64_t paramRecvCount_;
  // The host counts read by the last PrepareImpl, used by SignatureImpl and ExecuteImpl.
  std::vector<int64_t> sendCounts_;
  std::vector<int64_t> sdispls_;
  int64_t recvCount_ = 0;
};

}  // namespace collops
