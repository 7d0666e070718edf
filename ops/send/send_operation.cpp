#include "ops/send/send_operation.h"

#include "collops/registry.h"

namespace collops {

void SendOperation::ValidateParam(const SendParam& param) {
  ValidateCommParam(kName, param);
  ValidatePeerRank(kName, param, "destRank", param.destRank, "send to itself");
}

SendOperation::SendOperation(const SendParam& param)
    : OperationBase(kName, param), destRank_(param.destRank) {}

std::vector<TensorSpec> SendOperation::InputSpecs() const { return {{"x", DtypeSet::kMovable}}; }

std::vector<TensorSpec> SendOperation::OutputSpecs() const { return {}; }

void SendOperation::InferShapeImpl(const std::vector<TensorDesc>&,
                                   std::vector<TensorDesc>& out) const {
  out.clear();
}

CallSignature SendOperation::SignatureImpl(const VariantPack&) const {
  // Empty opName: the other ranks are not part of this call, so no all-rank exchange.
  return CallSignature{};
}

void SendOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t, Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  comm.Send(x.deviceData, NumElements(x.desc.shape), x.desc.dtype, destRank_);
}

std::vector<PointToPoint> SendOperation::RefusalsImpl(Status status) const {
  return {PointToPoint::Refusal(PointToPoint::Kind::kSend, destRank_, status)};
}

COLLOPS_REGISTER_OPERATION(SendOperation, SendParam);

}  // namespace collops
