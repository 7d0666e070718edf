// The matrix product of LinearParallelOperation: out[rows, n] (float32) = x[rows, k] . W, where W
// is weight^T for a weight [n, k] (transWeight) or the weight itself for [k, n].
//
// It comes from oneDNN's matmul primitive (Debian's libdnnl), which picks its kernel for the CPU
// at run time: bfloat16 x bfloat16 -> float32 runs on AVX512-BF16 dot products where the CPU has
// them; float32 on AVX-512 or AVX2. Products accumulate in float32 and land in float32 (Run).
// Where oneDNN has no kernel for the input dtype on this CPU (float16 without AVX512-FP16;
// bfloat16 on AVX2-only CPUs), x and the weight are widened to float32 first (exactly) and the
// float32 product runs instead.
//
// Where the next step takes the product in the inputs' dtype (a rank's partial that the ranks sum
// in y's dtype, or y itself with nothing but the rounding left), oneDNN can write it so (RunInto):
// the float32 accumulators are rounded once in its kernel, as ConvertFromFloat32 would round them,
// without a float32 copy and a second pass over it.
//
// Each product runs with a scratchpad this object owns (oneDNN's user scratchpad mode), so no
// product allocates; one Matmul therefore runs one product at a time.
//
// Built without oneDNN (CMake found no libdnnl), Available() is false and every product throws
// ERROR_BACKEND_UNAVAILABLE saying so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "collops/tensor.h"

namespace collops {

class Matmul {
 public:
  /// Whether collops was built with oneDNN.
  static bool Available();
  /// Why not, with the fix, for messages; "" when Available().
  static const char* UnavailableReason();
  /// The OpenMP threads the calling thread's parallel regions would use (torch's intra-op
  /// threads inside a torch process: both share one OpenMP runtime); 1 without oneDNN.
  static int CallerThreads();

  /// A product with inputs of `dtype` (float16, bfloat16, float32), inner size k and n columns.
  /// Throws ERROR_BACKEND_UNAVAILABLE without oneDNN.
  Matmul(DataType dtype, int64_t k, int64_t n, bool transWeight);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  /// True when x and the weight are widened to float32 before the product (see above).
  bool Widens() const;
  /// Scratch bytes Bind needs for products of at most `maxRows` rows (0 when !Widens()).
  uint64_t ScratchBytes(int64_t maxRows) const;
  /// Binds this call's weight and scratch (ScratchBytes(maxRows) bytes, 64-byte aligned is best):
  /// widens the weight into it when Widens(). Run may then be called for up to maxRows rows.
  void Bind(const void* weight, uint8_t* scratch, int threads);
  /// out[rows, n] = x[rows, k] . W with `threads` OpenMP threads; x and out are dense rows. The
  /// calling thread's OpenMP setting is restored afterwards.
  void Run(const void* x, int64_t rows, float* out, int threads);
  /// Whether RunInto can write products in `outDtype` directly: float32, or the inputs' dtype
  /// where oneDNN multiplies that dtype without widening and has a kernel writing it.
  bool WritesDirectly(DataType outDtype) const;
  /// out[rows, n] = x[rows, k] . W rounded once to `outDtype` (WritesDirectly(outDtype)).
  void RunInto(const void* x, int64_t rows, void* out, DataType outDtype, int threads);
  /// oneDNN's name of the kernel it chose, e.g. "brg:avx512_core_bf16".
  std::string Implementation(int64_t rows, DataType outDtype = ACL_FLOAT);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collops
