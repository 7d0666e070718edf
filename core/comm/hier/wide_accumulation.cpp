#include "core/comm/hier/wide_accumulation.h"

#include <cstdint>

#include "core/src/reduce/half.h"

namespace collops {
namespace hier {

using namespace half_internal;  // NOLINT: the conversion helpers

bool NeedsWideAccumulation(DataType dtype, ReduceOp op) {
  return (dtype == ACL_FLOAT16 || dtype == ACL_BF16) &&
         (op == ReduceOp::kSum || op == ReduceOp::kProd);
}

void Widen(DataType dtype, const void* src, float* dst, size_t count) {
  const auto* bits = static_cast<const uint16_t*>(src);
  if (dtype == ACL_FLOAT16) {
    HalfToFloatBlock(bits, dst, count);
  } else {
    Bf16ToFloatBlock(bits, dst, count);
  }
}

void Narrow(DataType dtype, const float* src, void* dst, size_t count) {
  auto* bits = static_cast<uint16_t*>(dst);
  if (dtype == ACL_FLOAT16) {
    FloatToHalfBlock(src, bits, count);
  } else {
    FloatToBf16Block(src, bits, count);
  }
}

}  // namespace hier
}  // namespace collops
