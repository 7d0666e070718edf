#include "ops/all_gather_v/all_gather_v_operation.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "collops/registry.h"

namespace collops {

namespace {
constexpr size_t kX = 0;
constexpr size_t kSendCount = 1;
constexpr size_t kRecvCounts = 2;
constexpr size_t kRdispls = 3;
constexpr size_t kYShape = 4;
}  // namespace

void AllGatherVOperation::ValidateParam(const AllGatherVParam& param) {
  // rank defaults to -1 here, so the common rule 0 <= rank < rankSize also catches a missing rank.
  ValidateCommParam(kName, param);
}

AllGatherVOperation::AllGatherVOperation(const AllGatherVParam& param)
    : OperationBase(kName, param) {}

std::vector<TensorSpec> AllGatherVOperation::InputSpecs() const {
  return {{"x", DtypeSet::kMovable},
          {"sendCount", DtypeSet::kCounts, CountsLength::kOne},
          {"recvCounts", DtypeSet::kCounts},
          {"rdispls", DtypeSet::kCounts},
          {"y_shape", DtypeSet::kShapeOnly}};
}

std::vector<TensorSpec> AllGatherVOperation::OutputSpecs() const {
  return {{"out", DtypeSet::kMovable}};
}

void AllGatherVOperation::InferShapeImpl(const std::vector<TensorDesc>& in,
                                         std::vector<TensorDesc>& out) const {
  // The base guarantees 1..8 dims for both, so dim 0 exists; y_shape's data is never read.
  TensorDesc y = in[kX];
  y.shape.dims[0] = in[kYShape].shape.dims[0];
  out = {y};
}

void AllGatherVOperation::PrepareImpl(const VariantPack& pack) {
  const int64_t xNumel = NumElements(pack.inTensors[kX].desc.shape);
  const std::vector<int64_t> sendCount = ReadCounts(pack.inTensors[kSendCount], "sendCount");
  if (sendCount.size() != 1) {
    Fail(ERROR_INVALID_PARAM, Where(), ": sendCount has ", sendCount.size(),
         " entries; it must hold exactly 1");
  }
  if (sendCount[0] < 0 || sendCount[0] > xNumel) {
    Fail(ERROR_INVALID_PARAM, Where(), ": sendCount = ", sendCount[0], " must be in [0, ",
         "x.numel() = ", xNumel, "]");
  }
  std::vector<int64_t> recvCounts = ReadCounts(pack.inTensors[kRecvCounts], "recvCounts");
  std::vector<int64_t> rdispls = ReadCounts(pack.inTensors[kRdispls], "rdispls");
  const int64_t outNumel = NumElements(pack.outTensors[0].desc.shape);
  CheckRanges(recvCounts, "recvCounts", rdispls, "rdispls", outNumel, "out.numel()");
  // Overlapping ranges would leave out to the order in which each rank's engine copies them.
  CheckRangesDisjoint(Where(), recvCounts, "recvCounts", rdispls, "rdispls", "out",
                      "every element of out comes from at most one rank");
  const int rank = commParam().rank;
  if (recvCounts[rank] != sendCount[0]) {
    Fail(ERROR_INVALID_PARAM, Where(), ": recvCounts[", rank, "] = ", recvCounts[rank],
         " must equal sendCount = ", sendCount[0], " (the rank receives its own contribution)");
  }
  sendCount_ = sendCount[0];
  recvCounts_ = std::move(recvCounts);
  rdispls_ = std::move(rdispls);
  outNumel_ = outNumel;
}

InPlaceForm AllGatherVOperation::InPlaceFormImpl(const VariantPack& pack) const {
  // x as this rank's own block of out, which no peer writes (recvCounts[rank] == sendCount).
  const Tensor& x = pack.inTensors[kX];
  return {ElementPtr(pack.outTensors[0].deviceData, rdispls_[commParam().rank], x.desc.dtype),
          "x starting at out.flat[rdispls[rank]]"};
}

CallSignature AllGatherVOperation::SignatureImpl(const VariantPack& pack) const {
  // Rank i sends sendCount_i to every rank; rank j expects recvCounts_j[i] from rank i.
  CallSignature s;
  s.opName = kName;
  s.dtype = pack.inTensors[kX].desc.dtype;
  s.sendCounts.assign(recvCounts_.size(), sendCount_);
  s.recvCounts = recvCounts_;
  s.sendField = "sendCount";
  s.recvField = "recvCounts";
  return s;
}

void AllGatherVOperation::ZeroUncovered(void* out, DataType dtype) const {
  std::vector<std::pair<int64_t, int64_t>> ranges;  // {begin, end}, non-empty only
  for (size_t i = 0; i < recvCounts_.size(); ++i) {
    if (recvCounts_[i] > 0) ranges.emplace_back(rdispls_[i], rdispls_[i] + recvCounts_[i]);
  }
  std::sort(ranges.begin(), ranges.end());
  const size_t width = DataTypeSize(dtype);
  int64_t cursor = 0;  // everything before cursor is covered or already zeroed
  const auto zeroUpTo = [&](int64_t end) {
    if (end > cursor) std::memset(ElementPtr(out, cursor, dtype), 0, (end - cursor) * width);
  };
  for (const auto& [begin, end] : ranges) {
    zeroUpTo(begin);
    cursor = std::max(cursor, end);
  }
  zeroUpTo(outNumel_);
}

void AllGatherVOperation::ExecuteImpl(const VariantPack& pack, uint8_t*, uint64_t,
                                      Communicator& comm) {
  const Tensor& x = pack.inTensors[kX];
  void* out = pack.outTensors[0].deviceData;
  comm.AllGatherV(x.deviceData, static_cast<size_t>(sendCount_), out, recvCounts_.data(),
                  rdispls_.data(), x.desc.dtype);
  // Only the gaps, which the communicator never writes, and only afterwards: should x live
  // inside out, peers have finished reading it once AllGatherV returns.
  ZeroUncovered(out, x.desc.dtype);
}

COLLOPS_REGISTER_OPERATION(AllGatherVOperation, AllGatherVParam);

}  // namespace collops
