// AllGatherVOperation: every rank gathers an uneven number of elements from every rank.
//
// Inputs: x (any movable dtype, dims >= 1), sendCount [1], recvCounts [R], rdispls [R] (int64
// host counts, in elements) and y_shape (any dtype; only its dim 0, m, is read). Output: out,
// x's shape with dim 0 replaced by m, x's dtype.
//   out.flat[rdispls[i] : +recvCounts[i]] = x_i.flat[0 : recvCounts[i]]; every other element is 0.
// Setup and Execute check, with no communication, that 0 <= sendCount <= x.numel(), that the
// vectors have R non-negative entries, that every range fits in out (overflow-safe) and that
// recvCounts[rank] == sendCount. Execute then checks across ranks that rank j's recvCounts[i]
// equals rank i's sendCount (ERROR_RANK_MISMATCH on every rank otherwise), calls the
// communicator's AllGatherV (which copies this rank's own slice first, then each peer's) and
// finally zeroes the parts of out that no range covers.
#pragma once

#include "collops/operation_base.h"
#include "ops/all_gather_v/all_gather_v_param.h"

namespace collops {

class AllGatherVOperation final : public OperationBase {
 public:
  static constexpr const char* kName = "AllGatherVOperation";
  static void ValidateParam(const AllGatherVParam& param);
  explicit AllGatherVOperation(const AllGatherVParam& param);

 private:
  std::vector<TensorSpec> InputSpecs() const override;
  std::vector<TensorSpec> OutputSpecs() const override;
  void InferShapeImpl(const std::vector<TensorDesc>& in,
                      std::vector<TensorDesc>& out) const override;
  void PrepareImpl(const VariantPack& pack) override;
  InPlaceForm InPlaceFormImpl(const VariantPack& pack) const override;
  CallSignature SignatureImpl(const VariantPack& pack) const override;
  void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                   Communicator& comm) override;
  /// Sets to zero every element of `out` that no [rdispls[i], +recvCounts[i]) range covers.
  void ZeroUncovered(void* out, DataType dtype) const;

  // Host counts read and checked by PrepareImpl, used by SignatureImpl and ExecuteImpl.
  int64_t sendCount_ = 0;
  std::vector<int64_t> recvCounts_;
  std::vector<int64_t> rdispls_;
  int64_t outNumel_ = 0;
};

}  // namespace collops
