// Element-wise reduction kernels used by every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collops/tensor.h"

namespace collops {

enum class ReduceOp : int32_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };

/// "sum", "prod", "max", "min".
const char* ReduceOpName(ReduceOp op);
/// Parses "sum" | "prod" | "max" | "min"; false for anything else.
bool ParseReduceOp(const std::string& name, ReduceOp* op);
/// The reduction that param `field` of operation `op` names: ParseReduceOp, or
/// Error(ERROR_INVALID_PARAM) "<op>: <field> = "<name>" is not one of "sum", ...". Every op that
/// reduces parses its param through this one function.
ReduceOp ReduceOpParam(const char* op, const char* field, const std::string& name);
/// True for the dtypes communicators reduce: int8, uint8, int16, int32, int64, float16, bfloat16,
/// float32, float64. Operations accept fewer (not uint8 nor float64, as ATB: docs/operations.md);
/// the communicators take what torch.distributed users reduce through them (gloo and NCCL do).
bool IsReducibleDtype(DataType dtype);
/// The dtypes IsReducibleDtype accepts, for error messages.
const char* ReducibleDtypesText();

/// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], folded left to right in that order.
/// float16 and bfloat16 accumulate in float32 over all n inputs and round to nearest-even once, so
/// the result depends only on the inputs and their order (bit-identical wherever it is computed).
/// Integers wrap on overflow (two's complement), like torch and numpy. dst may be the very same
/// pointer as any srcs[k]; other overlaps are not allowed. n >= 1.
/// Throws Error(ERROR_INVALID_TENSOR_DTYPE) for a dtype that IsReducibleDtype rejects.
void ReduceArrays(DataType dtype, ReduceOp op, const void* const* srcs, size_t n, void* dst,
                  size_t count);
/// ReduceArrays with dst written by non-temporal stores, for an output too large to stay in the
/// caches: its lines are not read first (read-for-ownership) and do not evict the sources. Sums
/// of float32, float16 and bfloat16 on the AVX2 and AVX-512 builds stream; everything else stores
/// as ReduceArrays does. The same bits, arguments and errors as ReduceArrays.
void ReduceArraysStreaming(DataType dtype, ReduceOp op, const void* const* srcs, size_t n,
                           void* dst, size_t count);

/// dst[i] = src[i] as float32, for src of float16, bfloat16 or float32 (exact). src and dst must
/// not overlap unless both are float32 and equal. Throws Error(ERROR_INVALID_TENSOR_DTYPE) for
/// any other dtype.
void ConvertToFloat32(DataType srcType, const void* src, float* dst, size_t count);
/// dst[i] = src[i] rounded to nearest even in float16 or bfloat16 (copied for float32), bit for
/// bit as ReduceArrays stores its float32 accumulator; the same overlap rule and errors.
void ConvertFromFloat32(const float* src, DataType dstType, void* dst, size_t count);

/// The scales of int8 data quantised as ATB's quantised AllReduce takes them: value =
/// q · scale + offset per rank, so a sum over n ranks is (Σ q + n · offset) · scale.
struct QuantScale {
  /// float16 bits: one scale for every element (channels == 0), or one per channel.
  const uint16_t* scale = nullptr;
  /// 0: per tensor; else per channel: element i of the tensor has scale[i % channels].
  int64_t channels = 0;
  uint16_t offset = 0;  ///< float16 bits
};

/// dst[i] = (Σ_k srcs[k][i] + n · offset) · scale of element firstElement + i, for i < count: the
/// int8 sum is exact (int32), then one float32 addition and one float32 multiplication, rounded
/// once to `dtype` (float16, bfloat16 or float32; round to nearest even). The result depends only
/// on the inputs, bit for bit, whichever instruction set computes it. dst must not overlap the
/// sources or the scales. Throws Error(ERROR_INVALID_TENSOR_DTYPE) for another dtype.
void SumDequantiseInt8(const int8_t* const* srcs, size_t n, size_t count, int64_t firstElement,
                       const QuantScale& quant, DataType dtype, void* dst);
/// SumDequantiseInt8 with dst written by non-temporal stores on the AVX2 and AVX-512 builds (as
/// ReduceArraysStreaming is to ReduceArrays): for an output too large to stay in the caches. The
/// same bits, arguments and errors.
void SumDequantiseInt8Streaming(const int8_t* const* srcs, size_t n, size_t count,
                                int64_t firstElement, const QuantScale& quant, DataType dtype,
                                void* dst);

/// Name of the instruction set the kernels dispatched to at load time: "avx512", "avx2" or
/// "generic". COLLOPS_ISA=generic|avx2|avx512 forces a lower one (for tests and benchmarks);
/// another value throws Error(ERROR_INVALID_PARAM) naming it (collops/environment.h).
const char* ReduceKernelIsa();

}  // namespace collops
