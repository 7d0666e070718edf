// ReduceScatterOperation: y = (reduce over ranks of x)[rank·n : (rank+1)·n], rows of dim 0.
//
// Inputs: x [R·n, ...] (any reducible dtype, 1 to 8 dims). Output: y [n, ...], x's dtype.
// InferShape rejects a dim 0 that rankSize does not divide with ERROR_INVALID_TENSOR_DIM (ATB's
// code), so the rule surfaces from InferShape as well as from Setup.
// Execute is the equal-count case of the communicator's ReduceScatterV: every rank sends n·inner
// elements to rank j from element offset j·n·inner of its x, and receives n·inner reduced
// elements (inner = product of the dims after dim 0). The communicator reduces in rank order,
// float16/bfloat16 accumulating in float32, so every rank's slice is bit-identical to the
// matching slice of an AllReduce of the same inputs. Ranks must agree on the reduce type, dtype
// and x.numel() (checked across ranks before any data moves).
#pragma once

#include <string>
#include <vector>

#include "collops/operation_base.h"
#include "collops/reduce.h"
#include "ops/reduce_scatter/reduce_scatter_param.h"

namespace collops {

class ReduceScatterOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "ReduceScatterOperation";
  /// Checks the communication params and reduceType; no communication.
  static void ValidateParam(const ReduceScatterParam& param);
  explicit ReduceScatterOperation(const ReduceScatterParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  InPlaceForm InPlaceFormImpl(const VariantPack& pack) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  ReduceOp reduceOp_;
  /// "<op>/<reduction>", the name its calls agree on (signature.h), built once: not per call.
  std::string signatureName_;
};

}  // namespace collops
