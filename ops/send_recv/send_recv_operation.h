// SendRecvOperation: sends x to rank destRank and receives y from rank srcRank in one step, as
// MPI_Sendrecv or a NCCL group of ncclSend + ncclRecv. The pair of messages runs as one
// Communicator::Exchange group, so the two directions move at the same time and no order of the
// peers' calls deadlocks: a ring (destRank = rank + 1, srcRank = rank - 1: halo exchange, ring
// attention, pipeline hand-over) needs no even/odd ordering, and a pair swap (destRank ==
// srcRank) works as well. destRank's peer may run a RecvOperation or a SendRecvOperation whose
// srcRank is this rank; srcRank's peer a SendOperation or a SendRecvOperation.
//
// Inputs: x (any movable dtype, any shape). Outputs: y, x's shape and dtype.
// As for Send/Recv there is no all-rank signature exchange: each channel's two ranks compare
// count and dtype, and on disagreement both throw ERROR_RANK_MISMATCH; y is untouched by a
// refused message, while the other direction of the group still completes. y may not overlap x
// (the peer may read x while y is written): such a call is ERROR_INVALID_PARAM. A call that fails
// its own checks runs a refusal in place of each direction (RefusalsImpl), so both peers fail at
// once naming this rank.
#pragma once

#include "collops/operation_base.h"
#include "ops/send_recv/send_recv_param.h"

namespace collops {

class SendRecvOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "SendRecvOperation";
  static void ValidateParam(const SendRecvParam& param);
  explicit SendRecvOperation(const SendRecvParam& param);

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
  int srcRank_;
};

}  // namespace collops
