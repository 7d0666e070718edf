// AllReduceOperation: y = reduce over ranks of x, on every rank.
//
// Plain (quantType 0): x of any reducible dtype and shape -> y of x's shape and dtype. The
// communicator does the work (lccl: every rank reduces one slice of the elements from all ranks'
// inputs in rank order, then the slices are exchanged), so the result is bit-identical on every
// rank; float16/bfloat16 accumulate in float32 and round once.
//
// Quantised (quantType 1 per tensor, 2 per channel): x int8 [..., n], scale float16, offset
// float16 [1] -> y of outDataType, x's shape, y = (Σ_r x_r + R·offset)·scale, with int8 on the
// wire (quant_all_reduce.h holds the rules and algorithms).
#pragma once

#include <string>

#include "collops/operation_base.h"
#include "collops/reduce.h"
#include "ops/all_reduce/all_reduce_param.h"
#include "ops/all_reduce/quant_all_reduce.h"

namespace collops {

class AllReduceOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "AllReduceOperation";
  static void ValidateParam(const AllReduceParam& param);
  explicit AllReduceOperation(const AllReduceParam& param);

 private:
  bool Quantised() const { return quantType_ != AllReduceParam::QUANT_TYPE_UNQUANT; }
  /// This call (quantised, R > 1) runs as `comm`'s own AllReduceQuantised, which needs no
  /// workspace, rather than from its primitives (quant_all_reduce.h).
  bool EngineQuantises(const Communicator& comm) const;
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  void PrepareImpl(const VariantPack& pack) override;
  uint64_t WorkspaceSizeImpl(const VariantPack& pack) const override;
  InPlaceForm InPlaceFormImpl(const VariantPack& pack) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  ReduceOp reduceOp_;
  /// "<op>/<reduction>", the name its calls agree on (signature.h), built once: not per call.
  std::string signatureName_;
  int quantType_;
  DataType outDtype_;
  QuantAlgo quantAlgo_;           ///< from COLLOPS_ALGO_QUANTALLREDUCE, read at creation
  QuantAllReducePlan quantPlan_;  ///< this call's plan (PrepareImpl)
};

}  // namespace collops
