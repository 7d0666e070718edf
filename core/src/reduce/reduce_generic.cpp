// Baseline (x86-64 SSE2, or any other target) build of the reduction kernels; always available.
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
}  // namespace generic
}  // namespace reduce_internal
}  // namespace collops
