#include "ops/send_recv/send_recv_operation.h"

#include <cstdint>

#include "collops/registry.h"

namespace collops {

void SendRecvOperation::ValidateParam(const SendRecvParam& param) {
  ValidateCommParam(kName, param);
  ValidatePeerRank(kName, param, "destRank", param.destRank, "send to itself");
  ValidatePeerRank(kName, param, "srcRank", param.srcRank, "receive from itself");
}

SendRecvOperation::SendRecvOperation(const SendRecvParam& param)
    : OperationBase(kName, param), destRank_(param.destRank), srcRank_(param.srcRank) {}

std::vector<TensorSpec> SendRecvOperation::InputSpecs() const {
  return {{"x", DtypeSet::kMovable}};
}

std::vector<TensorSpec> SendRecvOperation::OutputSpecs() const {
  return {{"y", DtypeSet::kMovable}};
}

void SendRecvOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                       std::vector<TensorDesc>& out) const {
  out = {in[0]};
}

CallSignature SendRecvOperation::SignatureImpl(const VariantPack&) const {
  // Empty opName: only the channels' ranks take part, and the communicator checks each pair.
  return CallSignature{};
}

void SendRecvOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                    Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  const Tensor& y = pack.outTensors[0];
  const size_t count = NumElements(x.desc.shape);
  comm.Exchange({PointToPoint::Send(x.deviceData, count, x.desc.dtype, destRank_),
                 PointToPoint::Recv(y.deviceData, count, y.desc.dtype, srcRank_)});
}

std::vector<PointToPoint> SendRecvOperation::RefusalsImpl(Status status) const {
  return {PointToPoint::Refusal(PointToPoint::Kind::kSend, destRank_, status),
          PointToPoint::Refusal(PointToPoint::Kind::kRecv, srcRank_, status)};
}

COLLOPS_REGISTER_OPERATION(SendRecvOperation, SendRecvParam);

}  // namespace collops
