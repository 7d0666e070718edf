// AllToAllVV2Operation: uneven all-to-all with the counts in host tensors (ATB's AllToAllVV2, the
// MoE token dispatch: counts change every step without rebuilding the operation).
//
// Inputs: x (any movable dtype, any shape; only x.flat matters), sendCounts [R], sdispls [R],
// recvCounts [R], rdispls [R] (int64; hostData when set, else deviceData), tensorForInferShape
// (any dtype; only its element count is used, as the output size must be known before the counts
// are read). Output: y [1, tensorForInferShape.numel()], x's dtype, with
// y.flat[rdispls[j] : +recvCounts[j]] = x_j.flat[sdispls_j[rank] : +sendCounts_j[rank]].
// Setup and Execute both read the counts (they may be rebound in between) and apply
// AllToAllVOperation's rules (AllToAllVPlan) plus sum(recvCounts) == tensorForInferShape.numel();
// Execute then verifies the counts across ranks and lets the communicator move the blocks.
#pragma once

#include "collops/operation_base.h"
#include "ops/all_to_allv/all_to_allv_plan.h"
#include "ops/all_to_allvv2/all_to_allvv2_param.h"

namespace collops {

class AllToAllVV2Operation final : public OperationBase {
 public:
  static constexpr const char* kName = "AllToAllVV2Operation";
  static void ValidateParam(const AllToAllVV2Param& param);
  explicit AllToAllVV2Operation(const AllToAllVV2Param& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  void PrepareImpl(const VariantPack& pack) override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  AllToAllVPlan plan_;  ///< the counts read by the last PrepareImpl
};

}  // namespace collops
