#include "core/comm/shm/quant_allreduce.h"

#include <algorithm>
#include <utility>

#include "core/comm/shm/algorithm_table.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {
namespace {

/// Slices start on 64 int8 elements (a cache line of the staged input).
constexpr size_t kSliceAlign = 64;

/// "oneshot": the int8 elements a rank stages per round, so that a round's output is one rsag
/// chunk (policy.chunkBytes: one core's L2 cache with a CPU per rank), and at most a half. In
/// half-slot rounds (2 MiB of int8 by default) neither a round's staged input nor its output fits
/// a core's L2, and two-process runs with a CPU each spent about twice the time in the staging
/// and in the sum (docs/performance.md).
size_t OneShotRoundElements(const Transport& t, size_t e) {
  const size_t chunk = std::max<size_t>(t.Policy().chunkBytes / e, kSliceAlign);
  return std::min(t.HalfBytes(), chunk / kSliceAlign * kSliceAlign);
}

}  // namespace

void QuantAllReduceAlgorithms::AllReduceQuantised(const int8_t* in, void* out, size_t count,
                                                  const QuantScale& quant, DataType outDtype) {
  if (outDtype != ACL_FLOAT16 && outDtype != ACL_BF16 && outDtype != ACL_FLOAT) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, t_.Where(), "dtype ", DataTypeName(outDtype),
         " is not an output of the quantised AllReduce (float16, bfloat16, float32)");
  }
  auto* dst = static_cast<uint8_t*>(out);
  if (t_.Size() == 1) {
    const int8_t* srcs[] = {in};
    SumDequantiseInt8(srcs, 1, count, 0, quant, outDtype, dst);
    return;
  }
  Algo algo = t_.Forced(Collective::kQuantAllReduce);
  if (algo == kAlgoAuto) {
    algo = SelectQuantAllReduce(t_.Policy(), t_.Size(), count, DataTypeSize(outDtype));
  }
  if (algo == kAlgoOneShot) {
    OneShot(in, dst, count, quant, outDtype);
  } else {
    ReduceScatterAllGather(in, dst, count, quant, outDtype);
  }
}

void QuantAllReduceAlgorithms::OneShot(const int8_t* in, uint8_t* out, size_t count,
                                       const QuantScale& quant, DataType outDtype) {
  const int rank = t_.Rank(), size = t_.Size();
  const size_t e = DataTypeSize(outDtype);
  const size_t per = OneShotRoundElements(t_, e);
  const size_t rounds = std::max<size_t>(1, CeilDiv(count, per));
  // A large output of several rounds is written with non-temporal stores, as the plain
  // AllReduce's (the policy's stream threshold): its lines are not read from memory first.
  const bool stream =
      rounds > 1 && static_cast<const void*>(in) != out && t_.StreamsOutput(count * e);
  const auto sum = stream ? SumDequantiseInt8Streaming : SumDequantiseInt8;
  srcs_.resize(size);
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * per;
    const size_t n = Clip(static_cast<int64_t>(count), lo, per);
    CopyBytes(t_.NextHalf(), in + lo, n);
    t_.Round();
    if (n == 0) continue;
    for (int r = 0; r < size; ++r) {
      srcs_[r] = r == rank ? in + lo : reinterpret_cast<const int8_t*>(t_.HalfOf(r));
    }
    sum(srcs_.data(), size, n, static_cast<int64_t>(lo), quant, outDtype, out + lo * e);
  }
}

void QuantAllReduceAlgorithms::ReduceScatterAllGather(const int8_t* in, uint8_t* out, size_t count,
                                                      const QuantScale& quant, DataType outDtype) {
  const int rank = t_.Rank(), size = t_.Size();
  const size_t e = DataTypeSize(outDtype);
  // A chunk's output is at most chunkBytes. A half holds the int8 slices staged for chunk k
  // (slice r at r * fullSlice) and, after them, the own dequantised slice of chunk k - 1.
  const size_t chunkBytes = std::min<size_t>(t_.Policy().chunkBytes, t_.HalfBytes());
  size_t fullSlice = std::min(chunkBytes / e / size, t_.HalfBytes() / (size + e));
  fullSlice = fullSlice / kSliceAlign * kSliceAlign;
  if (fullSlice == 0) fullSlice = kSliceAlign;
  const size_t fullChunk = fullSlice * size;
  const size_t dequantisedAt = fullChunk;
  const size_t chunks = CeilDiv(count, fullChunk);
  // Rank r's slice of chunk k: elements [first, first + length) of the call.
  const auto sliceOf = [&](size_t k, int r) {
    const size_t lo = k * fullChunk;
    const size_t n = std::min(fullChunk, count - lo);
    const size_t slice =
        n == fullChunk ? fullSlice : CeilDiv(CeilDiv(n, size), kSliceAlign) * kSliceAlign;
    const size_t first = std::min(n, r * slice);
    return std::pair<size_t, size_t>{lo + first, std::min(n, (r + 1) * slice) - first};
  };
  srcs_.resize(size);
  // Round k publishes chunk k's staged int8 slices and the own dequantised slice of chunk k - 1,
  // so a call of K chunks takes K + 1 rounds. Between rounds k and k + 1 a rank writes only the
  // half it publishes with round k + 1 and reads only the halves of round k: chunk k's int8
  // slices there to sum, chunk k - 1's dequantised slices to copy out.
  for (size_t k = 0; k <= chunks; ++k) {
    uint8_t* const next = t_.NextHalf();
    if (k >= 1) {
      const auto [first, length] = sliceOf(k - 1, rank);
      if (length != 0) {
        for (int r = 0; r < size; ++r) {
          srcs_[r] = r == rank ? in + first
                               : reinterpret_cast<const int8_t*>(t_.HalfOf(r)) + rank * fullSlice;
        }
        SumDequantiseInt8(srcs_.data(), size, length, static_cast<int64_t>(first), quant, outDtype,
                          next + dequantisedAt);
      }
    }
    for (int r = 0; r < size && k < chunks; ++r) {
      if (r == rank) continue;
      const auto [first, length] = sliceOf(k, r);
      CopyBytes(next + r * fullSlice, in + first, length);
    }
    t_.Round();
    if (k >= 1) {
      for (int r = 0; r < size; ++r) {
        const auto [first, length] = sliceOf(k - 1, r);
        t_.CopyOut(out + first * e, t_.HalfOf(r) + dequantisedAt, length * e, count * e);
      }
    }
  }
}

}  // namespace shm
}  // namespace collops
