// QuantMatmul without oneDNN (CMake did not find libdnnl): every product throws
// ERROR_BACKEND_UNAVAILABLE, as Matmul does.
#include "collops/status.h"
#include "ops/linear_parallel/matmul.h"
#include "ops/linear_parallel/quant_matmul.h"

namespace collops {

struct QuantMatmul::Impl {
  Shape shape;
};

QuantMatmul::QuantMatmul(const Shape&) {
  Fail(ERROR_BACKEND_UNAVAILABLE, Matmul::UnavailableReason());
}
QuantMatmul::~QuantMatmul() = default;
const QuantMatmul::Shape& QuantMatmul::shape() const { return impl_->shape; }
void QuantMatmul::Bind(const int8_t*, const int32_t*, const float*) {}
void QuantMatmul::Run(const int8_t*, int64_t, const float*, float*, int) {}
std::string QuantMatmul::Implementation(int64_t) { return "none"; }

}  // namespace collops
