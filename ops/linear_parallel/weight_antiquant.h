// The W8A16 weight dequantisation of a quantised LinearParallelOperation (linear_parallel_quant.h):
//   Wd = (W + offset) * scale, computed in float32 and rounded once to `dtype`
// for an int8 weight W as stored ([n, k] under transWeight, else [k, n]), with the scale and the
// offset (null: none) in `dtype`, one for all (PER_TENSOR), one per output channel n
// (PER_CHANNEL), or one per output channel and group of `groupSize` along k (PER_GROUP: [n, k / G]
// under transWeight, else [k / G, n]). Wd keeps W's layout, so the float product takes it as is.
#pragma once

#include <cstdint>

#include "collops/tensor.h"

namespace collops {

struct AntiquantLayout {
  int64_t k = 0;
  int64_t n = 0;
  bool transWeight = true;
  int quantType = 0;      ///< LinearParallelQuantType: PER_TENSOR, PER_CHANNEL or PER_GROUP
  int64_t groupSize = 0;  ///< PER_GROUP only
};

/// Writes Wd (k * n values of `dtype`) to `out` with up to `threads` threads.
void AntiquantWeight(const AntiquantLayout& layout, const int8_t* weight, DataType dtype,
                     const void* offset, const void* scale, void* out, int threads);

}  // namespace collops
