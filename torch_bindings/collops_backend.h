// The torch.distributed backend "collops": a c10d::Backend over the lccl multi-process
// communicator, so `dist.init_process_group("cpu:collops")`, DDP and functional collectives run
// on collops.
//
// Every collective is synchronous on CPU (the Communicator contract), so each call returns a
// CompletedWork (completed_work.h) whose future already holds the outputs; DDP's comm hooks only
// need getFuture() to work. send/recv are the exception: they are queued and run together, as
// one Communicator::Exchange, when waited on or before the next call (deferred_p2p.h), so
// isend/irecv rings and batch_isend_irecv behave as on gloo.
//
// Group identity: torch hands each group's backend a Store prefixed with the group's name. The
// ranks agree there on a token (group_join.h), so the lccl commDomain is unique per group and per
// job: sub-groups from dist.new_group get their own communicators, and two jobs on one host never
// meet even when they share MASTER_PORT or COLLOPS_JOB_ID.
//
// Hosts: every rank also publishes its HostIdentity() (topology.h) in the group's Store. A group
// whose ranks are all on one host runs on one lccl communicator. A group spanning hosts runs on
// the hierarchical communicator (hierarchical_communicator.h): lccl among the ranks of each host
// (domain "<token>@host<h>"), and gloo groups made from the same Store between hosts -- one per
// rail (the ranks at one local index, one per host: the inter-host data path; rail 0 is the host
// leaders) and one over every rank (point to point between hosts, small control exchanges), each
// wrapped in the c10d engine (c10d_engine.h).
//
// The class's methods live in three files, by what they do: collops_backend.cpp (the group's
// communicator, the per-call wrapper Run, barrier, broadcast, send and recv),
// collops_backend_reduce.cpp (every reducing collective) and collops_backend_gather.cpp (gathers,
// scatter, all-to-all). Python reaches it through python_module.cpp.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/operation.h"
#include "collops/registry.h"
#include "collops/signature.h"
#include "collops/status.h"
#include "collops/topology.h"
#include "collops/verified_communicator.h"
#include "collops_backend_tensors.h"
#include "completed_work.h"
#include "deferred_p2p.h"

namespace collops {

class CollopsBackend final : public c10d::Backend {
 public:
  // timeoutSeconds: init_process_group's timeout, 0 = COLLOPS_TIMEOUT (CommParam::timeoutSeconds).
  CollopsBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                 double timeoutSeconds);
  ~CollopsBackend() override;

  /// The engine this group runs on: "lccl", or "hccl(lccl+c10d)" across hosts ("" before the
  /// first collective created it).
  std::string CommunicatorName();

  /// `bytes` bytes (uint8) that this group's communicator moves with one copy
  /// (Communicator::AllocateShared: the lccl heap on one host), or ordinary memory where it has
  /// none or its heap is full. Creates the communicator on first use, so it is collective then.
  /// The tensor keeps the communicator alive.
  at::Tensor EmptySharedBytes(int64_t bytes);

  const std::string getBackendName() const override;

  // torch shuts down (destroy_process_group, shrink_group) or aborts (abort_process_group) every
  // group it destroys, before a group name or the default group can mean another group: the
  // eager torch.ops.collops kernels keep a group they resolved only while it is not closed.
  void shutdown() override { closed_.store(true, std::memory_order_release); }
  void abort() override { closed_.store(true, std::memory_order_release); }
  /// True once torch shut this group down or aborted it.
  bool Closed() const { return closed_.load(std::memory_order_acquire); }

  // TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the group in torch's ProcessGroupWrapper, which sets the
  // number here and then compares it across ranks before every collective, naming ranks that ran
  // a different number of collectives. Every rank constructs its backend in the same
  // collective call, so all count from 0 (as gloo does); nothing needs agreeing.
  void setSequenceNumberForGroup() override {}
  // The wrapper asks for the number first thing in every collective, before its own gloo barrier
  // across the ranks: queued sends and receives must run now, as they would at the start of the
  // collective without the wrapper. Else a rank whose peer waits in recv for its un-waited isend
  // enters that barrier, and both wait for ever.
  uint64_t getSequenceNumberForGroup() override;

  // collops_backend.cpp
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;

  // collops_backend_reduce.cpp
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;

  // collops_backend_gather.cpp
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;

