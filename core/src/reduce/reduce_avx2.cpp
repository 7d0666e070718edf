// AVX2 build of the reduction kernels. CMakeLists.txt compiles files ending in _avx2.cpp with
// -mavx2 -mfma -mf16c; reduce.cpp calls into it only when the CPU has all three.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if !defined(__AVX2__) || !defined(__F16C__)
#error "reduce_avx2.cpp must be compiled with -mavx2 -mfma -mf16c (see CMakeLists.txt)"
#endif

#include "core/src/reduce/half.h"
#include "core/src/reduce/reduce_dispatch.h"

namespace collops {
namespace reduce_internal {
namespace avx2 {
#include "core/src/reduce/reduce_kernels.inc"
// After reduce_kernels.inc: it uses kBlock and Fixed from there.
#include "core/src/reduce/dequantise_kernels.inc"
}  // namespace avx2
}  // namespace reduce_internal
}  // namespace collops
