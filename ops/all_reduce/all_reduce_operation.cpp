#include "ops/all_reduce/all_reduce_operation.h"

#include <cstdint>
#include <cstdio>

#include "collops/registry.h"

namespace collops {

void AllReduceOperation::ValidateParam(const AllReduceParam& param) {
  ValidateCommParam(kName, param);
  const ReduceOp op = ReduceOpParam(kName, "allReduceType", param.allReduceType);
  if (param.quantType < AllReduceParam::QUANT_TYPE_UNQUANT ||
      param.quantType >= AllReduceParam::QUANT_TYPE_MAX) {
    Fail(ERROR_INVALID_PARAM, kName, ": quantType = ", param.quantType,
         " is not one of 0 (none), 1 (per tensor), 2 (per channel)");
  }
  if (param.quantType == AllReduceParam::QUANT_TYPE_UNQUANT) {
    if (param.outDataType != ACL_DT_UNDEFINED) {
      Fail(ERROR_INVALID_PARAM, kName, ": outDataType = ", param.outDataType,
           " is set but quantType = 0: an unquantised AllReduce writes x's dtype, so leave ",
           "outDataType at -1");
    }
    return;
  }
  if (op != ReduceOp::kSum) {
    Fail(ERROR_INVALID_PARAM, kName, ": allReduceType = \"", param.allReduceType,
         "\" with quantType = ", param.quantType, "; a quantised AllReduce only sums");
  }
  if (param.outDataType != ACL_FLOAT16 && param.outDataType != ACL_BF16 &&
      param.outDataType != ACL_FLOAT) {
    Fail(ERROR_INVALID_PARAM, kName, ": outDataType = ", param.outDataType,
         " with quantType = ", param.quantType,
         " is not one of 1 (float16), 27 (bfloat16), 0 (float32)");
  }
  QuantAlgoFromEnv();  // a bad COLLOPS_ALGO_QUANTALLREDUCE fails here, before any call
}

AllReduceOperation::AllReduceOperation(const AllReduceParam& param)
    : OperationBase(kName, param),
      reduceOp_(ReduceOpParam(kName, "allReduceType", param.allReduceType)),
      signatureName_(ReducingOpName(kName, reduceOp_)),
      quantType_(param.quantType),
      outDtype_(static_cast<DataType>(param.outDataType)),
      quantAlgo_(Quantised() ? QuantAlgoFromEnv() : QuantAlgo::kAuto) {}

std::vector<TensorSpec> AllReduceOperation::InputSpecs() const {
  if (Quantised()) {
    return {{"x", DtypeSet::kInt8}, {"scale", DtypeSet::kFloat16}, {"offset", DtypeSet::kFloat16}};
  }
  return {{"x", DtypeSet::kReducible}};
}

std::vector<TensorSpec> AllReduceOperation::OutputSpecs() const {
  return {{"y", DtypeSet::kReducible}};
}

void AllReduceOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                        std::vector<TensorDesc>& out) const {
  if (!Quantised()) {
    out = {in[0]};
    return;
  }
  CheckQuantInputs(GetName(), quantType_, in);
  TensorDesc y = in[0];
  y.dtype = outDtype_;
  out = {y};
}

void AllReduceOperation::PrepareImpl(const VariantPack& pack) {
  if (!Quantised()) return;
  // The slices of y are written while scale and offset are still read (by this rank's later
  // blocks, or by the dequantisation after the exchange).
  const Tensor& y = pack.outTensors[0];
  for (size_t i : {size_t{1}, size_t{2}}) {
    const Tensor& t = pack.inTensors[i];
    const auto begin = reinterpret_cast<uintptr_t>(t.deviceData);
    const auto yBegin = reinterpret_cast<uintptr_t>(y.deviceData);
    if (t.dataSize > 0 && y.dataSize > 0 && begin < yBegin + y.dataSize &&
        yBegin < begin + t.dataSize) {
      Fail(ERROR_INVALID_PARAM, Where(), ": ", InputSpecs()[i].name,
           " overlaps y; y is written while it is read, so give y its own buffer");
    }
  }
  quantPlan_ = PlanQuantAllReduce(quantAlgo_, commParam().rankSize, commParam().rank,
                                  NumElements(pack.inTensors[0].desc.shape));
}

bool AllReduceOperation::EngineQuantises(const Communicator& comm) const {
  return quantPlan_.algo != QuantAlgo::kLocal && comm.HasAllReduceQuantised();
}

uint64_t AllReduceOperation::WorkspaceSizeImpl(const VariantPack&) const {
  // Only the path built from the primitives gathers int8 blocks into the workspace; an engine
  // with a path of its own (lccl) stages them in its own memory.
  const Communicator* comm = AcquiredCommunicator();
  if (!Quantised() || (comm != nullptr && EngineQuantises(*comm))) return 0;
  return quantPlan_.workspaceBytes;
}

InPlaceForm AllReduceOperation::InPlaceFormImpl(const VariantPack& pack) const {
  if (Quantised()) return {};  // y is wider than x: no in-place form
  return {pack.outTensors[0].deviceData, "x == y"};
}

CallSignature AllReduceOperation::SignatureImpl(const VariantPack& pack) const {
  CallSignature s;
  s.dtype = pack.inTensors[0].desc.dtype;
  s.count = NumElements(pack.inTensors[0].desc.shape);
  if (!Quantised()) {
    s.opName = signatureName_;
    return s;
  }
  // "AllReduceOperation/q2>float16/rsag": ranks must also agree on the output dtype and the
  // algorithm (its primitives, where the engine has no path of its own), and on scale and offset
  // (else their y would differ).
  char name[96];
  std::snprintf(name, sizeof name, "%s/q%d>%s/%s", kName, quantType_,
                DataTypeName(outDtype_).c_str(), QuantAlgoName(quantPlan_.algo));
  s.opName = name;
  s.valuesDigest = QuantValuesDigest(pack.inTensors[1], pack.inTensors[2]);
  s.valuesField = "scale and offset";
  return s;
}

void AllReduceOperation::ExecuteImpl(const VariantPack& pack, uint8_t* workspace,
                                     uint64_t workspaceSize, Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  if (Quantised()) {
    const Tensor& y = pack.outTensors[0];
    const QuantScale quant = QuantScaleOf(quantType_, x, pack.inTensors[1], pack.inTensors[2]);
    if (EngineQuantises(comm)) {
      if (!comm.AllReduceQuantised(static_cast<const int8_t*>(x.deviceData), y.deviceData,
                                   static_cast<size_t>(quantPlan_.count), quant, outDtype_)) {
        Fail(ERROR_INTERNAL_ERROR, Where(), ": backend ", comm.BackendName(),
             " said it runs AllReduceQuantised itself, then did not");
      }
      return;
    }
    if (workspaceSize < quantPlan_.workspaceBytes) {
      Fail(ERROR_INVALID_WORKSPACE_SIZE, Where(), ": workspace of ", workspaceSize,
           " bytes; the quantised AllReduce built from backend ", comm.BackendName(),
           "'s primitives needs ", quantPlan_.workspaceBytes);
    }
    RunQuantAllReduce(quantPlan_, quant, x, y, workspace, comm);
    return;
  }
  comm.AllReduce(x.deviceData, pack.outTensors[0].deviceData, NumElements(x.desc.shape),
                 x.desc.dtype, reduceOp_);
}

COLLOPS_REGISTER_OPERATION(AllReduceOperation, AllReduceParam);

}  // namespace collops
