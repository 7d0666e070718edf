#include "deferred_p2p.h"

#include <utility>

namespace collops {

DeferredWork::DeferredWork(std::shared_ptr<DeferredP2P> queue, int rank, c10d::OpType type,
                           std::vector<at::Tensor> outputs)
    : Work(rank, type), queue_(std::move(queue)), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

bool DeferredWork::isCompleted() { return done_; }

bool DeferredWork::isSuccess() const { return done_ && error_.empty(); }

bool DeferredWork::wait(std::chrono::milliseconds /*timeout*/) {
  if (!done_) queue_->Flush();
  TORCH_CHECK(error_.empty(), error_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> DeferredWork::getFuture() {
  if (!done_) queue_->Flush();
  return future_;
}

void DeferredWork::Finish(const std::string& error) {
  done_ = true;
  error_ = error;
  if (error.empty()) {
    future_->markCompleted(c10::IValue(outputs_));
  } else {
    future_->setError(std::make_exception_ptr(std::runtime_error(error)));
  }
}

c10::intrusive_ptr<c10d::Work> DeferredP2P::Send(const at::Tensor& tensor, int peer, int rank) {
  Pending p;
  p.buffer = tensor.contiguous();
  p.op = PointToPoint::Send(p.buffer.data_ptr(), p.buffer.numel() * p.buffer.element_size(),
                            ACL_INT8, peer);
  return Queue(std::move(p), c10d::OpType::SEND, rank);
}

c10::intrusive_ptr<c10d::Work> DeferredP2P::Recv(at::Tensor& tensor, int peer, int rank) {
  Pending p;
  p.buffer = tensor.is_contiguous() ? tensor : at::empty(tensor.sizes(), tensor.options());
  if (!tensor.is_contiguous()) p.target = tensor;
  p.op = PointToPoint::Recv(p.buffer.data_ptr(), p.buffer.numel() * p.buffer.element_size(),
                            ACL_INT8, peer);
  return Queue(std::move(p), c10d::OpType::RECV, rank);
}

c10::intrusive_ptr<c10d::Work> DeferredP2P::Refuse(PointToPoint::Kind kind, int peer, int rank,
                                                   std::string error) {
  Pending p;
  p.op = PointToPoint::Refusal(kind, peer, ERROR_INVALID_TENSOR_FORMAT);
  p.refused = std::move(error);
  return Queue(std::move(p),
               kind == PointToPoint::Kind::kSend ? c10d::OpType::SEND : c10d::OpType::RECV, rank);
}

c10::intrusive_ptr<c10d::Work> DeferredP2P::Queue(Pending pending, c10d::OpType type, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!closed_, "collops backend: send/recv on a destroyed process group");
  std::vector<at::Tensor> outputs;
  if (pending.buffer.defined())
    outputs.push_back(pending.target.defined() ? pending.target : pending.buffer);
  pending.work =
      c10::make_intrusive<DeferredWork>(shared_from_this(), rank, type, std::move(outputs));
  c10::intrusive_ptr<c10d::Work> work = pending.work;
  pending_.push_back(std::move(pending));
  queued_.store(true, std::memory_order_release);
  return work;
}

void DeferredP2P::Flush() {
  if (!queued_.load(std::memory_order_acquire)) return;
  std::vector<Pending> group;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group.swap(pending_);
    queued_.store(false, std::memory_order_relaxed);
    if (group.empty()) return;
    if (closed_) error = "collops backend: the process group was destroyed before this ran";
  }
  if (error.empty()) {
    std::vector<PointToPoint> ops;
    for (const Pending& p : group) ops.push_back(p.op);
    error = run_(ops);
  }
  for (Pending& p : group) {
    if (error.empty() && p.target.defined()) p.target.copy_(p.buffer);
    p.work->Finish(p.refused.empty() ? error : p.refused);
  }
}

void DeferredP2P::Close() {
  std::vector<Pending> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    dropped.swap(pending_);
    queued_.store(false, std::memory_order_relaxed);
  }
  for (Pending& p : dropped) {
    p.work->Finish(
        "collops backend: the process group was destroyed before this send/recv was "
        "waited on");
  }
}

}  // namespace collops
