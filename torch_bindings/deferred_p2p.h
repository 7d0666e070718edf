// Point to point of the torch.distributed backend "collops": isend/irecv as torch means them.
//
// torch's send() and recv() return at once with a Work; gloo moves the data in the background,
// so a rank may isend and then recv from the same peer, or issue a whole ring with
// batch_isend_irecv, and wait later. collops' communicators are synchronous, and a blocking send
// on every rank of a ring never completes. So the backend defers them: send() and recv() queue
// the op and return a DeferredWork; the queue runs as one Communicator::Exchange (a group that
// cannot deadlock, whatever order the peers' groups have) when any of its Works is waited on, or
// before the backend runs anything else, which keeps program order. Blocking dist.send/dist.recv
// wait at once, so they run where the program calls them.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collops/communicator.h"

namespace collops {

class DeferredP2P;

/// The Work of one queued send or recv: wait() runs the queue (and throws its failure).
class DeferredWork final : public c10d::Work {
 public:
  DeferredWork(std::shared_ptr<DeferredP2P> queue, int rank, c10d::OpType type,
               std::vector<at::Tensor> outputs);
  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  /// Runs the queue first, as wait() does: a caller that waits on the future alone would
  /// otherwise wait for a group that nothing ever runs.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  friend class DeferredP2P;
  /// Called by the queue when the group holding this op ran: `error` empty on success.
  void Finish(const std::string& error);

  std::shared_ptr<DeferredP2P> queue_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool done_ = false;
  std::string error_;
};

class DeferredP2P : public std::enable_shared_from_this<DeferredP2P> {
 public:
  /// `run` executes one group on the backend's communicator, turning its failures into a
  /// message (it is the backend's; the queue never outlives its use: Close()).
  using Runner = std::function<std::string(const std::vector<PointToPoint>& ops)>;
  explicit DeferredP2P(Runner run) : run_(std::move(run)) {}

  /// Queues a send of `tensor` (CPU) to group rank `peer`.
  c10::intrusive_ptr<c10d::Work> Send(const at::Tensor& tensor, int peer, int rank);
  /// Queues a receive into `tensor` (CPU; strided ones get the data when the group runs).
  c10::intrusive_ptr<c10d::Work> Recv(at::Tensor& tensor, int peer, int rank);
  /// Queues, in place of a send or receive whose tensor this rank refused with `error`, a
  /// PointToPoint::Refusal of it: it runs with the group, so the peer's matching op fails at once
  /// naming this rank instead of waiting for the timeout, and the other ops of the group (a ring
  /// of batch_isend_irecv) still meet theirs. The Work raises `error` when waited on.
  c10::intrusive_ptr<c10d::Work> Refuse(PointToPoint::Kind kind, int peer, int rank,
                                        std::string error);
  /// Runs every queued op as one group.
  void Flush();
  /// The backend is going away: queued ops fail (their Works say so) and nothing runs any more.
  void Close();

 private:
  struct Pending {
    PointToPoint op;
    at::Tensor buffer;    ///< contiguous: what moves
    at::Tensor target;    ///< a receive's tensor, when it is not `buffer`
    std::string refused;  ///< why this rank refused the op (a Refusal runs instead), or empty
    c10::intrusive_ptr<DeferredWork> work;
  };
  c10::intrusive_ptr<c10d::Work> Queue(Pending pending, c10d::OpType type, int rank);

  std::mutex mu_;
  Runner run_;
  bool closed_ = false;
  std::vector<Pending> pending_;
  // Whether pending_ may hold ops, read without the lock: every collective flushes first, and
  // most find nothing queued.
  std::atomic<bool> queued_{false};
};

}  // namespace collops
