// The int8 product of a W8A8 (quantised) LinearParallelOperation:
//   out[i, j] (float32) = (sum_t x[i, t] * W[t, j] + bias[j]) * scale[j] * tokenScale[i]
// with x and W int8 (W = weight^T for a weight [n, k] under transWeight, else the weight [k, n]),
// the sum exact in int32, bias int32 [n] (optional), scale float32 (one for every column, or one
// per column) and tokenScale float32 per row (optional: PER_TOKEN).
//
// It is oneDNN's int8 matmul (s8 x s8 with the bias, int32 sums; its brgemm kernels, VNNI dot
// products), whose int32 sums are then scaled into float32 in place. The weight is taken where it
// lies, in its stored layout, which the brgemm kernels copy as they go; a weight bound with the
// same nonzero id (tensor.h's contentId) as the Bind before is repacked once into the layout
// oneDNN chose for it and reused while the id repeats (docs/performance.md has the costs that
// decided this: repacking is a slow pass of its own, done only for a weight that stays). Built
// without oneDNN, every product throws ERROR_BACKEND_UNAVAILABLE (Matmul::UnavailableReason()).
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
  /// `weightId` is the weight's contentId (0: unknown): the same nonzero id as the previous
  /// Bind's promises the same bytes, and the product then runs on the repacked weight.
  void Bind(const int8_t* weight, uint64_t weightId, const int32_t* bias, const float* scale);
  /// out[rows, n] for x[rows, k] (dense rows) and tokenScale[rows] (perToken), with `threads`
  /// OpenMP threads; the calling thread's OpenMP setting is restored afterwards.
  void Run(const int8_t* x, int64_t rows, const float* tokenScale, float* out, int threads);
  /// oneDNN's name of the kernel the bound weight's product runs for `rows` rows, e.g.
  /// "brg:avx512_core_vnni".
  std::string Implementation(int64_t rows);
  /// How many times this object repacked a weight (tests count them).
  uint64_t WeightPacks() const;
  /// The same over every QuantMatmul of this process (tests from Python count them).
  static uint64_t WeightPacksInProcess();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collops
