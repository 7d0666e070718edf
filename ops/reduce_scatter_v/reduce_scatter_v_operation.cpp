#include "ops/reduce_scatter_v/reduce_scatter_v_operation.h"

#include <cstring>

#include "collops/registry.h"

namespace collops {
namespace {

std::string VectorString(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

/// A count param that was given must have one entry >= 0 per rank.
void ValidateCountParam(const ReduceScatterVParam& param, const char* name,
                        const std::vector<int64_t>& values) {
  if (values.empty()) return;
  if (values.size() != static_cast<size_t>(param.rankSize)) {
    Fail(ERROR_INVALID_PARAM, ReduceScatterVOperation::kName, ": param ", name, " = ",
         VectorString(values), " has ", values.size(), " entries but rankSize = ", param.rankSize);
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0) {
      Fail(ERROR_INVALID_PARAM, ReduceScatterVOperation::kName, ": param ", name, "[", i,
           "] = ", values[i], " must be >= 0");
    }
  }
}

}  // namespace

void ReduceScatterVOperation::ValidateParam(const ReduceScatterVParam& param) {
  ValidateCommParam(kName, param);
  ReduceOpParam(kName, "reduceType", param.reduceType);
  ValidateCountParam(param, "sendCounts", param.sendCounts);
  ValidateCountParam(param, "sdispls", param.sdispls);
  if (param.recvCount < -1) {
    Fail(ERROR_INVALID_PARAM, kName, ": param recvCount = ", param.recvCount,
         " must be >= 0 (or -1 when not given)");
  }
}

ReduceScatterVOperation::ReduceScatterVOperation(const ReduceScatterVParam& param)
    : OperationBase(kName, param),
      reduceOp_(ReduceOpParam(kName, "reduceType", param.reduceType)),
      signatureName_(ReducingOpName(kName, reduceOp_)),
      paramSendCounts_(param.sendCounts),
      paramSdispls_(param.sdispls),
      paramRecvCount_(param.recvCount) {}

std::vector<TensorSpec> ReduceScatterVOperation::InputSpecs() const {
  return {{"x", DtypeSet::kReducible},
          {"sendCounts", DtypeSet::kCounts},
          {"sdispls", DtypeSet::kCounts},
          {"recvCount", DtypeSet::kCounts, CountsLength::kOne},
          {"y_shape", DtypeSet::kShapeOnly}};
}

std::vector<TensorSpec> ReduceScatterVOperation::OutputSpecs() const {
  return {{"out", DtypeSet::kReducible}};
}

void ReduceScatterVOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                             std::vector<TensorDesc>& out) const {
  const TensorDesc& x = in[0];
  const TensorDesc& yShape = in[4];
  if (x.shape.dimNum != 2) {
    Fail(ERROR_INVALID_TENSOR_DIM_NUM, Where(), ": x has shape ", DimsToString(x.shape), " with ",
         x.shape.dimNum, " dims; it must have exactly 2");
  }
  if (yShape.shape.dimNum != 1) {
    Fail(ERROR_INVALID_TENSOR_DIM_NUM, Where(), ": y_shape has shape ", DimsToString(yShape.shape),
         " with ", yShape.shape.dimNum,
         " dims; it must have exactly 1 (its length is the output's dim 0)");
  }
  TensorDesc y = x;
  y.shape = MakeDims({yShape.shape.dims[0], x.shape.dims[1]});
  out = {y};
}

void ReduceScatterVOperation::CheckParamMatches(const char* name, const std::vector<int64_t>& param,
                                                const std::vector<int64_t>& tensor) const {
  if (!param.empty() && param != tensor) {
    Fail(ERROR_INVALID_PARAM, Where(), ": param ", name, " = ", VectorString(param), " but the ",
         name, " tensor holds ", VectorString(tensor),
         "; the tensor is authoritative and a param that is given must equal it");
  }
}

