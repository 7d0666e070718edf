// OperationBase: the generic half of every operation. It runs the checks that do not depend on
// the op (tensor counts, dims, dtype table, byte sizes, Setup/Execute consistency, communicator
// acquisition, cross-rank agreement) and calls the op's hooks for the rest, so an op file holds
// only its own rules and its algorithm.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/operation.h"
#include "collops/signature.h"

namespace collops {

/// Which dtypes a tensor may have.
enum class DtypeSet {
  kMovable,    ///< data movement: the 7 reducible dtypes plus uint8, float64, bool
  kReducible,  ///< int8, int16, int32, int64, float16, bfloat16, float32
  kCounts,     ///< int64 host counts
  kInt8,       ///< int8 only (quantised data)
  kFloat16,    ///< float16 only (quantisation scales and offsets)
  kAny,        ///< any known dtype
  kShapeOnly,  ///< any known dtype; only the shape is read, so the data may be absent (ATB's
               ///< infer-shape carriers: tensorForInferShape, y_shape)
};

/// How many values a host-count input (DtypeSet::kCounts) holds.
enum class CountsLength {
  kPerRank,  ///< one per rank (rankSize), e.g. AllToAllVV2's sendCounts
  kOne,      ///< exactly one, e.g. AllGatherV's sendCount
};

/// One input or output of an operation, as callers see it: its name (messages use it, and the
/// torch binding's set_varaintpack_param binds host counts by it), the dtypes it accepts, and,
/// for an int64 host-count input, how many counts it holds.
struct TensorSpec {
  const char* name;
  DtypeSet dtypes;
  CountsLength countsLength = CountsLength::kPerRank;  ///< read only for host-count inputs

  /// Counts that may come from hostData (ATB's host tensors) rather than from the tensor.
  bool IsHostCounts() const { return dtypes == DtypeSet::kCounts; }
};

/// The one way an op's data input x (inTensors[0]) may share memory with its output y
/// (outTensors[0]): x starting exactly at `inputAt`, which lies in y's memory or y in x's (e.g.
/// AllReduce's x == y, NCCL's in-place AllGather x == y[rank]). Any other overlap is refused.
struct InPlaceForm {
  const void* inputAt = nullptr;      ///< null: no in-place form for these tensors
  const char* description = nullptr;  ///< for the message, e.g. "x == y"; null: none at all
};

class OperationBase : public Operation {
 public:
  std::string GetName() const final { return name_; }
  uint32_t GetInputNum() const final;
  uint32_t GetOutputNum() const final;
  Status InferShape(const std::vector<TensorDesc>& inTensorDescs,
                    std::vector<TensorDesc>& outTensorDescs) const final;
  Status Setup(const VariantPack& variantPack, uint64_t& workspaceSize, Context* context) final;
  Status Execute(const VariantPack& variantPack, uint8_t* workspace, uint64_t workspaceSize,
                 Context* context) final;
  /// The communicator params: the key under which the context's pool holds this operation's
  /// communicator (the torch binding allocates shared tensors from it).
  const CommParam& commParam() const { return commParam_; }
  /// For a caller whose own step of this call failed before Setup or Execute could run (the torch
  /// binding's InferShape for its outputs): tells the peers that this rank will not make the call,
  /// so they fail at once with ERROR_RANK_MISMATCH naming this rank and `status` instead of timing
  /// out. A collective op does it through the signature exchange they are about to enter; a
  /// point-to-point op (RefusalsImpl) by a PointToPoint::Refusal in place of each send and receive
  /// the call would have made. Before this op's communicator exists (its first call) the peers are
  /// in the communicator's creation: this rank joins it first (bounded by COLLOPS_TIMEOUT), then
  /// tells them. Never throws: when nobody can be told, the caller's own error stands. Setup and
  /// Execute do this for their own failures.
  void ShareFailure(Status status, Context* context);
  /// Inputs and outputs in order (TensorSpec): the op's own facts about its tensors, which the
  /// generic checks and the bindings read instead of knowing any op.
  virtual std::vector<TensorSpec> InputSpecs() const = 0;
  virtual std::vector<TensorSpec> OutputSpecs() const = 0;

 protected:
  OperationBase(std::string name, const CommParam& commParam);

  /// Output descs from input descs that already passed the generic checks. Throws Error.
  virtual void InferShapeImpl(const std::vector<TensorDesc>& in,
                              std::vector<TensorDesc>& out) const = 0;
  /// Reads host counts and checks every range against the buffers, keeping what Execute needs.
  /// Runs in Setup and again in Execute (counts may be rebound in between). Throws Error.
  virtual void PrepareImpl(const VariantPack& pack) { (void)pack; }
  /// Bytes of workspace Execute needs, after PrepareImpl, with the communicator acquired
  /// (AcquiredCommunicator()).
  virtual uint64_t WorkspaceSizeImpl(const VariantPack& pack) const {
    (void)pack;
    return 0;
  }
  /// The in-place form the algorithm supports for these tensors (after PrepareImpl); the
  /// default is none, so x and y must not overlap: peers may read x while y is written.
  virtual InPlaceForm InPlaceFormImpl(const VariantPack& pack) const {
    (void)pack;
    return {};
  }
  /// Asked only when x does lie at InPlaceFormImpl's inputAt: why this call's counts still make
  /// the form unsafe (a peer would read memory y covers after this rank wrote it), the whole
  /// sentence for the message; "" (the default) when it is safe.
  virtual std::string InPlaceRefusalImpl(const VariantPack& pack) const {
    (void)pack;
    return "";
  }
  /// What this rank is about to do, for the cross-rank agreement check. A signature with an
  /// empty opName skips the check (Send and Recv: the communicator checks the pair itself).
  virtual CallSignature SignatureImpl(const VariantPack& pack) const = 0;
  /// Point-to-point ops (Send, Recv, SendRecv) have no all-rank signature exchange in which a
  /// failing rank could tell its peers: they return here the sends and receives a call makes, each
  /// as a PointToPoint::Refusal carrying `status`, in the order the call issues them, and
  /// ShareFailure runs them as one Communicator::Exchange group, which fails each peer's matching
  /// op at once. Empty (the default): a collective op, which tells its peers through the signature
  /// exchange instead.
  virtual std::vector<PointToPoint> RefusalsImpl(Status status) const {
    (void)status;
    return {};
  }
  /// Moves the data. The communicator has Size() == rankSize and Rank() == rank.
  virtual void ExecuteImpl(const VariantPack& pack, uint8_t* workspace, uint64_t workspaceSize,
                           Communicator& comm) = 0;

