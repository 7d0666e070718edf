// Baseline (x86-64 SSE2, or any other target) build of the reduction kernels; always available.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/src/reduce/half.h"
#include "core/src/reduce/reduce_dispatch.h"

namespace collops {
namespace reduce_internal {
namespace generic {
#include "core/src/reduce/reduce_kernels.inc"
// After reduce_kernels.inc: it uses kBlock and Fixed from there.
#include "core/src/reduce/dequantise_kernels.inc"
}  // namespace generic
}  // namespace reduce_internal
}  // namespace collops