  /// torch.ops.collops.all_reduce's kernel on this group (functional_ops.cpp): the reduction of
  /// `in` written to `out`, a contiguous tensor of in's shape and dtype, out of place (no copy of
  /// `in` first), and no Work. The eager kernel has checked that both are dense CPU tensors.
  /// collops_backend_reduce.cpp.
  void AllReduceInto(const at::Tensor& in, at::Tensor& out, const c10d::ReduceOp& op);
  /// torch.ops.collops.all_reduce_'s kernel on this group: `t` reduced in place, as allreduce
  /// does it (any layout; a strided `t` through a contiguous copy), and no Work.
  /// collops_backend_reduce.cpp.
  void AllReduceInPlace(at::Tensor& t, const c10d::ReduceOp& op);
  /// Runs `checks`, a call's checks of its tensors (CheckCpu here, the eager kernels' own), before
  /// any data moves. A refusal is told to the peers (ShareRefusal), then rethrown.
  template <class Checks>
  void Refusable(const char* what, Checks checks);
  /// Runs `body`, one call on this group with its own argument rules. A torch error it raises
  /// before it reached the communicator (Comm()) is one of those rules failing on this rank (a
  /// list of the wrong length, an output of the wrong size, AVG of integers, ...): it is told to
  /// the peers as a refusal (ShareRefusal, ERROR_INVALID_PARAM) before it propagates, so they fail
  /// at once instead of waiting for this rank. One raised after the communicator was reached is
  /// not: the peers have met this rank's call then. Nested calls tell once (ShareRefusal reaches
  /// the communicator itself). `what`: the call's name, or its c10d::OpType (named only when
  /// told, so the call that keeps its rules pays nothing for it).
  template <class What, class Body>
  void TellsRefusal(What what, Body body);
  /// Every collective's entry: Refusable of CheckCpu over its arguments, given as (tensors,
  /// argument name) pairs (CheckCpuArgs, collops_backend_tensors.h).
  template <class... Args>
  void CheckEntry(const char* what, const Args&... tensorsAndNames) {
    Refusable(what, [&] { CheckCpuArgs(what, tensorsAndNames...); });
  }
  /// Tells the peers that this rank refuses the collective `what` it was called for, with `status`:
  /// through the agreement check they are in or about to enter (ShareLocalFailure), so they fail
  /// at once with ERROR_RANK_MISMATCH naming this rank and `status` instead of waiting for the
  /// timeout, and every rank stays at the same call. Before the group's first collective the
  /// peers are in the communicator's creation: this rank joins it first. Like any collective it
  /// waits for the peers to arrive. Never throws. collops_backend.cpp.
  void ShareRefusal(const char* what, Status status);

  /// The group's communicator without the cross-rank agreement check, for collops operations,
  /// which run their own (torch.ops.collops.quant_all_reduce: an AllReduceOperation made on it).
  /// Creates it on first use, so it is collective then. collops_backend.cpp.
  Communicator& OperationComm();
  /// Setup and Execute of `op`, an operation made on OperationComm(), over `pack`, as one of this
  /// group's collectives; a failing Status raises a torch error naming it. collops_backend.cpp.
  void RunOperation(Operation& op, const VariantPack& pack);
  /// The AllReduceOperation with `quantType` and `outDataType` made on OperationComm() the first
  /// time a pair is asked for and kept with the group, so a repeated call reuses its Setup;
  /// creation errors raise a torch error naming the status. collops_backend.cpp.
  Operation& QuantAllReduceOperation(int quantType, int outDataType);

 private:
  // ---- collops_backend.cpp: the group's communicator and the per-call wrapper ----------------

  // The lccl communicator of this group (one host), or the hierarchical one (several), created
  // (rendezvous included) on first use.
  VerifiedCommunicator& Comm();
  CommParam LcclParam(const std::string& domain, int rank, int size) const;
  std::shared_ptr<Communicator> CreateHierarchical();

  // Every collective's path: flushes queued sends and receives, runs `body`, and turns
  // collops::Error into a torch error that names the status.
  template <class Body>
  void RunCollective(Body body);
  // RunCollective of TellsRefusal of `body`, then the outputs wrapped in a CompletedWork.
  template <class Body>
  c10::intrusive_ptr<c10d::Work> Run(c10d::OpType type, std::vector<at::Tensor> outputs, Body body);
  std::string Describe(const Error& e) const;
  // One group of queued sends and receives.
  std::string RunP2P(const std::vector<PointToPoint>& ops);
  // send and recv: `tensors` (one) checked, then queued, or queued as a refusal.
  // collops_backend.cpp.
  c10::intrusive_ptr<c10d::Work> QueueP2P(PointToPoint::Kind kind, std::vector<at::Tensor>& tensors,
                                          int peer);

  // ---- collops_backend_reduce.cpp --------------------------------------------------------------
  // The movers below and the gather ones take tensors that passed CheckCpu (CheckEntry) and their
  // collective's rules (CheckAllReduce, the Check* here), and check nothing again: a collective
  // given several tensors checks every one of them, in Run's body, before the first moves, so a
  // later tensor's broken rule is told to the peers (Run) instead of raised after data moved.

