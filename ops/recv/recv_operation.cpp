#include "ops/recv/recv_operation.h"

#include "collops/registry.h"

namespace collops {

void RecvOperation::ValidateParam(const RecvParam& param) {
  ValidateCommParam(kName, param);
  ValidatePeerRank(kName, param, "srcRank", param.srcRank, "receive from itself");
}

RecvOperation::RecvOperation(const RecvParam& param)
    : OperationBase(kName, param), srcRank_(param.srcRank) {}

std::vector<TensorSpec> RecvOperation::InputSpecs() const {
  return {{"template", DtypeSet::kMovable}};
}

std::vector<TensorSpec> RecvOperation::OutputSpecs() const { return {{"y", DtypeSet::kMovable}}; }

void RecvOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                   std::vector<TensorDesc>& out) const {
  out = {in[0]};
}

CallSignature RecvOperation::SignatureImpl(const VariantPack&) const {
  // Empty opName: the communicator checks the Send/Recv pair itself.
  return CallSignature{};
}

void RecvOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t, Communicator& comm) {
  const Tensor& y = pack.outTensors[0];
  comm.Recv(y.deviceData, NumElements(y.desc.shape), y.desc.dtype, srcRank_);
}

std::vector<PointToPoint> RecvOperation::RefusalsImpl(Status status) const {
  return {PointToPoint::Refusal(PointToPoint::Kind::kRecv, srcRank_, status)};
}

COLLOPS_REGISTER_OPERATION(RecvOperation, RecvParam);

}  // namespace collops
