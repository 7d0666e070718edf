#include "ops/all_reduce/quant_all_reduce.h"

#include <cstdlib>
#include <cstring>

#include "collops/environment.h"
#include "collops/operation_base.h"
#include "collops/reduce.h"
#include "ops/all_reduce/all_reduce_param.h"

namespace collops {
namespace {

/// ATB's limit on the channels of a per-channel scale.
constexpr int64_t kMaxChannels = 4194304;
/// Slices start on 64-element boundaries (a cache line of int8), so the kernels' blocks line up.
constexpr int64_t kSliceAlign = 64;

bool IsShape(const Dims& dims, std::initializer_list<int64_t> expected) {
  return dims == MakeDims(expected);
}

}  // namespace

const char* QuantAlgoName(QuantAlgo algo) {
  switch (algo) {
    case QuantAlgo::kAuto:
      return "auto";
    case QuantAlgo::kLocal:
      return "local";
    case QuantAlgo::kOneShot:
      return "oneshot";
    case QuantAlgo::kReduceScatterAllGather:
      return "rsag";
  }
  return "unknown";
}

QuantAlgo QuantAlgoFromEnv() {
  // The knob takes "auto" and the names of QuantAllReduce's rows (collops/environment.h).
  const std::string name = KnobWord("COLLOPS_ALGO_QUANTALLREDUCE", "auto");
  for (QuantAlgo algo : {QuantAlgo::kOneShot, QuantAlgo::kReduceScatterAllGather}) {
    if (name == QuantAlgoName(algo)) return algo;
  }
  return QuantAlgo::kAuto;
}

void CheckQuantInputs(const std::string& where, int quantType, const std::vector<TensorDesc>& in) {
  const Dims& x = in[0].shape;
  const Dims& scale = in[1].shape;
  const Dims& offset = in[2].shape;
  if (!IsShape(offset, {1})) {
    Fail(ERROR_INVALID_TENSOR_DIM, where, ": inTensors[2] (offset) has shape ",
         DimsToString(offset), "; a quantised AllReduce takes offset of shape [1]");
  }
  if (scale.dimNum > 2) {
    Fail(ERROR_INVALID_TENSOR_DIM_NUM, where, ": inTensors[1] (scale) has ", scale.dimNum,
         " dims (shape ", DimsToString(scale), "); a quantised AllReduce takes 1 or 2");
  }
  const int64_t n = x.dims[x.dimNum - 1];
  if (n % 16 != 0) {
    Fail(ERROR_INVALID_TENSOR_DIM, where, ": inTensors[0] (x) has shape ", DimsToString(x),
         "; a quantised AllReduce needs its last dim n = ", n, " to be a multiple of 16");
  }
  if (quantType == AllReduceParam::QUANT_TYPE_PER_TENSOR) {
    if (!IsShape(scale, {1})) {
      Fail(ERROR_INVALID_TENSOR_DIM, where, ": inTensors[1] (scale) has shape ",
           DimsToString(scale), "; quantType 1 (per tensor) takes scale of shape [1]");
    }
    return;
  }
  if (n > kMaxChannels) {
    Fail(ERROR_INVALID_TENSOR_DIM, where, ": inTensors[0] (x) has shape ", DimsToString(x),
         "; quantType 2 (per channel) takes at most ", kMaxChannels, " channels, not n = ", n);
  }
  if (!IsShape(scale, {n}) && !IsShape(scale, {1, n})) {
    Fail(ERROR_INVALID_TENSOR_DIM, where, ": inTensors[1] (scale) has shape ", DimsToString(scale),
         "; quantType 2 (per channel) takes scale of shape [", n, "] or [1, ", n,
         "] for x of shape ", DimsToString(x));
  }
}

QuantAllReducePlan PlanQuantAllReduce(QuantAlgo forced, int rankSize, int rank, int64_t count) {
  QuantAllReducePlan plan;
  plan.count = count;
  const int R = rankSize;
  if (R == 1) {
    plan.algo = QuantAlgo::kLocal;
  } else if (forced != QuantAlgo::kAuto) {
    plan.algo = forced;
  } else {
    plan.algo = R == 2 || count <= kQuantOneShotMaxElements ? QuantAlgo::kOneShot
                                                            : QuantAlgo::kReduceScatterAllGather;
  }
  if (plan.algo == QuantAlgo::kOneShot) {
    plan.fullCounts.assign(R, count);
    plan.fullDispls.resize(R);
    for (int j = 0; j < R; ++j) plan.fullDispls[j] = j * count;
    plan.workspaceBytes = static_cast<uint64_t>(R) * static_cast<uint64_t>(count);
  } else if (plan.algo == QuantAlgo::kReduceScatterAllGather) {
    const int64_t per = (count + R - 1) / R;
    const int64_t slice = (per + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
    plan.sliceCounts.resize(R);
    plan.sliceStarts.resize(R);
    for (int j = 0; j < R; ++j) {
      const int64_t start = std::min(count, j * slice);
      plan.sliceStarts[j] = start;
      plan.sliceCounts[j] = std::min(count, start + slice) - start;
    }
    plan.workspaceBytes = static_cast<uint64_t>(R) * static_cast<uint64_t>(plan.sliceCounts[rank]);
  }
  return plan;
}

uint64_t QuantValuesDigest(const Tensor& scale, const Tensor& offset) {
  // Four FNV-style lanes over 8-byte words (a per-channel scale holds up to 8 MiB), then the tail
  // and the offset, then the lanes folded together.
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t lanes[4] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                       0x165667b19e3779f9ull};
  const auto* bytes = static_cast<const uint8_t*>(scale.deviceData);
  const uint64_t size = scale.dataSize;
  uint64_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t word;
      std::memcpy(&word, bytes + i + 8 * k, 8);
      lanes[k] = (lanes[k] ^ word) * kPrime;
    }
  }
  uint64_t h = lanes[0];
  for (int k = 1; k < 4; ++k) h = (h ^ lanes[k]) * kPrime;
  for (; i < size; ++i) h = (h ^ bytes[i]) * kPrime;
  uint16_t off;
  std::memcpy(&off, offset.deviceData, sizeof off);
  h = (h ^ off) * kPrime;
  return (h ^ size) * kPrime;
}

