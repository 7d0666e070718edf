// BarrierOperation: returns on each rank only once every rank of the communicator has entered.
//
// Inputs and outputs: none. The cross-rank signature carries only the op name, so a rank that
// runs a different collective at the same point fails with ERROR_RANK_MISMATCH instead of
// being let through; then the communicator's Barrier (lccl: one group-wide sync) does the wait.
#pragma once

#include "collops/operation_base.h"
#include "ops/barrier/barrier_param.h"

namespace collops {

class BarrierOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "BarrierOperation";
  static void ValidateParam(const BarrierParam& param);
  explicit BarrierOperation(const BarrierParam& param);

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
