#include "ops/all_to_all/all_to_all_operation.h"

#include <cstring>

#include "collops/registry.h"
#include "ops/all_to_allv/all_to_allv_plan.h"

namespace collops {

void AllToAllOperation::ValidateParam(const AllToAllParam& param) {
  ValidateCommParam(kName, param);
}

AllToAllOperation::AllToAllOperation(const AllToAllParam& param)
    : OperationBase(kName, param), transpose_(param.transpose) {}

std::vector<TensorSpec> AllToAllOperation::InputSpecs() const {
  return {{"x", DtypeSet::kMovable}};
}

std::vector<TensorSpec> AllToAllOperation::OutputSpecs() const {
  return {{"y", DtypeSet::kMovable}};
}

void AllToAllOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                       std::vector<TensorDesc>& out) const {
  const TensorDesc& x = in[0];
  const int rankSize = commParam().rankSize;
  TensorDesc y = x;
  if (!transpose_) {
    const int64_t n = NumElements(x.shape);
    if (n % rankSize != 0) {
      Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": x has shape ", DimsToString(x.shape), " (", n,
           " elements), which does not split into rankSize = ", rankSize, " equal chunks");
    }
  } else {
    if (x.shape.dimNum != 2) {
      Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": transpose needs a 2-D x [H, W], got shape ",
           DimsToString(x.shape));
    }
    const int64_t h = x.shape.dims[0];
    const int64_t w = x.shape.dims[1];
    if (w % rankSize != 0) {
      Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": transpose needs x's width W = ", w, " (x shape ",
           DimsToString(x.shape), ") divisible by rankSize = ", rankSize);
    }
    int64_t rows = 0;
    if (__builtin_mul_overflow(h, static_cast<int64_t>(rankSize), &rows)) {
      Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": transpose makes y [H * rankSize, W / rankSize]",
           " from x ", DimsToString(x.shape), ", and H * rankSize overflows int64");
    }
    y.shape = MakeDims({rows, w / rankSize});
  }
  out = {y};
}

uint64_t AllToAllOperation::WorkspaceSizeImpl(const VariantPack& pack) const {
  return transpose_ ? TensorBytes(pack.inTensors[0].desc) : 0;
}

CallSignature AllToAllOperation::SignatureImpl(const VariantPack& pack) const {
  CallSignature s;
  // The mode is part of the name: a plain rank and a transposing rank would exchange
  // differently cut blocks of the same size.
  s.opName = transpose_ ? std::string(kName) + "/transpose" : kName;
  s.dtype = pack.inTensors[0].desc.dtype;
  s.count = NumElements(pack.inTensors[0].desc.shape);
  return s;
}

void AllToAllOperation::ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t,
                                    Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  const int rankSize = commParam().rankSize;
  const int64_t chunk = NumElements(x.desc.shape) / rankSize;
  const AllToAllVPlan plan = AllToAllVPlan::Uniform(rankSize, chunk);
  // Plain mode sends straight from x; so does an empty transpose, which reads nothing (and whose
  // workspace may be null).
  const void* send = x.deviceData;
  if (transpose_ && chunk > 0) {
    const int64_t h = x.desc.shape.dims[0];
    const int64_t blockWidth = x.desc.shape.dims[1] / rankSize;
    const size_t rowBytes = blockWidth * DataTypeSize(x.desc.dtype);
    for (int j = 0; j < rankSize; ++j) {
      for (int64_t row = 0; row < h; ++row) {
        std::memcpy(ElementPtr(workspace, j * chunk + row * blockWidth, x.desc.dtype),
                    ElementPtr(x.deviceData, (row * rankSize + j) * blockWidth, x.desc.dtype),
                    rowBytes);
      }
    }
    send = workspace;
  }
  plan.Run(comm, send, pack.outTensors[0].deviceData, x.desc.dtype);
}

COLLOPS_REGISTER_OPERATION(AllToAllOperation, AllToAllParam);

}  // namespace collops
