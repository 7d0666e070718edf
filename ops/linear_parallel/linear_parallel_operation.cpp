#include "ops/linear_parallel/linear_parallel_operation.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "collops/environment.h"
#include "collops/registry.h"
#include "ops/linear_parallel/linear_parallel_quant.h"
#include "ops/linear_parallel/two_dim_tp.h"

namespace collops {
namespace {

const char* ParallelTypeName(int type) {
  switch (type) {
    case LINEAR_ALL_REDUCE:
      return "LINEAR_ALL_REDUCE";
    case LINEAR_REDUCE_SCATTER:
      return "LINEAR_REDUCE_SCATTER";
    case ALL_GATHER_LINEAR:
      return "ALL_GATHER_LINEAR";
    case PURE_LINEAR:
      return "PURE_LINEAR";
    case AG_LINEAR_RS:
      return "AG_LINEAR_RS";
    case ALLTOALLVC_AG_GMM:
      return "ALLTOALLVC_AG_GMM";
    case GMM_RS_ALLTOALLVC:
      return "GMM_RS_ALLTOALLVC";
  }
  return "?";
}

bool IsFloat(DataType dtype) {
  return dtype == ACL_FLOAT16 || dtype == ACL_BF16 || dtype == ACL_FLOAT;
}

/// ATB's backends "lcoc" (its fused compute-and-communicate kernels) and "mc2" name ways of
/// running the same op on an NPU; on CPU they run on lccl and on the default (hccl: auto).
std::string EngineBackend(const std::string& backend) {
  if (backend == "lcoc") return "lccl";
  if (backend == "mc2") return "hccl";
  return backend;
}

CommParam EngineCommParam(const LinearParallelParam& param) {
  CommParam comm = param;
  comm.backend = EngineBackend(param.backend);
  return comm;
}

Dims WithLast(Dims dims, int64_t last) {
  dims.dims[dims.dimNum - 1] = last;
  return dims;
}

/// The algorithm COLLOPS_ALGO_LINEARPARALLEL asks for: "serial", "overlap" or "auto".
std::string RequestedAlgorithm() { return KnobWord("COLLOPS_ALGO_LINEARPARALLEL", "auto"); }

constexpr uint64_t AlignUp(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

/// Chunks of an overlapped call (fewer when a block has fewer rows).
constexpr int64_t kOverlapChunks = 4;

}  // namespace

void LinearParallelOperation::ValidateParam(const LinearParallelParam& param) {
  ValidateCommParam(kName, EngineCommParam(param));
  if (param.type < LINEAR_ALL_REDUCE || param.type > GMM_RS_ALLTOALLVC) {
    Fail(ERROR_INVALID_PARAM, kName, ": type = ", param.type,
         " is not one of 0 (LINEAR_ALL_REDUCE), 1 (LINEAR_REDUCE_SCATTER), 2 (ALL_GATHER_LINEAR), "
         "3 (PURE_LINEAR), 4 (AG_LINEAR_RS)");
  }
  if (param.type > AG_LINEAR_RS) {
    Fail(ERROR_INVALID_PARAM, kName, ": type = ", param.type, " (", ParallelTypeName(param.type),
         ") is not supported: ATB's MoE inputs are not defined well enough to match; supported: "
         "0 (LINEAR_ALL_REDUCE), 1 (LINEAR_REDUCE_SCATTER), 2 (ALL_GATHER_LINEAR), "
         "3 (PURE_LINEAR), 4 (AG_LINEAR_RS)");
  }
  if (param.type == AG_LINEAR_RS) ValidateTwoDimTPInfo(kName, param.twoDimTPInfo, param.rankSize);
  if (param.keepIntermediate && param.type != ALL_GATHER_LINEAR) {
    Fail(ERROR_INVALID_PARAM, kName,
         ": keepIntermediate = true needs type = 2 (ALL_GATHER_LINEAR),",
         " got type = ", param.type, " (", ParallelTypeName(param.type), ")");
  }
  if (param.outDataType != ACL_DT_UNDEFINED && param.outDataType != ACL_FLOAT16 &&
      param.outDataType != ACL_BF16 && param.outDataType != ACL_FLOAT) {
    Fail(ERROR_INVALID_PARAM, kName, ": outDataType = ", param.outDataType,
         " is not one of -1 (x's dtype), 1 (float16), 27 (bfloat16), 0 (float32)");
  }
  ValidateLinearQuantParam(kName, param);
  if (param.backend == "lcoc" && (param.rankSize & (param.rankSize - 1)) != 0) {
    Fail(ERROR_INVALID_PARAM, kName, ": backend \"lcoc\" needs rankSize a power of 2, got ",
         param.rankSize);
  }
  if (param.backend == "mc2") {
    if (param.type != LINEAR_REDUCE_SCATTER) {
      Fail(ERROR_INVALID_PARAM, kName, ": backend \"mc2\" runs type = 1 (LINEAR_REDUCE_SCATTER) ",
           "only, got type = ", param.type);
    }
    if (param.commMode != COMM_MULTI_THREAD) {
      Fail(ERROR_INVALID_PARAM, kName, ": backend \"mc2\" needs commMode = 1 (multi-thread), got ",
           static_cast<int>(param.commMode));
    }
    if (param.hasResidual) {
      Fail(ERROR_INVALID_PARAM, kName, ": backend \"mc2\" takes no residual (hasResidual = true)");
    }
  }
}

LinearParallelOperation::LinearParallelOperation(const LinearParallelParam& param)
    : OperationBase(kName, EngineCommParam(param)), param_(param) {}

LinearParallelOperation::~LinearParallelOperation() = default;

std::string LinearParallelOperation::TypeName() const { return ParallelTypeName(param_.type); }

std::vector<TensorSpec> LinearParallelOperation::InputSpecs() const {
  const bool quant = param_.quantType != LINEAR_QUANT_UNQUANT;
  std::vector<TensorSpec> specs = {{"x", DtypeSet::kReducible},
                                   {"weight", quant ? DtypeSet::kInt8 : DtypeSet::kReducible}};
  // The quantised inputs' dtypes depend on the form (W8A8 or W8A16): CheckLinearQuantInputs.
  if (quant) specs.insert(specs.end(), {{"bias", DtypeSet::kAny}, {"scale", DtypeSet::kAny}});
  if (param_.hasResidual) specs.push_back({"residual", DtypeSet::kReducible});
  if (param_.quantType == LINEAR_QUANT_PER_TOKEN)
    specs.push_back({"perTokenScale", DtypeSet::kAny});
  return specs;
}

std::vector<TensorSpec> LinearParallelOperation::OutputSpecs() const {
  std::vector<TensorSpec> specs = {{"y", DtypeSet::kReducible}};
  if (param_.keepIntermediate) specs.push_back({"intermediate", DtypeSet::kReducible});
  return specs;
}

void LinearParallelOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                             std::vector<TensorDesc>& out) const {
  const TensorDesc& x = in[0];
  const TensorDesc& w = in[1];
  const bool quant = param_.quantType != LINEAR_QUANT_UNQUANT;
  const LinearInputIndex at = LinearInputs(param_);
  if (!quant) {
    if (!IsFloat(x.dtype)) {
      Fail(ERROR_INVALID_TENSOR_DTYPE, Where(), ": x has dtype ", DataTypeName(x.dtype),
           "; accepted: float16, bfloat16, float32");
    }
    for (size_t i = 1; i < in.size(); ++i) {
      if (in[i].dtype != x.dtype) {
        Fail(ERROR_INVALID_TENSOR_DTYPE, Where(), ": ", i == 1 ? "weight" : "residual",
             " has dtype ", DataTypeName(in[i].dtype), " but x has ", DataTypeName(x.dtype),
             "; they must match");
      }
    }
  } else {
    QuantFormOf(Where(), param_, x.dtype);  // x's dtype first: the other rules depend on it
  }
  if (x.shape.dimNum != 2 && x.shape.dimNum != 3) {
    Fail(ERROR_INVALID_TENSOR_DIM_NUM, Where(), ": x has shape ", DimsToString(x.shape),
         "; it must be [m, k] or [b, m, k]");
  }
  if (w.shape.dimNum != 2) {
    Fail(ERROR_INVALID_TENSOR_DIM_NUM, Where(), ": weight has shape ", DimsToString(w.shape),
         "; it must be ", param_.transWeight ? "[n, k] (transWeight = true)" : "[k, n]");
  }
  const int64_t k = x.shape.dims[x.shape.dimNum - 1];
  const int64_t wk = param_.transWeight ? w.shape.dims[1] : w.shape.dims[0];
  const int64_t n = param_.transWeight ? w.shape.dims[0] : w.shape.dims[1];
  if (wk != k) {
    Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": weight has shape ", DimsToString(w.shape), " but x ",
         DimsToString(x.shape), " has k = ", k, "; with transWeight = ",
         param_.transWeight ? "true the weight must be [n, k]" : "false the weight must be [k, n]");
  }
  TensorDesc y = x;
  y.shape = WithLast(x.shape, n);
  if (quant) {
    y.dtype = CheckLinearQuantInputs(Where(), param_, in, NumElements(WithLast(x.shape, 1)), k, n);
  } else if (param_.outDataType != ACL_DT_UNDEFINED) {
    y.dtype = static_cast<DataType>(param_.outDataType);
  }
  if (param_.hasResidual) {
    const TensorDesc& r = in[at.residual];
    if (quant && r.dtype != y.dtype) {
      Fail(ERROR_INVALID_TENSOR_DTYPE, Where(), ": inTensors[", at.residual,
           "] (residual) has dtype ", DataTypeName(r.dtype), "; a quantised op adds it to y, so ",
           "it must be y's ", DataTypeName(y.dtype));
    }
    if (r.shape.dimNum != 1) {
      Fail(ERROR_INVALID_TENSOR_DIM_NUM, Where(), ": residual has shape ", DimsToString(r.shape),
           "; it must be [n] = [", n, "]");
    }
    if (r.shape.dims[0] != n) {
      Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": residual has shape ", DimsToString(r.shape),
           " but the weight gives n = ", n);
    }
  }
  const int64_t rankSize = commParam().rankSize;
  if (param_.type == LINEAR_REDUCE_SCATTER) {
    if (x.shape.dims[0] % rankSize != 0) {
      Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": x has shape ", DimsToString(x.shape),
           " whose dim0 = ", x.shape.dims[0], " is not divisible by rankSize = ", rankSize,
           " (LINEAR_REDUCE_SCATTER gives each rank dim0 / rankSize of it)");
    }
    y.shape.dims[0] = x.shape.dims[0] / rankSize;
  }
  if (param_.type == AG_LINEAR_RS) {
    const LinearParallelTwoDimTPInfo& grid = param_.twoDimTPInfo;
    int64_t gathered = 0;
    if (__builtin_mul_overflow(x.shape.dims[0], static_cast<int64_t>(grid.agDim), &gathered)) {
      Fail(ERROR_INVALID_TENSOR_SIZE, Where(), ": x dim0 = ", x.shape.dims[0],
           " times twoDimTPInfo.agDim = ", grid.agDim, " overflows");
    }
    if (gathered % grid.rsDim != 0) {
      Fail(ERROR_INVALID_TENSOR_DIM, Where(), ": x has shape ", DimsToString(x.shape),
           "; its dim0 = ", x.shape.dims[0], " times twoDimTPInfo.agDim = ", grid.agDim,
           " is not divisible by twoDimTPInfo.rsDim = ", grid.rsDim,
           " (AG_LINEAR_RS gives each rank dim0 * agDim / rsDim of the gathered product)");
    }
    y.shape.dims[0] = gathered / grid.rsDim;
  }
  out = {y};
  if (param_.type == ALL_GATHER_LINEAR) {
    int64_t gathered = 0;
    if (__builtin_mul_overflow(x.shape.dims[0], rankSize, &gathered)) {
      Fail(ERROR_INVALID_TENSOR_SIZE, Where(), ": x dim0 = ", x.shape.dims[0],
           " times rankSize = ", rankSize, " overflows");
    }
    out[0].shape.dims[0] = gathered;
    if (param_.keepIntermediate) {
      TensorDesc intermediate = x;
      intermediate.shape.dims[0] = gathered;
      out.push_back(intermediate);
    }
  }
}

