#include "ops/reduce_scatter/reduce_scatter_operation.h"

#include "collops/registry.h"

namespace collops {

void ReduceScatterOperation::ValidateParam(const ReduceScatterParam& param) {
  ValidateCommParam(kName, param);
  ReduceOpParam(kName, "reduceType", param.reduceType);
}

ReduceScatterOperation::ReduceScatterOperation(const ReduceScatterParam& param)
    : OperationBase(kName, param),
      reduceOp_(ReduceOpParam(kName, "reduceType", param.reduceType)),
      signatureName_(ReducingOpName(kName, reduceOp_)) {}

std::vector<TensorSpec> ReduceScatterOperation::InputSpecs() const {
  return {{"x", DtypeSet::kReducible}};
}

std::vector<TensorSpec> ReduceScatterOperation::OutputSpecs() const {
  return {{"y", DtypeSet::kReducible}};
}

void ReduceScatterOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                            std::vector<TensorDesc>& out) const {
  const TensorDesc& x = in[0];
  const int64_t rankSize = commParam().rankSize;
  if (x.shape.dims[0] % rankSize != 0) {
    Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": x has shape ", DimsToString(x.shape),
         " whose dim0 = ", x.shape.dims[0], " is not divisible by rankSize = ", rankSize);
  }
  TensorDesc y = x;
  y.shape.dims[0] = x.shape.dims[0] / rankSize;
  out = {y};
}

InPlaceForm ReduceScatterOperation::InPlaceFormImpl(const VariantPack& pack) const {
  // NCCL's in-place form: y is this rank's own slice of x, which only this rank reads.
  const uint64_t own = pack.outTensors[0].dataSize * static_cast<uint64_t>(commParam().rank);
  const auto y = reinterpret_cast<uintptr_t>(pack.outTensors[0].deviceData);
  return {reinterpret_cast<const void*>(y - own), "y == x[rank * n : (rank + 1) * n]"};
}

CallSignature ReduceScatterOperation::SignatureImpl(const VariantPack& pack) const {
  CallSignature s;
  s.opName = signatureName_;
  s.dtype = pack.inTensors[0].desc.dtype;
  s.count = NumElements(pack.inTensors[0].desc.shape);
  return s;
}

void ReduceScatterOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                         Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  const Tensor& y = pack.outTensors[0];
  const int rankSize = commParam().rankSize;
  // y holds exactly one rank's share, so its element count is the per-rank chunk.
  const int64_t chunk = NumElements(y.desc.shape);
  std::vector<int64_t> sendCounts(rankSize, chunk);
  std::vector<int64_t> sdispls(rankSize);
  for (int j = 0; j < rankSize; ++j) sdispls[j] = j * chunk;
  comm.ReduceScatterV(x.deviceData, sendCounts.data(), sdispls.data(), y.deviceData,
                      static_cast<size_t>(chunk), x.desc.dtype, reduceOp_);
}

COLLOPS_REGISTER_OPERATION(ReduceScatterOperation, ReduceScatterParam);

}  // namespace collops