void ReduceScatterVOperation::PrepareImpl(const VariantPack& pack) {
  const int64_t xNumel = NumElements(pack.inTensors[0].desc.shape);
  const int64_t outNumel = NumElements(pack.outTensors[0].desc.shape);
  sendCounts_ = ReadCounts(pack.inTensors[1], "sendCounts");
  sdispls_ = ReadCounts(pack.inTensors[2], "sdispls");
  CheckRanges(sendCounts_, "sendCounts", sdispls_, "sdispls", xNumel, "x.numel()");
  const std::vector<int64_t> recv = ReadCounts(pack.inTensors[3], "recvCount");
  if (recv.size() != 1) {
    Fail(ERROR_INVALID_PARAM, Where(), ": recvCount holds ", recv.size(),
         " values; it must hold exactly 1");
  }
  recvCount_ = recv[0];
  if (recvCount_ < 0) {
    Fail(ERROR_INVALID_PARAM, Where(), ": recvCount = ", recvCount_, " must be >= 0");
  }
  if (recvCount_ > outNumel) {
    Fail(ERROR_INVALID_PARAM, Where(), ": recvCount = ", recvCount_,
         " exceeds out.numel() = ", outNumel, " (out has shape ",
         DimsToString(pack.outTensors[0].desc.shape), ")");
  }
  CheckParamMatches("sendCounts", paramSendCounts_, sendCounts_);
  CheckParamMatches("sdispls", paramSdispls_, sdispls_);
  if (paramRecvCount_ != -1 && paramRecvCount_ != recvCount_) {
    Fail(ERROR_INVALID_PARAM, Where(), ": param recvCount = ", paramRecvCount_,
         " but the recvCount tensor holds ", recvCount_,
         "; the tensor is authoritative and a param that is given must equal it");
  }
}

InPlaceForm ReduceScatterVOperation::InPlaceFormImpl(const VariantPack& pack) const {
  // out as this rank's own piece of x (InPlaceRefusalImpl checks that no peer reads it); without
  // a tail, since the tail is zeroed before the peers have read x.
  const Tensor& x = pack.inTensors[0];
  const Tensor& out = pack.outTensors[0];
  const char* form = "out starting at x.flat[sdispls[rank]] with out.numel() == recvCount";
  if (NumElements(out.desc.shape) != recvCount_) return {nullptr, form};
  const auto own = static_cast<uintptr_t>(sdispls_[commParam().rank]) * DataTypeSize(x.desc.dtype);
  return {reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(out.deviceData) - own), form};
}

std::string ReduceScatterVOperation::InPlaceRefusalImpl(const VariantPack&) const {
  // The piece is this rank's to overwrite only if no peer reads any of it: peers read their
  // blocks of x while, or after, this rank writes its result there.
  const int rank = commParam().rank;
  const int64_t begin = sdispls_[rank];
  const int64_t end = begin + recvCount_;  // offsets within real memory: no overflow
  for (size_t j = 0; j < sendCounts_.size(); ++j) {
    if (static_cast<int>(j) == rank || sendCounts_[j] == 0) continue;
    if (sdispls_[j] < end && begin < sdispls_[j] + sendCounts_[j]) {
      return Concat("out lies on x in the in-place form (out starting at x.flat[sdispls[", rank,
                    "] = ", begin, "], ", recvCount_, " elements), but the block sent to rank ", j,
                    " (sdispls[", j, "] = ", sdispls_[j], ", sendCounts[", j,
                    "] = ", sendCounts_[j], ") overlaps it: rank ", j,
                    " may read it after this rank has written its result there, so give out its ",
                    "own buffer or keep the other ranks' blocks off that piece");
    }
  }
  return "";
}

CallSignature ReduceScatterVOperation::SignatureImpl(const VariantPack& pack) const {
  CallSignature s;
  s.opName = signatureName_;
  s.dtype = pack.inTensors[0].desc.dtype;
  // x.numel() legitimately differs between ranks; the per-pair counts are what must agree.
  s.sendCounts = sendCounts_;
  s.recvCounts.assign(commParam().rankSize, recvCount_);
  s.sendField = "sendCounts";
  s.recvField = "recvCount";
  return s;
}

void ReduceScatterVOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                          Communicator& comm) {
  const Tensor& x = pack.inTensors[0];
  const Tensor& out = pack.outTensors[0];
  const int64_t outNumel = NumElements(out.desc.shape);
  // The communicator writes only [0, recvCount); the rest of out is defined as zero.
  if (outNumel > recvCount_) {
    std::memset(ElementPtr(out.deviceData, recvCount_, x.desc.dtype), 0,
                (outNumel - recvCount_) * DataTypeSize(x.desc.dtype));
  }
  comm.ReduceScatterV(x.deviceData, sendCounts_.data(), sdispls_.data(), out.deviceData,
                      static_cast<size_t>(recvCount_), x.desc.dtype, reduceOp_);
}

COLLOPS_REGISTER_OPERATION(ReduceScatterVOperation, ReduceScatterVParam);

}  // namespace collops