void LinearParallelOperation::CheckNoOverlap(const VariantPack& pack) const {
  const std::vector<TensorSpec> ins = InputSpecs(), outs = OutputSpecs();
  for (size_t o = 0; o < pack.outTensors.size(); ++o) {
    const Tensor& y = pack.outTensors[o];
    const auto yBegin = reinterpret_cast<uintptr_t>(y.deviceData);
    for (size_t i = 0; i < pack.inTensors.size(); ++i) {
      const Tensor& t = pack.inTensors[i];
      const auto tBegin = reinterpret_cast<uintptr_t>(t.deviceData);
      if (y.dataSize > 0 && t.dataSize > 0 && yBegin < tBegin + t.dataSize &&
          tBegin < yBegin + y.dataSize) {
        Fail(ERROR_INVALID_PARAM, Where(), ": ", outs[o].name, " overlaps ", ins[i].name,
             "; the product reads the inputs while the output is written, so give ", outs[o].name,
             " its own buffer");
      }
    }
  }
}

int LinearParallelOperation::ChunkCount(int64_t blockRows) const {
  const std::string algo = RequestedAlgorithm();
  // AG_LINEAR_RS runs its two collectives whole (two_dim_tp.h).
  if (param_.type == PURE_LINEAR || param_.type == AG_LINEAR_RS || algo == "serial" ||
      blockRows < 2) {
    return 1;
  }
  if (algo == "overlap") return static_cast<int>(std::min<int64_t>(kOverlapChunks, blockRows));
  // auto: serial. Where the product dominates, a helper thread computing beside the collective
  // only takes CPU time from the product; docs/performance.md has the sizes where overlap lost or
  // did not gain.
  return 1;
}

