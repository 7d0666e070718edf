#include "ops/all_reduce/all_reduce_operation.h"

#include "collops/registry.h"

namespace collops {

void AllReduceOperation::ValidateParam(const AllReduceParam& param) {
  ValidateCommParam(kName, param);
  ReduceOp op;
  if (!ParseReduceOp(param.allReduceType, &op)) {
    Fail(ERROR_INVALID_PARAM, kName, ": allReduceType = \"", param.allReduceType,
         "\" is not one of \"sum\", \"prod\", \"max\", \"min\"");
  }
}

AllReduceOperation::AllReduceOperation(const AllReduceParam& param)
    : OperationBase(kName, param), reduceOp_(ReduceOp::kSum) {
  ParseReduceOp(param.allReduceType, &reduceOp_);
}

std::vector<TensorSpec> AllReduceOperation::InputSpecs() const {
  return {{"x", DtypeSet::kReducible}};
}

std::vector<TensorSpec> AllReduceOperation::OutputSpecs() const {
  return {{"y", DtypeSet::kReducible}};
}

void AllReduceOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                        std::vector<TensorDesc>& out) const {
  out = {in[0]};
}

InPlaceForm AllReduceOperation::InPlaceFormImpl(const VariantPack& pack) const {
  return {pack.outTensors[0].deviceData, "x == y"};
}

CallSignature AllReduceOperation::SignatureImpl(const VariantPack& pack) const {
  CallSignature s;
  s.opName = ReducingOpName(kName, reduceOp_);
  s.dtype = pack.inTensors[0].desc.dtype;
  s.count = NumElements(pack.inTensors[0].desc.shape);
  return s;
}

void AllReduceOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                     Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  comm.AllReduce(x.deviceData, pack.outTensors[0].deviceData, NumElements(x.desc.shape),
                 x.desc.dtype, reduceOp_);
}

COLLOPS_REGISTER_OPERATION(AllReduceOperation, AllReduceParam);

}  // namespace collops