  /// The communicator Setup acquired (before it asked WorkspaceSizeImpl, so the size may depend
  /// on what the engine runs itself); null before the first Setup.
  const Communicator* AcquiredCommunicator() const { return comm_.get(); }

  /// "<op>: " prefix helpers for messages, e.g. Where() = "AllToAllVOperation (rank 1)".
  std::string Where() const;

  /// The counts of an int64 host-count input: hostData when set, else deviceData. Throws when
  /// the tensor holds no data.
  std::vector<int64_t> ReadCounts(const Tensor& tensor, const char* name) const;
  /// Throws ERROR_INVALID_PARAM unless every count >= 0 and counts.size() == expected.
  void CheckCountVector(const std::vector<int64_t>& counts, const char* name,
                        size_t expected) const;
  /// Throws ERROR_INVALID_PARAM unless counts[i] >= 0, displs[i] >= 0 and
  /// counts[i] + displs[i] <= limit for every i (no overflow), naming `bufferName`.
  void CheckRanges(const std::vector<int64_t>& counts, const char* countsName,
                   const std::vector<int64_t>& displs, const char* displsName, int64_t limit,
                   const char* bufferName) const;

 private:
  void CheckCount(size_t count, const std::vector<TensorSpec>& specs, Status countStatus,
                  const char* role) const;
  /// Count, dtype table, format, dims and byte size of each desc.
  void CheckDescs(const std::vector<TensorDesc>& descs, const std::vector<TensorSpec>& specs,
                  Status countStatus, const char* role) const;
  /// Count, dataSize and data pointer of each tensor.
  void CheckTensorData(const std::vector<Tensor>& tensors, const std::vector<TensorSpec>& specs,
                       Status countStatus, const char* role) const;
  /// Every input and output tensor: its data, and with `descsToo` its desc first.
  void CheckTensorsOf(const VariantPack& pack, bool descsToo) const;
  void CheckOutputsMatchInferred(const VariantPack& pack) const;
  /// Refuses an overlap of the data input x and output y other than the op's InPlaceForm.
  void CheckAliasing(const VariantPack& pack) const;
  /// Refuses a workspace whose bytes in use (Setup's size) overlap any input or output that holds
  /// data (shape carriers aside), for every op (ERROR_INVALID_PARAM, as any other aliasing).
  void CheckWorkspaceAliasing(const VariantPack& pack, const uint8_t* workspace) const;
  void AcquireCommunicator(Context* context);
  /// Whether the pack's descs (inputs, then outputs) are those of the last successful Setup.
  bool SameDescsAsSetup(const VariantPack& pack) const;
  /// InputSpecs() and OutputSpecs(), asked once: they follow from the params, which an operation
  /// never changes, and every Setup and Execute reads them.
  struct Specs {
    std::vector<TensorSpec> in;
    std::vector<TensorSpec> out;
    std::vector<TensorSpec> outAnyDtype;  ///< `out` with every dtype allowed (checked by inference)
  };
  const Specs& CachedSpecs() const;
  /// ShareFailure; without `joinCreation` only through a communicator that exists already (for a
  /// failure to create it).
  void ShareFailure(Status status, Context* context, bool joinCreation);
  /// Runs a rank-local step; if it throws, the op first tells its peers (ShareFailure), so they
  /// fail at once instead of timing out.
  template <class Body>
  void RunSharingFailure(Context* context, bool joinCreation, Body&& body);

  std::string name_;
  CommParam commParam_;
  std::shared_ptr<Communicator> comm_;
  mutable std::once_flag specsOnce_;
  mutable Specs specs_;
  bool setUp_ = false;
  /// The descs of the last successful Setup: a Setup of the same descs skips the checks that
  /// depend on them alone (their dtypes, dims and sizes; the outputs against inference).
  std::vector<TensorDesc> setupDescs_;
  uint64_t setupWorkspaceSize_ = 0;
};

/// Throws ERROR_INVALID_PARAM naming `where`, both ranks and `why` when two non-empty ranges
/// [displs[j], displs[j] + counts[j]) overlap in `bufferName`. The ranges were checked in bounds
/// (CheckRanges), so their ends do not overflow.
void CheckRangesDisjoint(const std::string& where, const std::vector<int64_t>& counts,
                         const char* countsName, const std::vector<int64_t>& displs,
                         const char* displsName, const char* bufferName, const char* why);

/// Element pointer arithmetic on untyped buffers.
inline const uint8_t* ElementPtr(const void* base, int64_t index, DataType dtype) {
  return static_cast<const uint8_t*>(base) + index * static_cast<int64_t>(DataTypeSize(dtype));
}
inline uint8_t* ElementPtr(void* base, int64_t index, DataType dtype) {
  return static_cast<uint8_t*>(base) + index * static_cast<int64_t>(DataTypeSize(dtype));
}

}  // namespace collops