void LinearParallelOperation::PrepareImpl(const VariantPack& pack) {
  CheckNoOverlap(pack);
  const TensorDesc& x = pack.inTensors[0].desc;
  const TensorDesc& y = pack.outTensors[0].desc;
  Plan p;
  p.dtype = x.dtype;
  p.outDtype = y.dtype;
  p.k = x.shape.dims[x.shape.dimNum - 1];
  p.n = y.shape.dims[y.shape.dimNum - 1];
  p.rows = NumElements(WithLast(x.shape, 1));
  p.form = QuantFormOf(Where(), param_, p.dtype);
  const LinearInputIndex at = LinearInputs(param_);
  p.residualDtype = param_.hasResidual ? pack.inTensors[at.residual].desc.dtype : p.dtype;
  const int64_t rankSize = commParam().rankSize;
  const bool twoDim = param_.type == AG_LINEAR_RS;
  const int64_t agDim = param_.twoDimTPInfo.agDim, rsDim = param_.twoDimTPInfo.rsDim;
  p.blockRows = param_.type == LINEAR_REDUCE_SCATTER ? p.rows / rankSize
                : twoDim                             ? p.rows * agDim / rsDim
                                                     : p.rows;
  p.chunks = ChunkCount(p.blockRows);
  // The ranks sum partial products rounded to y's dtype, as ATB's graph (Linear, then AllReduce
  // in y's dtype) does; float32 ones for a float32 y and the quantised forms, whose products are
  // float32 sums of scaled integers (W8A8) or of a dequantised weight (W8A16).
  const bool reduces =
      param_.type == LINEAR_ALL_REDUCE || param_.type == LINEAR_REDUCE_SCATTER || twoDim;
  p.productDtype = reduces && p.form == LinearQuantForm::kNone ? p.outDtype : ACL_FLOAT;
  // The product rows: all of them for LINEAR_ALL_REDUCE, PURE_LINEAR and LINEAR_REDUCE_SCATTER
  // (before the scatter), R blocks for ALL_GATHER_LINEAR, agDim blocks for AG_LINEAR_RS.
  const int64_t productRows = param_.type == ALL_GATHER_LINEAR ? p.rows * rankSize
                              : twoDim                         ? p.rows * agDim
                                                               : p.rows;
  const uint64_t productBytes =
      static_cast<uint64_t>(productRows) * p.n * DataTypeSize(p.productDtype);
  if (!Matmul::Available())
    Fail(ERROR_BACKEND_UNAVAILABLE, Where(), ": ", Matmul::UnavailableReason());
  if (p.form == LinearQuantForm::kW8A8) {
    matmul_.reset();
    QuantMatmul::Shape shape;
    shape.k = p.k;
    shape.n = p.n;
    shape.transWeight = param_.transWeight;
    shape.perChannel = param_.quantType != LINEAR_QUANT_PER_TENSOR;
    shape.hasBias = NumElements(pack.inTensors[at.bias].desc.shape) > 0;
    shape.perToken = param_.quantType == LINEAR_QUANT_PER_TOKEN;
    const QuantMatmul::Shape* had = quantMatmul_ ? &quantMatmul_->shape() : nullptr;
    if (had == nullptr || had->k != shape.k || had->n != shape.n ||
        had->perChannel != shape.perChannel || had->hasBias != shape.hasBias ||
        had->perToken != shape.perToken) {
      quantMatmul_.reset();
      quantMatmul_ = std::make_unique<QuantMatmul>(shape);
    }
  } else {
    quantMatmul_.reset();
    if (matmul_ == nullptr || plan_.dtype != p.dtype || plan_.k != p.k || plan_.n != p.n) {
      matmul_.reset();
      matmul_ = std::make_unique<Matmul>(p.dtype, p.k, p.n, param_.transWeight);
    }
  }
  // With nothing between the product and y but the rounding, oneDNN rounds into y itself (the
  // float product only: W8A8's int32 sums are scaled after).
  p.direct = param_.type == PURE_LINEAR && !param_.hasResidual && matmul_ != nullptr &&
             matmul_->WritesDirectly(p.outDtype);
  // The product lands in y itself where it has y's rows and dtype: LINEAR_ALL_REDUCE (summed in
  // place), ALL_GATHER_LINEAR and PURE_LINEAR into a float32 y, AG_LINEAR_RS without a
  // ReduceScatter. LINEAR_REDUCE_SCATTER's product holds every rank's block.
  const bool sameRows = param_.type != LINEAR_REDUCE_SCATTER && (!twoDim || rsDim == 1);
  const bool intoY = p.direct || (sameRows && p.productDtype == p.outDtype);
  uint64_t offset = 0;
  auto reserve = [&](uint64_t bytes, uint64_t* at, uint64_t* size) {
    *at = offset;
    *size = bytes;
    offset += AlignUp(bytes);
  };
  reserve(intoY ? 0 : productBytes, &p.accOffset, &p.accBytes);
  // Where oneDNN cannot write the product in productDtype (float16 without AVX512-FP16, or x of
  // another dtype than y), it lands in float32 rows first, as many as one product call makes.
  if (p.productDtype != ACL_FLOAT && matmul_ != nullptr &&
      !matmul_->WritesDirectly(p.productDtype)) {
    p.roundRows = twoDim ? productRows : (p.blockRows + p.chunks - 1) / p.chunks;
    reserve(static_cast<uint64_t>(p.roundRows) * p.n * sizeof(float), &p.roundOffset,
            &p.roundBytes);
  }
  if (param_.type == ALL_GATHER_LINEAR && !param_.keepIntermediate) {
    reserve(static_cast<uint64_t>(p.rows) * rankSize * p.k * DataTypeSize(p.dtype),
            &p.gatheredOffset, &p.gatheredBytes);
  }
  if (twoDim && agDim > 1) {
    reserve(static_cast<uint64_t>(productRows) * p.k * DataTypeSize(p.dtype), &p.gatheredOffset,
            &p.gatheredBytes);
  }
  if (twoDim && rsDim > 1) {  // the rsDim blocks this rank receives: as many rows as the product
    reserve(productBytes, &p.scatteredOffset, &p.scatteredBytes);
  }
  // The residual as float32, unless it is added in its own dtype to the sum (of y's dtype).
  const bool residualAsGiven = p.productDtype == p.outDtype && p.residualDtype == p.outDtype;
  if (param_.hasResidual && p.residualDtype != ACL_FLOAT && !residualAsGiven) {
    reserve(static_cast<uint64_t>(p.n) * sizeof(float), &p.residualOffset, &p.residualBytes);
  }
  // A residual of x's dtype added to a y of another narrow dtype (outDataType): each row of y
  // is widened into this row, summed with the residual in float32 and rounded back.
  if (param_.hasResidual && p.productDtype == p.outDtype && p.outDtype != ACL_FLOAT &&
      p.residualDtype != p.outDtype) {
    reserve(static_cast<uint64_t>(p.n) * sizeof(float), &p.residualRowOffset, &p.residualRowBytes);
  }
  if (matmul_ != nullptr) {
    reserve(matmul_->ScratchBytes(twoDim ? productRows : p.blockRows), &p.matmulOffset,
            &p.matmulBytes);
  }
  if (p.form == LinearQuantForm::kW8A16) {
    reserve(static_cast<uint64_t>(p.k) * p.n * DataTypeSize(p.dtype), &p.antiquantOffset,
            &p.antiquantBytes);
  }
  p.workspaceBytes = offset;
  plan_ = p;
}

