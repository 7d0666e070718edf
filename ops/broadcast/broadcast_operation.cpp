#include "ops/broadcast/broadcast_operation.h"

#include "collops/registry.h"

namespace collops {

void BroadcastOperation::ValidateParam(const BroadcastParam& param) {
  // rankRoot's range is a common rule (0 <= rankRoot < rankSize), checked here.
  ValidateCommParam(kName, param);
}

BroadcastOperation::BroadcastOperation(const BroadcastParam& param) : OperationBase(kName, param) {}

std::vector<TensorSpec> BroadcastOperation::InputSpecs() const {
  return {{"x", DtypeSet::kMovable}};
}

std::vector<TensorSpec> BroadcastOperation::OutputSpecs() const { return {}; }

void BroadcastOperation::InferShapeImpl(const std::vector<TensorDesc>&,
                                        std::vector<TensorDesc>& out) const {
  out.clear();
}

CallSignature BroadcastOperation::SignatureImpl(const VariantPack& pack) const {
  CallSignature s;
  s.opName = kName;
  s.dtype = pack.inTensors[0].desc.dtype;
  s.root = commParam().rankRoot;
  s.count = NumElements(pack.inTensors[0].desc.shape);
  return s;
}

void BroadcastOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                     Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  comm.Broadcast(x.deviceData, static_cast<size_t>(NumElements(x.desc.shape)), x.desc.dtype,
                 commParam().rankRoot);
}

COLLOPS_REGISTER_OPERATION(BroadcastOperation, BroadcastParam);

}  // namespace collops
