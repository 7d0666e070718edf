#include "ops/linear_parallel/weight_antiquant.h"

#include <vector>

#include "collops/reduce.h"
#include "ops/linear_parallel/linear_parallel_param.h"

namespace collops {

void AntiquantWeight(const AntiquantLayout& layout, const int8_t* weight, DataType dtype,
                     const void* offset, const void* scale, void* out, int threads) {
  const int64_t k = layout.k, n = layout.n;
  if (k == 0 || n == 0) return;
  // The factors' shape: [1], [n], or the groups [n, k / G] (transWeight) / [k / G, n].
  const int64_t groups = layout.quantType == LINEAR_QUANT_PER_GROUP ? k / layout.groupSize : 1;
  const int64_t count = layout.quantType == LINEAR_QUANT_PER_TENSOR ? 1 : n * groups;
  std::vector<float> scales(count), offsets(count, 0.0f);
  ConvertToFloat32(dtype, scale, scales.data(), static_cast<size_t>(count));
  if (offset != nullptr)
    ConvertToFloat32(dtype, offset, offsets.data(), static_cast<size_t>(count));
  // The stored weight is `outer` rows of `inner` values: [n, k] or [k, n].
  const int64_t outer = layout.transWeight ? n : k;
  const int64_t inner = layout.transWeight ? k : n;
  auto factorAt = [&](int64_t row, int64_t col) -> int64_t {
    const int64_t j = layout.transWeight ? row : col;  // output channel
    const int64_t t = layout.transWeight ? col : row;  // position along k
    switch (layout.quantType) {
      case LINEAR_QUANT_PER_TENSOR:
        return 0;
      case LINEAR_QUANT_PER_GROUP:
        return layout.transWeight ? j * groups + t / layout.groupSize
                                  : (t / layout.groupSize) * n + j;
      default:
        return j;
    }
  };
  const size_t outRow = static_cast<size_t>(inner) * DataTypeSize(dtype);
#if defined(__SANITIZE_THREAD__)
  threads = 1;  // as the products (dnnl_runtime.h): ThreadSanitizer cannot see OpenMP's ordering
#endif
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads < 1 ? 1 : threads)
#endif
  {
    std::vector<float> row(static_cast<size_t>(inner));
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
    for (int64_t r = 0; r < outer; ++r) {
      const int8_t* w = weight + r * inner;
      for (int64_t c = 0; c < inner; ++c) {
        const int64_t f = factorAt(r, c);
        row[c] = (static_cast<float>(w[c]) + offsets[f]) * scales[f];
      }
      ConvertFromFloat32(row.data(), dtype, static_cast<uint8_t*>(out) + r * outRow,
                         static_cast<size_t>(inner));
    }
  }
}

}  // namespace collops