QuantScale QuantScaleOf(int quantType, const Tensor& x, const Tensor& scale, const Tensor& offset) {
  QuantScale quant;
  quant.scale = static_cast<const uint16_t*>(scale.deviceData);
  quant.channels = quantType == AllReduceParam::QUANT_TYPE_PER_CHANNEL
                       ? x.desc.shape.dims[x.desc.shape.dimNum - 1]
                       : 0;
  std::memcpy(&quant.offset, offset.deviceData, sizeof quant.offset);
  return quant;
}

void RunQuantAllReduce(const QuantAllReducePlan& plan, const QuantScale& quant, const Tensor& x,
                       const Tensor& y, uint8_t* workspace, Communicator& comm) {
  const DataType out = y.desc.dtype;
  const auto* in = static_cast<const int8_t*>(x.deviceData);
  const int R = comm.Size();
  const int me = comm.Rank();
  std::vector<const int8_t*> blocks(R);
  switch (plan.algo) {
    case QuantAlgo::kAuto:
    case QuantAlgo::kLocal:
      blocks.assign(1, in);
      SumDequantiseInt8(blocks.data(), 1, plan.count, 0, quant, out, y.deviceData);
      return;
    case QuantAlgo::kOneShot: {
      comm.AllGatherV(in, plan.count, workspace, plan.fullCounts.data(), plan.fullDispls.data(),
                      ACL_INT8);
      for (int j = 0; j < R; ++j) {
        blocks[j] = reinterpret_cast<const int8_t*>(workspace) + plan.fullDispls[j];
      }
      SumDequantiseInt8(blocks.data(), R, plan.count, 0, quant, out, y.deviceData);
      return;
    }
    case QuantAlgo::kReduceScatterAllGather: {
      const int64_t mine = plan.sliceCounts[me];
      const std::vector<int64_t> recvCounts(R, mine);
      std::vector<int64_t> rdispls(R);
      for (int j = 0; j < R; ++j) rdispls[j] = j * mine;
      comm.AllToAllV(in, plan.sliceCounts.data(), plan.sliceStarts.data(), workspace,
                     recvCounts.data(), rdispls.data(), ACL_INT8);
      for (int j = 0; j < R; ++j) {
        blocks[j] = reinterpret_cast<const int8_t*>(workspace) + rdispls[j];
      }
      void* slice = ElementPtr(y.deviceData, plan.sliceStarts[me], out);
      SumDequantiseInt8(blocks.data(), R, mine, plan.sliceStarts[me], quant, out, slice);
      // y's own slice is this rank's block of the gather (the in-place form every engine takes).
      comm.AllGatherV(slice, mine, y.deviceData, plan.sliceCounts.data(), plan.sliceStarts.data(),
                      out);
      return;
    }
  }
}

}  // namespace collops
