#include "ops/all_gather/all_gather_operation.h"

#include "collops/registry.h"

namespace collops {

void AllGatherOperation::ValidateParam(const AllGatherParam& param) {
  ValidateCommParam(kName, param);
}

AllGatherOperation::AllGatherOperation(const AllGatherParam& param) : OperationBase(kName, param) {}

std::vector<TensorSpec> AllGatherOperation::InputSpecs() const {
  return {{"x", DtypeSet::kMovable}};
}

std::vector<TensorSpec> AllGatherOperation::OutputSpecs() const {
  return {{"y", DtypeSet::kMovable}};
}

void AllGatherOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                        std::vector<TensorDesc>& out) const {
  const TensorDesc& x = in[0];
  if (x.shape.dimNum >= kMaxDimNum) {
    Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": x has ", x.shape.dimNum, " dims ",
         DimsToString(x.shape), "; y = [rankSize, *x.shape] would need ", x.shape.dimNum + 1,
         " dims, and at most ", kMaxDimNum, " are supported");
  }
  TensorDesc y = x;
  y.shape.dimNum = x.shape.dimNum + 1;
  y.shape.dims[0] = commParam().rankSize;
  for (uint64_t k = 0; k < x.shape.dimNum; ++k) y.shape.dims[k + 1] = x.shape.dims[k];
  out = {y};
}

InPlaceForm AllGatherOperation::InPlaceFormImpl(const VariantPack& pack) const {
  // NCCL's in-place form: x is this rank's own block of y, which no peer writes.
  const uint64_t own = pack.inTensors[0].dataSize * static_cast<uint64_t>(commParam().rank);
  return {static_cast<const uint8_t*>(pack.outTensors[0].deviceData) + own, "x == y[rank]"};
}

CallSignature AllGatherOperation::SignatureImpl(const VariantPack& pack) const {
  CallSignature s;
  s.opName = kName;
  s.dtype = pack.inTensors[0].desc.dtype;
  s.count = NumElements(pack.inTensors[0].desc.shape);
  return s;
}

void AllGatherOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                     Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  const int64_t n = NumElements(x.desc.shape);
  const int rankSize = commParam().rankSize;
  // Equal counts: rank i's block starts at i·n. The signature check guarantees every rank has n.
  std::vector<int64_t> recvCounts(rankSize, n);
  std::vector<int64_t> rdispls(rankSize);
  for (int i = 0; i < rankSize; ++i) rdispls[i] = i * n;
  comm.AllGatherV(x.deviceData, static_cast<size_t>(n), pack.outTensors[0].deviceData,
                  recvCounts.data(), rdispls.data(), x.desc.dtype);
}

COLLOPS_REGISTER_OPERATION(AllGatherOperation, AllGatherParam);

}  // namespace collops
