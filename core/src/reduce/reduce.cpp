// ReduceArrays: argument checks and the choice of kernel build (generic, avx2, avx512).
//
// The choice is made once, from what the CPU supports, lowered by COLLOPS_ISA when set. Every
// build computes bit-identical results (see reduce_kernels.inc), so the choice affects speed only.
#include "collops/reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "collops/environment.h"
#include "collops/status.h"
#include "core/src/reduce/reduce_dispatch.h"

namespace collops {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

namespace {
constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin};
}  // namespace

bool ParseReduceOp(const std::string& name, ReduceOp* op) {
  for (ReduceOp candidate : kReduceOps) {
    if (name == ReduceOpName(candidate)) {
      *op = candidate;
      return true;
    }
  }
  return false;
}

ReduceOp ReduceOpParam(const char* op, const char* field, const std::string& name) {
  ReduceOp parsed = ReduceOp::kSum;
  if (ParseReduceOp(name, &parsed)) return parsed;
  std::string names;
  for (ReduceOp candidate : kReduceOps) {
    names += Concat(names.empty() ? "" : ", ", "\"", ReduceOpName(candidate), "\"");
  }
  Fail(ERROR_INVALID_PARAM, op, ": ", field, " = \"", name, "\" is not one of ", names);
}

bool IsReducibleDtype(DataType dtype) {
  switch (dtype) {
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_INT16:
    case ACL_INT32:
    case ACL_INT64:
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_FLOAT:
    case ACL_DOUBLE:
      return true;
    default:
      return false;
  }
}

const char* ReducibleDtypesText() {
  return "int8, uint8, int16, int32, int64, float16, bfloat16, float32 and float64";
}

