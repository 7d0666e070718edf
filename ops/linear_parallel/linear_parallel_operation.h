// LinearParallelOperation: the linear layer of tensor parallelism, a matrix product fused with
// its collective (ATB's LinearParallelOperation).
//
// Inputs: x [m, k] or [b, m, k] (M = m or b * m rows), weight [n, k] (transWeight) or [k, n],
// residual [n] (hasResidual); float16, bfloat16 or float32, all of one dtype; with quantType an
// int8 weight and its bias and scale (linear_parallel_quant.h: W8A8 and W8A16). Output y
// (outDataType, default x's dtype), and for ALL_GATHER_LINEAR with keepIntermediate the gathered x.
//   LINEAR_ALL_REDUCE      y [.., n]          = sum over ranks of x_r . W_r + residual
//   LINEAR_REDUCE_SCATTER  y [dim0 / R, .., n] = this rank's dim0 block of that sum + residual
//   ALL_GATHER_LINEAR      y [R * dim0, .., n] = (x_0; ..; x_{R-1}) . W + residual
//   PURE_LINEAR            y [.., n]          = x . W + residual (no communication)
//   AG_LINEAR_RS           y [dim0 * agDim / rsDim, .., n] = this rank's block of the sum over its
//                          ReduceScatter group of (x gathered over its AllGather group) . W, +
//                          residual (the grid: LinearParallelTwoDimTPInfo; two_dim_tp.h)
// where W = weight^T for transWeight. The product (matmul.h, oneDNN) accumulates in float32.
// Types that sum over ranks (0, 1, 4) do what ATB's graph does (Linear -> AllReduce -> Add): each
// rank's partial product is rounded once to y's dtype (oneDNN writes it so where it multiplies
// that dtype, else the float32 product is rounded), the collective moves and sums y's dtype
// (float16/bfloat16 accumulate in float32 and round once, the same bits on every rank), and the
// residual is added after it, y = round(y + residual). With a float32 y, and for the quantised
// forms, the partials stay float32 and y is rounded once after the residual. Types 2 and 3 add
// the residual to the float32 product and round y once; PURE_LINEAR without residual has nothing
// between the product and y but that rounding, so oneDNN writes y in its dtype itself where it
// multiplies that dtype.
//
// Overlap: the rows are cut in chunks, and the product of chunk c + 1 runs on a helper thread
// while the collective of chunk c moves data (chunk_pipeline.h); for ALL_GATHER_LINEAR the gather
// of chunk c + 1 runs while chunk c is multiplied. ChunkCount (the .cpp) decides; auto is serial
// (docs/performance.md has the sizes that decided it), and COLLOPS_ALGO_LINEARPARALLEL=overlap
// cuts 4 chunks.
#pragma once

#include <memory>
#include <string>

#include "collops/operation_base.h"
#include "ops/linear_parallel/linear_parallel_param.h"
#include "ops/linear_parallel/linear_parallel_quant.h"
#include "ops/linear_parallel/matmul.h"
#include "ops/linear_parallel/quant_matmul.h"

namespace collops {

class LinearParallelOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "LinearParallelOperation";
  static void ValidateParam(const LinearParallelParam& param);
  explicit LinearParallelOperation(const LinearParallelParam& param);
  ~LinearParallelOperation() override;

  /// This call's sizes and workspace layout, from PrepareImpl.
  struct Plan {
    DataType dtype = ACL_DT_UNDEFINED;     ///< of x (and the float product's inputs)
    DataType outDtype = ACL_DT_UNDEFINED;  ///< of y
    DataType residualDtype = ACL_DT_UNDEFINED;
    LinearQuantForm form = LinearQuantForm::kNone;
    int64_t rows = 0;  ///< rows of x (M)
    int64_t k = 0;
    int64_t n = 0;
    int64_t blockRows =
        0;  ///< rows of this rank's y: M / R (RS), agDim * M / rsDim (AG_LINEAR_RS), else M
    int chunks = 1;       ///< row chunks of a block (1: no overlap)
    int threads = 1;      ///< OpenMP threads of each product
    bool direct = false;  ///< PURE_LINEAR without residual: oneDNN writes y in its dtype
    /// What the product lands in: y's dtype where ranks sum rounded partials (types 0, 1, 4
    /// with a float16/bfloat16 y, unquantised), else float32.
    DataType productDtype = ACL_FLOAT;
    uint64_t accOffset = 0, accBytes = 0;  ///< products in productDtype (0 bytes: into y)
    uint64_t scatteredOffset = 0, scatteredBytes = 0;  ///< AG_LINEAR_RS's received blocks
    uint64_t roundOffset = 0, roundBytes = 0;  ///< float32 rows rounded to productDtype after
    int64_t roundRows = 0;                     ///< the rows roundBytes holds
    uint64_t residualRowOffset = 0, residualRowBytes = 0;  ///< a float32 row of y (see .cpp)
    uint64_t gatheredOffset = 0, gatheredBytes = 0;        ///< AG's gathered x (0: intermediate)
    uint64_t residualOffset = 0, residualBytes = 0;        ///< residual as float32 (0: as given)
    uint64_t matmulOffset = 0, matmulBytes = 0;            ///< Matmul's widening scratch
    uint64_t antiquantOffset = 0, antiquantBytes = 0;      ///< W8A16's dequantised weight
    uint64_t workspaceBytes = 0;
  };

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  void PrepareImpl(const VariantPack& pack) override;
  uint64_t WorkspaceSizeImpl(const VariantPack& pack) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  /// Refuses an output that overlaps any input: the product reads the inputs while chunks of y
  /// are written.
  void CheckNoOverlap(const VariantPack& pack) const;
  int ChunkCount(int64_t blockRows) const;
  std::string TypeName() const;

  /// Binds this call's weight (dequantised first for W8A16) to the product of plan_'s form.
  void BindProduct(const VariantPack& pack, uint8_t* workspace, int threads);

  LinearParallelParam param_;
  Plan plan_;
  std::unique_ptr<Matmul> matmul_;  ///< for plan_'s dtype, k, n (made again when they change)
  std::unique_ptr<QuantMatmul> quantMatmul_;  ///< W8A8's, likewise
};

}  // namespace collops
