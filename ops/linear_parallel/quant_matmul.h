// The int8 product of a W8A8 (quantised) LinearParallelOperation:
//   out[i, j] (float32) = (sum_t x[i, t] * W[t, j] + bias[j]) * scale[j] * tokenScale[i]
// with x and W int8 (W = weight^T for a weight [n, k] under transWeight, else the weight [k, n]),
// the sum exact in int32, bias int32 [n] (optional), scale float32 (one for every column, or one
// per column) and tokenScale float32 per row (optional: PER_TOKEN).
//
// It is oneDNN's int8 matmul (s8 x s8 with the bias, int32 sums; its brgemm kernels, VNNI dot
// products), whose int32 sums are then scaled into float32 in place. The weight is read where it
// lies, in its stored layout, by every Run (the brgemm kernels copy it as they go); nothing
// derived from it is kept between calls, so whatever was written to it last is what is
// multiplied. Repacking it into oneDNN's layout first is a pass of its own that costs many times
// the product at small row counts (docs/performance.md). Built without oneDNN, every product throws
// ERROR_BACKEND_UNAVAILABLE (Matmul::UnavailableReason()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace collops {

class QuantMatmul {
 public:
  struct Shape {
    int64_t k = 0;
    int64_t n = 0;
    bool transWeight = true;
    bool perChannel = false;  ///< scale holds n values, else one
    bool hasBias = false;
    bool perToken = false;  ///< Run gets a scale per row
  };

  explicit QuantMatmul(const Shape& shape);
  ~QuantMatmul();
  QuantMatmul(const QuantMatmul&) = delete;
  QuantMatmul& operator=(const QuantMatmul&) = delete;

  const Shape& shape() const;
  /// This call's weight, bias (null without hasBias) and scale; they must outlive the Runs.
  void Bind(const int8_t* weight, const int32_t* bias, const float* scale);
  /// out[rows, n] for x[rows, k] (dense rows) and tokenScale[rows] (perToken), with `threads`
  /// OpenMP threads; the calling thread's OpenMP setting is restored afterwards.
  void Run(const int8_t* x, int64_t rows, const float* tokenScale, float* out, int threads);
  /// oneDNN's name of the kernel the product runs for `rows` rows, e.g. "brg:avx512_core_vnni".
  std::string Implementation(int64_t rows);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collops
