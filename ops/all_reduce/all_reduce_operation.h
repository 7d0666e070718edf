// AllReduceOperation: y = reduce over ranks of x, on every rank.
//
// Inputs: x (any reducible dtype, any shape). Output: y, x's shape and dtype.
// The communicator does the work (lccl: every rank reduces one slice of the elements from all
// ranks' inputs in rank order, then the slices are exchanged), so the result is bit-identical on
// every rank; float16/bfloat16 accumulate in float32 and round once.
#pragma once

#include "collops/operation_base.h"
#include "collops/reduce.h"
#include "ops/all_reduce/all_reduce_param.h"

namespace collops {

class AllReduceOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "AllReduceOperation";
  static void ValidateParam(const AllReduceParam& param);
  explicit AllReduceOperation(const AllReduceParam& param);

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
};

}  // namespace collops
