#include "core/comm/shm/quant_allreduce.h"

#include <algorithm>

#include "core/comm/shm/algorithm_table.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {
namespace {

/// Slices start on 64 int8 elements (a cache line of the staged input).
constexpr size_t kSliceAlign = 64;

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
  const size_t per = t_.HalfBytes();
  const size_t rounds = std::max<size_t>(1, CeilDiv(count, per));
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
    SumDequantiseInt8(srcs_.data(), size, n, static_cast<int64_t>(lo), quant, outDtype,
                      out + lo * e);
  }
}

void QuantAllReduceAlgorithms::ReduceScatterAllGather(const int8_t* in, uint8_t* out, size_t count,
                                                      const QuantScale& quant, DataType outDtype) {
  const int rank = t_.Rank(), size = t_.Size();
  const size_t e = DataTypeSize(outDtype);
  // A chunk's dequantised slices, e bytes per element, must fit the half of round B.
  const size_t chunkBytes = std::min<size_t>(t_.Policy().chunkBytes, t_.HalfBytes());
  size_t fullSlice = chunkBytes / e / size / kSliceAlign * kSliceAlign;
  if (fullSlice == 0) fullSlice = kSliceAlign;
  const size_t fullChunk = fullSlice * size;
  srcs_.resize(size);
  size_t lo = 0;
  do {
    const size_t n = std::min(fullChunk, count - lo);
    const size_t slice =
        n == fullChunk ? fullSlice : CeilDiv(CeilDiv(n, size), kSliceAlign) * kSliceAlign;
    auto begin = [&](int r) { return std::min(n, r * slice); };
    auto end = [&](int r) { return std::min(n, (r + 1) * slice); };
    // Round A: the int8 slices the other ranks dequantise.
    uint8_t* stage = t_.NextHalf();
    for (int r = 0; r < size; ++r) {
      if (r != rank) CopyBytes(stage + begin(r), in + lo + begin(r), end(r) - begin(r));
    }
    t_.Round();
    // The own slice over all ranks, dequantised into the half of round B.
    const size_t mine = end(rank) - begin(rank);
    if (mine != 0) {
      for (int r = 0; r < size; ++r) {
        srcs_[r] = r == rank ? in + lo + begin(rank)
                             : reinterpret_cast<const int8_t*>(t_.HalfOf(r)) + begin(rank);
      }
      SumDequantiseInt8(srcs_.data(), size, mine, static_cast<int64_t>(lo + begin(rank)), quant,
                        outDtype, t_.NextHalf() + begin(rank) * e);
    }
    t_.Round();
    // Every rank's dequantised slice into the output.
    for (int r = 0; r < size; ++r) {
      t_.CopyOut(out + (lo + begin(r)) * e, t_.HalfOf(r) + begin(r) * e, (end(r) - begin(r)) * e,
                 count * e);
    }
    lo += n;
  } while (lo < count);
}

}  // namespace shm
}  // namespace collops