uint64_t LinearParallelOperation::WorkspaceSizeImpl(const VariantPack&) const {
  return plan_.workspaceBytes;
}

CallSignature LinearParallelOperation::SignatureImpl(const VariantPack& pack) const {
  CallSignature s;
  if (param_.type == PURE_LINEAR) return s;  // no collective: nothing to agree on
  // The chunking decides the collectives each rank makes, so it is part of the name every rank
  // must agree on: "<chunks>x<rows of a block>" (the record keeps 47 characters of it).
  s.opName = Concat("LinearParallel/", TypeName(), " ", plan_.chunks, "x", plan_.blockRows);
  if (param_.type == AG_LINEAR_RS) {
    // The grid decides which ranks exchange what: "<agDim>x<rsDim>" and "a" when the AllGather
    // groups are the inner ones, "r" otherwise.
    const LinearParallelTwoDimTPInfo& grid = param_.twoDimTPInfo;
    s.opName += Concat(" ", grid.agDim, "x", grid.rsDim, grid.innerDimIsAg != 0 ? "a" : "r");
  }
  // The dtype the ranks sum follows y's (outDataType): ranks must agree on it too (short, so that
  // the name the message shows keeps it).
  if (param_.type != ALL_GATHER_LINEAR) {
    s.opName += plan_.productDtype == ACL_FLOAT     ? " f32"
                : plan_.productDtype == ACL_FLOAT16 ? " f16"
                                                    : " bf16";
  }
  s.dtype = pack.inTensors[0].desc.dtype;
  s.count = param_.type == ALL_GATHER_LINEAR || param_.type == AG_LINEAR_RS ? plan_.rows * plan_.k
                                                                            : plan_.rows * plan_.n;
  return s;
}

COLLOPS_REGISTER_OPERATION(LinearParallelOperation, LinearParallelParam);

}  // namespace collops
