// SendOperation: sends x to rank destRank, which must run a RecvOperation with srcRank = this rank
// and a template of the same element count and dtype.
//
// Inputs: x (any movable dtype, any shape). Outputs: none.
// There is no all-rank signature exchange: only the two ranks of the pair take part, so the
// communicator checks the pair itself (lccl: the Send posts pointer, count and dtype; the Recv
// copies straight from x when both sides agree, and otherwise both sides throw
// ERROR_RANK_MISMATCH naming both ranks and both counts). Execute returns once the receiver has
// taken the message, so x may be reused immediately. A Send that fails its own checks runs a
// refusal in place of its message (RefusalsImpl), so the receiver fails at once naming this rank.
#pragma once

#include "collops/operation_base.h"
#include "ops/send/send_param.h"

namespace collops {

class SendOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "SendOperation";
  static void ValidateParam(const SendParam& param);
  explicit SendOperation(const SendParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  std::vector<PointToPoint> RefusalsImpl(Status status) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  int destRank_;
};

}  // namespace collops
