// BroadcastOperation: x = x of rankRoot, on every rank, in place.
//
// Inputs: x (any movable dtype, any shape). Outputs: none; x is overwritten on every rank but
// the root (ATB's BroadcastOperation has no output tensor either).
// Every rank must agree on the root, the dtype and the element count; the cross-rank signature
// check catches a disagreement before any byte moves, then the communicator's Broadcast copies
// the root's buffer into every other rank's x.
#pragma once

#include "collops/operation_base.h"
#include "ops/broadcast/broadcast_param.h"

namespace collops {

class BroadcastOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "BroadcastOperation";
  static void ValidateParam(const BroadcastParam& param);
  explicit BroadcastOperation(const BroadcastParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;
};

}  // namespace collops
