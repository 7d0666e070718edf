// The "c10d" engine: a collops Communicator over a torch.distributed ProcessGroup, so operations
// run on whatever engine the application already set up (gloo between hosts; NCCL for CUDA
// tensors). ATB's "hcclComm: bring your own communicator", for torch jobs. The "collops" backend
// also runs its gloo groups between hosts through it.
//
// Every primitive is one or two collectives of the group's backend for the device of the data,
// each waited on before returning (the Communicator contract is synchronous). Raw pointers are
// wrapped as tensors of CurrentTensorDevice() (CPU unless a TensorDeviceScope says otherwise).
// The collectives are in c10d_engine.cpp, point to point in c10d_engine_p2p.cpp, and how the
// engine gets its groups in c10d_groups.h.
#pragma once

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/status.h"

namespace collops {

/// The device the pointers handed to c10d communicators on this thread point into (CPU by
/// default). The backend a primitive runs on is the group's backend for this device type.
c10::Device CurrentTensorDevice();

/// Sets CurrentTensorDevice() for this thread until destroyed (e.g. by a binding executing an
/// operation on CUDA tensors), then restores the previous device.
class TensorDeviceScope {
 public:
  explicit TensorDeviceScope(c10::Device device);
  ~TensorDeviceScope();
  TensorDeviceScope(const TensorDeviceScope&) = delete;
  TensorDeviceScope& operator=(const TensorDeviceScope&) = delete;

 private:
  c10::Device previous_;
};

class ProcessGroupCommunicator final : public Communicator {
 public:
  /// Adopts `group`, a group torch.distributed created and registered under `name`. The
  /// communicator counts as Broken() once that name no longer resolves to `group` (destroyed or
  /// re-created), so the pool never hands out a communicator over a dead group.
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group, std::string name);

  /// Over a backend collops created itself (a gloo group over `store`, see MakeGlooBackend);
  /// `name` is its store prefix, unique within the job, so its own Splits get unique prefixes.
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::Backend> backend,
                           c10::intrusive_ptr<c10d::Store> store, std::string name);

  std::string BackendName() const override { return "c10d"; }
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  bool Broken() const override;

  void AllGatherBytes(const void* in, void* out, size_t bytes) override;
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype) override;
  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op) override;
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override;
  /// Issues the all_to_all_single and returns (the backend moves it on its own threads); Finish
  /// waits for it and places blocks that are not packed in rank order.
  void StartAllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override;
  void FinishAllToAllV() override;
  void Broadcast(void* buf, size_t count, DataType dtype, int root) override;
  /// Both sides first swap (count, dtype) headers, so a mismatch fails on both with the same
  /// ERROR_RANK_MISMATCH before any payload moves.
  void Send(const void* buf, size_t count, DataType dtype, int peer) override;
  void Recv(void* buf, size_t count, DataType dtype, int peer) override;
  void Exchange(const std::vector<PointToPoint>& ops) override;
  void Barrier() override;
  /// A new gloo group per color over a PrefixStore of this group's store (CPU tensors only,
  /// whatever this group's backend is).
  std::shared_ptr<Communicator> Split(int color, int key) override;
  void SetFailureHook(std::function<void(Status, const std::string&)> hook) override {
    failureHook_ = std::move(hook);
  }

  /// "group \"0\" (gloo)": how messages name this communicator.
  std::string Describe() const;

 private:
  c10::intrusive_ptr<c10d::Backend> BackendFor(const c10::Device& device) const;
  void Wait(const c10::intrusive_ptr<c10d::Work>& work) const;
  template <class Body>
  void Guard(const char* primitive, Body body);
  /// Throws the error of a failed torch call; a lost peer or timeout breaks this communicator
  /// for good and runs the failure hook first.
  [[noreturn]] void Failed(const char* primitive, const std::string& what);
  /// One reduce_scatter of `packed` into `result` (allreduce + slice where the backend lacks
  /// it), with the backend's own semantics (gloo's max/min drop NaNs); `packed` may be
  /// overwritten.
  void ReduceScatterPadded(at::Tensor& packed, at::Tensor& result, ReduceOp op);
  /// The ops of one group (Send and Recv are groups of one).
  void RunGroup(const std::vector<PointToPoint>& ops);

  /// An all_to_all_single in flight, and where its blocks go once it is done.
  struct StartedAllToAllV {
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor sent;                          ///< kept alive until the Work is done
    at::Tensor received;                      ///< blocks in rank order
    std::vector<int64_t> bytesFrom, placeAt;  ///< per rank: block bytes, byte offset in out
    uint8_t* out = nullptr;                   ///< null when `received` is `out` itself
  };

  c10::intrusive_ptr<c10d::ProcessGroup> group_;  // null for a collops-made backend
  c10::intrusive_ptr<c10d::Backend> backend_;     // null for an adopted group
  c10::intrusive_ptr<c10d::Store> store_;
  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  int splits_ = 0;                   // Splits so far: every rank calls them in the same order
  std::atomic<bool> broken_{false};  // read by the pool from any thread
  bool noReduceScatter_ = false;     // the backend lacks reduce_scatter: allreduce + slice instead
  std::function<void(Status, const std::string&)> failureHook_;  // SetFailureHook's
  std::unique_ptr<StartedAllToAllV> started_;                    // between Start and Finish
};

template <class Body>
void ProcessGroupCommunicator::Guard(const char* primitive, Body body) {
  if (broken_) {
    Fail(ERROR_COMM_FAIL, "backend c10d: ", Describe(), " failed earlier (timeout or lost peer); ",
         primitive, " cannot run on it");
  }
  try {
    body();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    Failed(primitive, e.what_without_backtrace());
  } catch (const std::exception& e) {
    Failed(primitive, e.what());
  }
}

}  // namespace collops
