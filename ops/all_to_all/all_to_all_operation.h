// AllToAllOperation: even all-to-all, every rank sends the same amount to every rank.
//
// Plain (transpose = false): x (any movable dtype, any shape, x.numel() divisible by R) is cut in
// R equal chunks of x.flat; rank r's y (x's shape) is the concatenation over j of chunk r of x_j.
// Transpose: x [H, W] with W divisible by R; the block for rank j is the column block
// x[:, j*W/R : (j+1)*W/R]. Those blocks are not contiguous in x, so Execute first packs them
// row-major into the workspace (block j at j*H*W/R; the workspace is x's size); rank r's
// y [H*R, W/R] stacks the blocks received from ranks 0..R-1 along dim 0.
// Either way the exchange is one Communicator::AllToAllV with equal counts (AllToAllVPlan), after
// the ranks have agreed on the mode, the dtype and x.numel().
#pragma once

#include "collops/operation_base.h"
#include "ops/all_to_all/all_to_all_param.h"

namespace collops {

class AllToAllOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "AllToAllOperation";
  static void ValidateParam(const AllToAllParam& param);
  explicit AllToAllOperation(const AllToAllParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  uint64_t WorkspaceSizeImpl(const VariantPack& pack) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  bool transpose_;
};

}  // namespace collops
