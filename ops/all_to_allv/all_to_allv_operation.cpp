#include "ops/all_to_allv/all_to_allv_operation.h"

#include "collops/registry.h"

namespace collops {
namespace {

AllToAllVPlan PlanOf(const AllToAllVParam& param) {
  return {param.sendCounts, param.sdispls, param.recvCounts, param.rdispls};
}

}  // namespace

void AllToAllVOperation::ValidateParam(const AllToAllVParam& param) {
  ValidateCommParam(kName, param);
  PlanOf(param).Validate(Concat(kName, " (rank ", param.rank, ")"), param.rankSize);
}

AllToAllVOperation::AllToAllVOperation(const AllToAllVParam& param)
    : OperationBase(kName, param), plan_(PlanOf(param)) {}

std::vector<TensorSpec> AllToAllVOperation::InputSpecs() const {
  return {{"x", DtypeSet::kMovable}};
}

std::vector<TensorSpec> AllToAllVOperation::OutputSpecs() const {
  return {{"y", DtypeSet::kMovable}};
}

void AllToAllVOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                        std::vector<TensorDesc>& out) const {
  TensorDesc y = in[0];
  y.shape = MakeDims({1, plan_.RecvTotal()});
  out = {y};
}

void AllToAllVOperation::PrepareImpl(const VariantPack& pack) {
  CheckRanges(plan_.sendCounts, "sendCounts", plan_.sdispls, "sdispls",
              NumElements(pack.inTensors[0].desc.shape), "x.numel()");
}

CallSignature AllToAllVOperation::SignatureImpl(const VariantPack& pack) const {
  return plan_.Signature(kName, pack.inTensors[0].desc.dtype);
}

void AllToAllVOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                     Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  plan_.Run(comm, x.deviceData, pack.outTensors[0].deviceData, x.desc.dtype);
}

COLLOPS_REGISTER_OPERATION(AllToAllVOperation, AllToAllVParam);

}  // namespace collops
