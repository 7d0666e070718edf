// float16/bfloat16 reductions across hosts accumulate in float32 and round once, as lccl's do: a
// host's partial result rounded to 16 bits and then reduced again would round twice.
#pragma once

#include <cstddef>

#include "collops/reduce.h"
#include "collops/tensor.h"

namespace collops {
namespace hier {

/// True for float16/bfloat16 sums and products (max and min never round).
bool NeedsWideAccumulation(DataType dtype, ReduceOp op);
/// dst[i] = float(src[i]) for a float16 or bfloat16 src.
void Widen(DataType dtype, const void* src, float* dst, size_t count);
/// dst[i] = src[i] rounded to nearest even in float16 or bfloat16.
void Narrow(DataType dtype, const float* src, void* dst, size_t count);

}  // namespace hier
}  // namespace collops
