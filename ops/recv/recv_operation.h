// RecvOperation: receives into y the message that rank srcRank sends with a SendOperation whose
// destRank is this rank.
//
// Inputs: template (any movable dtype, any shape; only its desc is used: it sizes y).
// Outputs: y, template's shape and dtype.
// As for Send, only the pair takes part, so there is no all-rank signature exchange: the
// communicator compares the sender's count and dtype with y's, and on disagreement both sides
// throw ERROR_RANK_MISMATCH (y is left untouched). When they agree y is filled from the
// sender's x before Execute returns. A Recv that fails its own checks runs a refusal in place of
// its receive (RefusalsImpl), so the sender fails at once naming this rank.
#pragma once

#include "collops/operation_base.h"
#include "ops/recv/recv_param.h"

namespace collops {

class RecvOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "RecvOperation";
  static void ValidateParam(const RecvParam& param);
  explicit RecvOperation(const RecvParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  std::vector<PointToPoint> RefusalsImpl(Status status) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;

  int srcRank_;
};

}  // namespace collops
