// Private to the reduction kernels and their tests: the per-instruction-set kernels and the CPU
// checks that decide which of them may run. ReduceArrays (collops/reduce.h) is the public entry.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collops/reduce.h"
#include "collops/tensor.h"

namespace collops {
namespace reduce_internal {

/// Instruction sets the kernels are built for, lowest first.
enum class Isa : int { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };
constexpr int kIsaCount = 3;

/// The kernel contract is ReduceArrays' without its argument checks: the dtype is reducible, op is
/// valid, n >= 1, and every pointer is valid for count elements (or count is 0).
using ReduceKernel = void (*)(DataType dtype, ReduceOp op, const void* const* srcs, size_t n,
                              void* dst, size_t count);
/// The conversion kernels' contract: dtype is float16 or bfloat16, src and dst do not overlap.
using ToFloat32Kernel = void (*)(DataType dtype, const void* src, float* dst, size_t count);
using FromFloat32Kernel = void (*)(const float* src, DataType dtype, void* dst, size_t count);
/// SumDequantiseInt8's contract without its argument checks: n >= 1, dtype is float16, bfloat16
/// or float32, quant.channels >= 0, and every pointer is valid for what it covers. `stream`:
/// SumDequantiseInt8Streaming's non-temporal stores (the same bits).
using DequantiseKernel = void (*)(const int8_t* const* srcs, size_t n, size_t count,
                                  int64_t firstElement, const QuantScale& quant, DataType dtype,
                                  void* dst, bool stream);

/// "generic", "avx2", "avx512".
const char* IsaName(Isa isa);
/// Parses an IsaName; false for anything else.
bool ParseIsa(const char* name, Isa* isa);
/// True when this CPU and OS can run that build (avx2 also needs FMA and F16C; avx512 needs the
/// F, BW, VL and DQ subsets).
bool CpuSupportsIsa(Isa isa);
/// The highest Isa that CpuSupportsIsa accepts.
Isa BestSupportedIsa();
/// The kernel built for `isa`, or nullptr when this CPU cannot run it. Tests call these directly to
/// compare the builds bit for bit.
ReduceKernel KernelForIsa(Isa isa);
/// The streaming kernel (ReduceArraysStreaming's) built for `isa`, or nullptr when this CPU cannot
/// run it. The generic build's stores as Reduce does.
ReduceKernel StreamingKernelForIsa(Isa isa);
/// The dequantising sum built for `isa`, or nullptr when this CPU cannot run it.
DequantiseKernel DequantiseKernelForIsa(Isa isa);

// One definition per build, from reduce_kernels.inc.
namespace generic {
void Reduce(DataType dtype, ReduceOp op, const void* const* srcs, size_t n, void* dst,
            size_t count);
void ReduceStreaming(DataType dtype, ReduceOp op, const void* const* srcs, size_t n, void* dst,
                     size_t count);
void ToFloat32(DataType dtype, const void* src, float* dst, size_t count);
void FromFloat32(const float* src, DataType dtype, void* dst, size_t count);
void SumDequantise(const int8_t* const* srcs, size_t n, size_t count, int64_t firstElement,
                   const QuantScale& quant, DataType dtype, void* dst, bool stream);
}  // namespace generic
namespace avx2 {
void Reduce(DataType dtype, ReduceOp op, const void* const* srcs, size_t n, void* dst,
            size_t count);
void ReduceStreaming(DataType dtype, ReduceOp op, const void* const* srcs, size_t n, void* dst,
                     size_t count);
void ToFloat32(DataType dtype, const void* src, float* dst, size_t count);
void FromFloat32(const float* src, DataType dtype, void* dst, size_t count);
void SumDequantise(const int8_t* const* srcs, size_t n, size_t count, int64_t firstElement,
                   const QuantScale& quant, DataType dtype, void* dst, bool stream);
}  // namespace avx2
namespace avx512 {
void Reduce(DataType dtype, ReduceOp op, const void* const* srcs, size_t n, void* dst,
            size_t count);
void ReduceStreaming(DataType dtype, ReduceOp op, const void* const* srcs, size_t n, void* dst,
                     size_t count);
void ToFloat32(DataType dtype, const void* src, float* dst, size_t count);
void FromFloat32(const float* src, DataType dtype, void* dst, size_t count);
void SumDequantise(const int8_t* const* srcs, size_t n, size_t count, int64_t firstElement,
                   const QuantScale& quant, DataType dtype, void* dst, bool stream);
}  // namespace avx512

}  // namespace reduce_internal
}  // namespace collops
