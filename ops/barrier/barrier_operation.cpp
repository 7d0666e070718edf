#include "ops/barrier/barrier_operation.h"

#include "collops/registry.h"

namespace collops {

void BarrierOperation::ValidateParam(const BarrierParam& param) { ValidateCommParam(kName, param); }

BarrierOperation::BarrierOperation(const BarrierParam& param) : OperationBase(kName, param) {}

std::vector<TensorSpec> BarrierOperation::InputSpecs() const { return {}; }

std::vector<TensorSpec> BarrierOperation::OutputSpecs() const { return {}; }

void BarrierOperation::InferShapeImpl(const std::vector<TensorDesc>&,
                                      std::vector<TensorDesc>& out) const {
  out.clear();
}

CallSignature BarrierOperation::SignatureImpl(const VariantPack&) const {
  CallSignature s;
  s.opName = kName;
  return s;
}

void BarrierOperation::ExecuteImpl(const VariantPack&, uint8_t*, uint64_t, Communicator& comm) {
  comm.Barrier();
}

COLLOPS_REGISTER_OPERATION(BarrierOperation, BarrierParam);

}  // namespace collops
