// The Work the "collops" backend returns for every collective: the communicator is synchronous,
// so the collective has finished when its Work is made. Its future, which DDP's comm hooks and
// functional collectives read through getFuture(), is made on the first getFuture() and then
// already holds the outputs: most callers only wait() on a Work or drop it, and making a future
// on every call (a list type, the value, the storages it records) would be most of the Work's
// cost.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

namespace collops {

class CompletedWork final : public c10d::Work {
 public:
  CompletedWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type), outputs_(std::move(outputs)) {
    completed_ = true;
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ =
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
      future_->markCompleted(c10::IValue(outputs_));
    }
    return future_;
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made by the first getFuture()
};

}  // namespace collops