namespace reduce_internal {

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool ParseIsa(const char* name, Isa* isa) {
  for (Isa candidate : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (std::strcmp(name, IsaName(candidate)) == 0) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

bool CpuSupportsIsa(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0). F16C from
  // CPUID itself: clang before 15 knows no "f16c" feature string (the fuzz build uses clang).
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return isa == Isa::kGeneric;
#endif
}

Isa BestSupportedIsa() {
  if (CpuSupportsIsa(Isa::kAvx512)) return Isa::kAvx512;
  if (CpuSupportsIsa(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kGeneric;
}

namespace {

/// The build of a kernel for `isa` among its three, or nullptr when this CPU cannot run it.
template <class Kernel>
Kernel ForIsa(Isa isa, Kernel generic, Kernel avx2, Kernel avx512) {
  if (!CpuSupportsIsa(isa)) return nullptr;
  switch (isa) {
    case Isa::kGeneric:
      return generic;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx512;
  }
  return nullptr;
}

}  // namespace

ReduceKernel KernelForIsa(Isa isa) {
  return ForIsa<ReduceKernel>(isa, &generic::Reduce, &avx2::Reduce, &avx512::Reduce);
}

ReduceKernel StreamingKernelForIsa(Isa isa) {
  return ForIsa<ReduceKernel>(isa, &generic::ReduceStreaming, &avx2::ReduceStreaming,
                              &avx512::ReduceStreaming);
}

DequantiseKernel DequantiseKernelForIsa(Isa isa) {
  return ForIsa<DequantiseKernel>(isa, &generic::SumDequantise, &avx2::SumDequantise,
                                  &avx512::SumDequantise);
}

namespace {

struct Selection {
  Isa isa;
  ReduceKernel kernel;
  ReduceKernel streaming;
  ToFloat32Kernel toFloat32;
  FromFloat32Kernel fromFloat32;
  DequantiseKernel dequantise;
};

Selection KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return {isa,
              &avx2::Reduce,
              &avx2::ReduceStreaming,
              &avx2::ToFloat32,
              &avx2::FromFloat32,
              &avx2::SumDequantise};
    case Isa::kAvx512:
      return {isa,
              &avx512::Reduce,
              &avx512::ReduceStreaming,
              &avx512::ToFloat32,
              &avx512::FromFloat32,
              &avx512::SumDequantise};
    case Isa::kGeneric:
      break;
  }
  return {Isa::kGeneric,       &generic::Reduce,      &generic::ReduceStreaming,
          &generic::ToFloat32, &generic::FromFloat32, &generic::SumDequantise};
}

Selection Select() {
  Isa isa = BestSupportedIsa();
  // A typo would silently benchmark the wrong kernels: KnobWord refuses it, naming the knob.
  const std::string forced = KnobWord("COLLOPS_ISA", "");
  Isa requested;
  if (!forced.empty() && ParseIsa(forced.c_str(), &requested) &&
      static_cast<int>(requested) < static_cast<int>(isa)) {
    isa = requested;  // Only lower: a higher ISA than the CPU has would crash.
  }
  return KernelsFor(isa);
}

// Resolved on first use rather than by a namespace-scope initialiser, so that static initialisers
// of other files that reduce (none should, but ops register statically) cannot see it unset.
const Selection& Selected() {
  static const Selection selection = Select();
  return selection;
}

bool Overlaps(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

}  // namespace
}  // namespace reduce_internal

namespace {

/// ReduceArrays' argument checks (its contract in collops/reduce.h); false when there is nothing
/// to do (count == 0).
bool CheckReduceArguments(DataType dtype, ReduceOp op, const void* const* srcs, size_t n,
                          const void* dst, size_t count) {
  using reduce_internal::Overlaps;
  if (!IsReducibleDtype(dtype)) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, "reduction does not support dtype ", DataTypeName(dtype),
         "; it accepts ", ReducibleDtypesText());
  }
  if (static_cast<uint32_t>(op) > static_cast<uint32_t>(ReduceOp::kMin)) {
    Fail(ERROR_INTERNAL_ERROR, "ReduceArrays: unknown reduce op ", static_cast<int32_t>(op));
  }
  if (n < 1) Fail(ERROR_INTERNAL_ERROR, "ReduceArrays: needs at least 1 input, got n = 0");
  if (count == 0) return false;
  if (srcs == nullptr || dst == nullptr) {
    Fail(ERROR_INTERNAL_ERROR, "ReduceArrays: null ", srcs == nullptr ? "srcs" : "dst",
         " with count = ", count);
  }
  const size_t bytes = count * DataTypeSize(dtype);
  for (size_t k = 0; k < n; ++k) {
    if (srcs[k] == nullptr) Fail(ERROR_INTERNAL_ERROR, "ReduceArrays: srcs[", k, "] is null");
    // The kernels write a block of dst after reading that block of every source, which is safe
    // for dst == srcs[k] but not for a shifted overlap.
    if (srcs[k] != dst && Overlaps(srcs[k], dst, bytes)) {
      Fail(ERROR_INTERNAL_ERROR, "ReduceArrays: dst partially overlaps srcs[", k, "]");
    }
  }
  return true;
}

}  // namespace

void ReduceArrays(DataType dtype, ReduceOp op, const void* const* srcs, size_t n, void* dst,
                  size_t count) {
  if (!CheckReduceArguments(dtype, op, srcs, n, dst, count)) return;
  reduce_internal::Selected().kernel(dtype, op, srcs, n, dst, count);
}

void ReduceArraysStreaming(DataType dtype, ReduceOp op, const void* const* srcs, size_t n,
                           void* dst, size_t count) {
  if (!CheckReduceArguments(dtype, op, srcs, n, dst, count)) return;
  reduce_internal::Selected().streaming(dtype, op, srcs, n, dst, count);
}

