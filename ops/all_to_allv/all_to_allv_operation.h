// AllToAllVOperation: uneven all-to-all with the counts fixed in the params.
//
// Inputs: x (any movable dtype, any shape; only x.flat matters). Output: y [1, sum(recvCounts)],
// x's dtype. Rank r's y.flat[rdispls[j] : +recvCounts[j]] receives
// x_j.flat[sdispls_j[r] : +sendCounts_j[r]] from every rank j.
// Create checks the count vectors alone (AllToAllVPlan::Validate: R entries, >= 0, receive
// ranges tiling y); Setup checks the send ranges against x.numel(); Execute first verifies that
// every rank's sendCounts[j] equals rank j's recvCounts[r] (ERROR_RANK_MISMATCH on every rank
// otherwise), then the communicator copies the rank's own block and the peers' blocks.
#pragma once

#include "collops/operation_base.h"
#include "ops/all_to_allv/all_to_allv_param.h"
#include "ops/all_to_allv/all_to_allv_plan.h"

namespace collops {

class AllToAllVOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "AllToAllVOperation";
  static void ValidateParam(const AllToAllVParam& param);
  explicit AllToAllVOperation(const AllToAllVParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  void PrepareImpl(const VariantPack& pack) override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  AllToAllVPlan plan_;
};

}  // namespace collops