  void CheckReduceScatterList(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                              const c10d::ReduceOp& op) const;
  void CheckReduceScatterFlat(const at::Tensor& output, const at::Tensor& input,
                              const c10d::ReduceOp& op) const;
  void AllReduceOne(at::Tensor& tensor, const c10d::ReduceOp& op, const char* what = "allreduce");
  void AllReduceBitwise(at::Tensor& tensor, const c10d::ReduceOp& op);
  // counts/displs in elements of `output`'s dtype.
  void ReduceScatterOne(at::Tensor& output, const at::Tensor& in, std::vector<int64_t> counts,
                        std::vector<int64_t> displs, const c10d::ReduceOp& op);
  void ReduceScatterFlat(at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op);

  // ---- collops_backend_gather.cpp --------------------------------------------------------------

  void CheckAllGatherList(const std::vector<at::Tensor>& outs, const at::Tensor& input) const;
  void CheckAllGatherFlat(const at::Tensor& output, const at::Tensor& input) const;
  void AllGatherList(std::vector<at::Tensor>& outs, const at::Tensor& input);
  void AllGatherFlat(at::Tensor& output, const at::Tensor& input);
  // Counts and displacements of `t`'s dim-0 splits, in units of `unitBytes` (an element).
  void RowSplits(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                 int64_t unitBytes, std::vector<int64_t>* counts,
                 std::vector<int64_t>* displs) const;

  std::string domain_;
  c10::intrusive_ptr<c10d::Store> store_;
  HostLayout layout_;
  double timeoutSeconds_;  // init_process_group's timeout, 0 = COLLOPS_TIMEOUT
  int generation_ = 0;     // hierarchical communicators created so far
  std::mutex mu_;
  std::shared_ptr<DeferredP2P> p2p_;
  std::shared_ptr<Communicator> engine_;  // what comm_ wraps: OperationComm()
  std::shared_ptr<VerifiedCommunicator> comm_;
  // comm_ once created (it is never replaced): what Comm() returns without taking mu_.
  std::atomic<VerifiedCommunicator*> commReady_{nullptr};
  std::atomic<uint64_t> collectivesIssued_{0};  // collectives only, not sends and receives
  std::atomic<uint64_t> commUses_{0};           // calls of Comm(): whether Run's body reached it
  std::atomic<bool> closed_{false};             // shutdown() or abort() called
  std::map<std::pair<int, int>, OperationPtr> quantOps_;  // by (quantType, outDataType), mu_
};

/// The collops backend serving `group`'s CPU tensors, or null (another backend, or torch's debug
/// wrapper around one). collops_backend.cpp.
CollopsBackend* CollopsOf(const c10d::ProcessGroup& group);

/// torch.ops.collops.quant_all_reduce's AllReduceOperation (quantType, outDataType as ATB
/// numbers them) for `rank` of `rankSize`, on `comm` (null: made for its checks only); a creation
/// error raises a torch error naming the status. collops_backend.cpp.
OperationPtr NewQuantAllReduce(int rank, int rankSize, int quantType, int outDataType,
                               Communicator* comm);

// The definitions of RunCollective and Run, for the files that define collectives.
template <class Body>
void CollopsBackend::RunCollective(Body body) {
  ++collectivesIssued_;
  p2p_->Flush();  // queued sends and receives come first, as the program issued them
  try {
    body();
  } catch (const Error& e) {
    TORCH_CHECK(false, Describe(e));
  }
}

template <class Checks>
void CollopsBackend::Refusable(const char* what, Checks checks) {
  try {
    checks();
  } catch (const c10::Error&) {
    ShareRefusal(what, ERROR_INVALID_TENSOR_FORMAT);
    throw;
  }
}

inline std::string CallName(const char* what) { return what; }
inline std::string CallName(c10d::OpType type) { return c10d::opTypeToString(type); }

template <class What, class Body>
void CollopsBackend::TellsRefusal(What what, Body body) {
  const uint64_t before = commUses_.load(std::memory_order_relaxed);
  try {
    body();
  } catch (const c10::Error&) {
    if (commUses_.load(std::memory_order_relaxed) == before)
      ShareRefusal(CallName(what).c_str(), ERROR_INVALID_PARAM);
    throw;
  }
}

template <class Body>
c10::intrusive_ptr<c10d::Work> CollopsBackend::Run(c10d::OpType type,
                                                   std::vector<at::Tensor> outputs, Body body) {
  RunCollective([&] { TellsRefusal(type, body); });
  return c10::make_intrusive<CompletedWork>(getRank(), type, std::move(outputs));
}

}  // namespace collops