namespace {

bool IsHalfFloat(DataType dtype) { return dtype == ACL_FLOAT16 || dtype == ACL_BF16; }

void CheckConversion(const char* what, DataType dtype, const void* src, size_t srcElement,
                     const void* dst, size_t dstElement, size_t count) {
  if (dtype != ACL_FLOAT16 && dtype != ACL_BF16 && dtype != ACL_FLOAT) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, what, ": converts float16, bfloat16 and float32, not ",
         DataTypeName(dtype));
  }
  if (count == 0) return;
  if (src == nullptr || dst == nullptr) {
    Fail(ERROR_INTERNAL_ERROR, what, ": null ", src == nullptr ? "src" : "dst",
         " with count = ", count);
  }
  // float32 to float32 may be in place; any other overlap would read what was written.
  const auto s = reinterpret_cast<uintptr_t>(src);
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const bool overlap = s < d + count * dstElement && d < s + count * srcElement;
  if (overlap && !(src == dst && dtype == ACL_FLOAT)) {
    Fail(ERROR_INTERNAL_ERROR, what, ": src and dst overlap");
  }
}

}  // namespace

void ConvertToFloat32(DataType srcType, const void* src, float* dst, size_t count) {
  CheckConversion("ConvertToFloat32", srcType, src, DataTypeSize(srcType), dst, sizeof(float),
                  count);
  if (count == 0) return;
  if (!IsHalfFloat(srcType)) {
    if (src != dst) std::memcpy(dst, src, count * sizeof(float));
    return;
  }
  reduce_internal::Selected().toFloat32(srcType, src, dst, count);
}

void ConvertFromFloat32(const float* src, DataType dstType, void* dst, size_t count) {
  CheckConversion("ConvertFromFloat32", dstType, src, sizeof(float), dst, DataTypeSize(dstType),
                  count);
  if (count == 0) return;
  if (!IsHalfFloat(dstType)) {
    if (src != dst) std::memcpy(dst, src, count * sizeof(float));
    return;
  }
  reduce_internal::Selected().fromFloat32(src, dstType, dst, count);
}

namespace {

/// SumDequantiseInt8's argument checks; false when there is nothing to do.
bool CheckDequantiseArguments(const int8_t* const* srcs, size_t n, size_t count,
                              const QuantScale& quant, DataType dtype, const void* dst) {
  if (dtype != ACL_FLOAT16 && dtype != ACL_BF16 && dtype != ACL_FLOAT) {
    Fail(ERROR_INVALID_TENSOR_DTYPE,
         "the dequantising sum writes float16, bfloat16 or float32, not ", DataTypeName(dtype));
  }
  if (n < 1) Fail(ERROR_INTERNAL_ERROR, "SumDequantiseInt8: needs at least 1 input, got n = 0");
  if (quant.channels < 0) {
    Fail(ERROR_INTERNAL_ERROR, "SumDequantiseInt8: channels = ", quant.channels, " < 0");
  }
  if (count == 0) return false;
  if (srcs == nullptr || dst == nullptr || quant.scale == nullptr) {
    Fail(ERROR_INTERNAL_ERROR, "SumDequantiseInt8: null ",
         srcs == nullptr  ? "srcs"
         : dst == nullptr ? "dst"
                          : "scale",
         " with count = ", count);
  }
  for (size_t k = 0; k < n; ++k) {
    if (srcs[k] == nullptr) Fail(ERROR_INTERNAL_ERROR, "SumDequantiseInt8: srcs[", k, "] is null");
  }
  return true;
}

}  // namespace

void SumDequantiseInt8(const int8_t* const* srcs, size_t n, size_t count, int64_t firstElement,
                       const QuantScale& quant, DataType dtype, void* dst) {
  if (!CheckDequantiseArguments(srcs, n, count, quant, dtype, dst)) return;
  reduce_internal::Selected().dequantise(srcs, n, count, firstElement, quant, dtype, dst, false);
}

void SumDequantiseInt8Streaming(const int8_t* const* srcs, size_t n, size_t count,
                                int64_t firstElement, const QuantScale& quant, DataType dtype,
                                void* dst) {
  if (!CheckDequantiseArguments(srcs, n, count, quant, dtype, dst)) return;
  reduce_internal::Selected().dequantise(srcs, n, count, firstElement, quant, dtype, dst, true);
}

const char* ReduceKernelIsa() { return reduce_internal::IsaName(reduce_internal::Selected().isa); }

}  // namespace collops
