// AVX-512 build of the reduction kernels. CMakeLists.txt compiles files ending in _avx512.cpp with
// -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c; reduce.cpp calls into it only
// when the CPU and OS support all of them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__F16C__)
#error "reduce_avx512.cpp must be compiled with -mavx512f -mavx512bw ... (see CMakeLists.txt)"
#endif

#include "core/src/reduce/half.h"
#include "core/src/reduce/reduce_dispatch.h"

namespace collops {
namespace reduce_internal {
namespace avx512 {
#include "core/src/reduce/reduce_kernels.inc"
// After reduce_kernels.inc: it uses kBlock and Fixed from there.
#include "core/src/reduce/dequantise_kernels.inc"
}  // namespace avx512
}  // namespace reduce_internal
}  // namespace collops
