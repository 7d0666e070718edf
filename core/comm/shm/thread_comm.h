// ThreadCommunicator: the "lccl" backend in multi-thread mode (commMode 1), where the ranks are
// threads of one process.
//
// Single copy, no staging: each collective publishes the rank's buffer pointers in its slot of the
// shared ThreadGroup, meets the peers at a Sync, reads straight from the peers' buffers into its
// own output (the local slice first, then the peers starting with rank+1 so that the ranks do not
// all read rank 0 at once), and meets them again so nobody reuses a buffer a peer still reads.
//
// Before moving data every rank checks the scalars and counts all ranks published (counts, dtype,
// reduce op, root, the send/receive count matrix); ranks that disagree all throw the same
// ERROR_RANK_MISMATCH instead of reading out of bounds.
//
// Aliasing: AllReduce may run in place (in == out); AllGatherV's `in` may lie inside `out`;
// ReduceScatterV's `out` may be exactly `in + sdispls[Rank()]`. Other overlaps between a rank's
// input and output are not supported.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "core/comm/shm/thread_group.h"

namespace collops {

/// One rank's handle on a multi-thread lccl group. Use it from one thread at a time (the rank's).
class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<shm::ThreadGroup> group, int rank);

  std::string BackendName() const override { return "lccl"; }
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }

  /// The default exchange, named after the call it checks in timeout messages.
  void Agree(const CallSignature& mine) override;
  void AllGatherBytes(const void* in, void* out, size_t bytes) override;
  /// Rank r reduces slice r of the elements from every rank's input (ranks in order 0..R-1, so all
  /// ranks get bit-identical results), then copies the other slices from their owners' outputs.
  /// Small out-of-place calls instead reduce everything on every rank and save one Sync.
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype) override;
  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op) override;
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override;
  void Broadcast(void* buf, size_t count, DataType dtype, int root) override;
  /// Every rank sums and dequantises straight from the peers' int8 inputs: everything at R = 2 or
  /// up to 32 KiB of output ("oneshot", two Syncs), else its own slice, then it copies the other
  /// slices from their owners' outputs ("slices", three Syncs). Returns true.
  bool AllReduceQuantised(const int8_t* in, void* out, size_t count, const QuantScale& quant,
                          DataType outDtype) override;
  bool HasAllReduceQuantised() const override { return true; }
  /// Blocks until `peer` has received the message (the receiver copies straight from `buf`).
  /// Messages between the same pair are delivered in the order they were sent.
  void Send(const void* buf, size_t count, DataType dtype, int peer) override;
  void Recv(void* buf, size_t count, DataType dtype, int peer) override;
  void Exchange(const std::vector<PointToPoint>& ops) override;
  void Barrier() override;
  bool Broken() const override { return group_->Broken(); }
  /// Breaks the group: every rank's waits end with `status` and `why`, and later calls fail.
  void Abort(Status status, const std::string& why) override;
  void SetIdleHook(std::function<void()> hook) override {
    group_->slot(rank_).idle = std::move(hook);
  }

 private:
  /// Publishes this rank's arguments of a collective in its slot.
  shm::RankSlot& Publish(const void* in, void* out, int64_t count, DataType dtype, int32_t op);
  /// Every rank found the same disagreement in the published slots: wait until all of them are
  /// done reading the slots, then throw ERROR_RANK_MISMATCH with `message`.
  [[noreturn]] void FailTogether(const char* what, const std::string& message);
  /// "" when every rank published the same count, dtype and (if `checkOp`) op; else a message.
  std::string CheckUniform(const char* what, bool checkOp, const char* opField) const;
  size_t CheckedElementSize(const char* what, DataType dtype, bool reduction) const;
  /// ReduceArrays inside a collective under way: a failure (buffers that partially overlap)
  /// breaks the group, so the peers waiting at the next Sync fail with it instead of running on
  /// out of step with this rank.
  void ReduceOrBreak(const char* what, DataType dtype, ReduceOp op, void* dst, size_t count);
  void CheckPeer(const char* what, int peer) const;
  /// AllGatherBytes, naming its waits `what` (a literal or InternedName).
  void GatherBytes(const char* what, const void* in, void* out, size_t bytes);

  std::shared_ptr<shm::ThreadGroup> group_;
  const int rank_;
  const int size_;
  std::vector<const void*> srcs_;         ///< reduction inputs, reused so no call allocates
  std::vector<const int8_t*> quantSrcs_;  ///< AllReduceQuantised's inputs, likewise
  std::vector<uint64_t> sent_;            ///< messages sent to each peer
  std::vector<uint64_t> received_;        ///< messages received from each peer
  std::string agreedOpName_;              ///< the opName agreementName_ was made for
  const char* agreementName_ = nullptr;   ///< "<opName> (cross-rank check)", interned
};

/// Joins (or starts forming) the multi-thread lccl group of `param.commDomain` with
/// `param.rankSize` ranks as rank `param.rank`, and blocks until every rank has joined.
/// Throws ERROR_INVALID_PARAM when the rank is already held in the forming group, and
/// ERROR_TIMEOUT naming the missing ranks after CommTimeoutSeconds().
std::shared_ptr<ThreadCommunicator> JoinThreadGroup(const CommParam& param);

}  // namespace collops
