// AllGatherOperation: y[i] = x of rank i, on every rank.
//
// Inputs: x (any movable dtype, 1 to 7 dims). Output: y of shape [rankSize, *x.shape] and x's
// dtype; the leading dim is the source rank, so x may have at most 7 dims (ATB rejects an 8-dim
// x with ERROR_INVALID_TENSOR_DIM because y would need 9).
// Every rank contributes the same element count n (checked across ranks before any data moves),
// so the op is the communicator's AllGatherV with equal counts n and displacements i·n.
#pragma once

#include "collops/operation_base.h"
#include "ops/all_gather/all_gather_param.h"

namespace collops {

class AllGatherOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "AllGatherOperation";
  static void ValidateParam(const AllGatherParam& param);
  explicit AllGatherOperation(const AllGatherParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  InPlaceForm InPlaceFormImpl(const VariantPack& pack) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;
};

}  // namespace collops
