// The torch.distributed backend "collops": a c10d::Backend over the lccl multi-process
// communicator, so `dist.init_process_group("cpu:collops")`, DDP and functional collectives run
// on collops.
//
// Every collective is synchronous on CPU (the Communicator contract), so each call returns a Work
// that is already complete and whose future already holds the outputs; DDP's comm hooks only need
// getFuture() to work. send/recv are the exception: they are queued and run together, as one
// Communicator::Exchange, when waited on or before the next call (deferred_p2p.h), so isend/irecv
// rings and batch_isend_irecv behave as on gloo.
//
// Group identity: torch hands each group's backend a Store prefixed with the group's name. Rank 0
// of the group draws a random token there that every rank takes (group_join.h, which also keeps
// a restarted job's ranks from taking the token of its dead attempt), so the lccl commDomain is
// unique per group and per job: sub-groups from dist.new_group get their own communicators, and
// two jobs on one host never meet even when they share MASTER_PORT or COLLOPS_JOB_ID.
//
// Hosts: every rank also publishes its HostIdentity() (topology.h) in the group's Store. A group
// whose ranks are all on one host runs on one lccl communicator, as always. A group spanning hosts
// runs on the hierarchical communicator (hierarchical_communicator.h): lccl among the ranks of
// each host (domain "<token>@host<h>"), and gloo groups made from the same Store between hosts —
// one per rail (the ranks at one local index, one per host: the inter-host data path; rail 0 is
// the host leaders) and one over every rank (point to point between hosts, small control
// exchanges), each wrapped in the c10d ProcessGroupCommunicator.
//
// Python sees `create_backend(store, rank, size, timeout)` and `communicator_name(backend)` (which
// engine a group's backend runs on, e.g. "lccl" or "hccl(lccl+c10d)") through the module `_c10d`
// that this library also exports (collops/_c10d_backend.py loads it and registers it with
// torch.distributed.Backend.register_backend).
#include <ATen/DLConvertor.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collops/backend.h"
#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/context.h"
#include "collops/hierarchical_communicator.h"
#include "collops/reduce.h"
#include "collops/status.h"
#include "collops/tensor.h"
#include "collops/topology.h"
#include "collops/verified_communicator.h"
#include "deferred_p2p.h"
#include "group_join.h"
#include "intra_op_threads.h"
#include "process_group_comm.h"
#include "shared_tensor.h"

// The same holder declaration torch's own bindings use, so intrusive_ptr<Backend> converts to the
// torch._C._distributed_c10d.Backend type torch registered.
PYBIND11_DECLARE_HOLDER_TYPE(T, c10::intrusive_ptr<T>, true)

namespace collops {
namespace {

constexpr char kBackendName[] = "collops";

// A Work that finished before it was returned: the communicator is synchronous.
class CompletedWork final : public c10d::Work {
 public:
  CompletedWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type), outputs_(std::move(outputs)) {
    future_ =
        c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future_->markCompleted(c10::IValue(outputs_));
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The collops dtype (ACL numbering) of a torch dtype, where collops has one. bool is reduced as
// its bytes (0 or 1), see Reduction.
std::optional<DataType> CollopsDtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ACL_FLOAT;
    case at::kDouble:
      return ACL_DOUBLE;
    case at::kHalf:
      return ACL_FLOAT16;
    case at::kBFloat16:
      return ACL_BF16;
    case at::kChar:
      return ACL_INT8;
    case at::kByte:
    case at::kBool:
      return ACL_UINT8;
    case at::kShort:
      return ACL_INT16;
    case at::kInt:
      return ACL_INT32;
    case at::kLong:
      return ACL_INT64;
    default:
      return std::nullopt;
  }
}

DataType ReduceDtype(const at::Tensor& t) {
  const std::optional<DataType> dtype = CollopsDtype(t.scalar_type());
  TORCH_CHECK(dtype.has_value(), "collops backend: reductions support bool and ",
              ReducibleDtypesText(), ", not ", t.scalar_type());
  return *dtype;
}

/// How a gather hands `t` to the communicator: in elements of its collops dtype, so that the
/// cross-rank check compares dtypes as well as sizes (ranks gathering float32 and int32 of one
/// size would otherwise swap reinterpreted bytes); as bytes where collops has no such dtype.
std::pair<DataType, int64_t> MovedAs(const at::Tensor& t) {
  const std::optional<DataType> dtype = CollopsDtype(t.scalar_type());
  if (!dtype) return {ACL_INT8, 1};
  return {*dtype, static_cast<int64_t>(t.element_size())};
}

// ReduceOp's Python name, for messages.
const char* OpName(const c10d::ReduceOp& op) {
  static const char* const kNames[] = {"SUM",  "AVG", "PRODUCT", "MIN",        "MAX",
                                       "BAND", "BOR", "BXOR",    "PREMUL_SUM", "UNUSED"};
  const auto i = static_cast<size_t>(op.op_);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

/// Counts and displacements of `size` blocks of `n` elements each, one after the other.
struct EvenBlocks {
  EvenBlocks(int size, int64_t n) : counts(size, n), displs(size) {
    for (int i = 0; i < size; ++i) displs[i] = i * n;
  }
  std::vector<int64_t> counts, displs;
};

bool IsBitwise(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
         op.op_ == c10d::ReduceOp::BXOR;
}

// AVG is SUM followed by a division on every rank (as gloo does for floats).
ReduceOp ToCollopsOp(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::AVG:
      return ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProd;
    case c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    default:
      TORCH_CHECK(
          false, "collops backend: ", what,
          " supports SUM, AVG, PRODUCT, MIN and MAX (allreduce and reduce also BAND, BOR and "
          "BXOR), not ReduceOp.",
          OpName(op));
  }
}

// What the communicator reduces for a torch reduction of `t`, checked before any rank moves data.
struct Reduction {
  at::Tensor data;  ///< `t`, or for complex its (real, imag) view
  int64_t lanes;    ///< elements of `data` per element of `t`
  DataType dtype;
  ReduceOp op;
};

Reduction ReductionOf(const at::Tensor& t, const c10d::ReduceOp& op, const char* what) {
  at::Tensor data = t;
  int64_t lanes = 1;
  if (t.is_complex()) {  // as gloo: pairs, on which only SUM and AVG mean what they do on complex
    TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG,
                "collops backend: ", what, " of complex tensors takes SUM or AVG, not ReduceOp.",
                OpName(op));
    data = at::view_as_real(t);
    lanes = 2;
  }
  TORCH_CHECK(op.op_ != c10d::ReduceOp::AVG || at::isFloatingType(data.scalar_type()),
              "collops backend: ReduceOp.AVG needs a floating-point tensor, got ", t.scalar_type());
  Reduction r{data, lanes, ReduceDtype(data), ToCollopsOp(op, what)};
  // bool as gloo and NCCL reduce it: SUM is logical or, PRODUCT logical and (on 0/1 bytes, max
  // and min), so every result byte stays a valid bool.
  if (t.scalar_type() == at::kBool) {
    if (r.op == ReduceOp::kSum) r.op = ReduceOp::kMax;
    if (r.op == ReduceOp::kProd) r.op = ReduceOp::kMin;
  }
  return r;
}

void FinishAvg(const c10d::ReduceOp& op, at::Tensor& t, int size) {
  if (op.op_ == c10d::ReduceOp::AVG) t.div_(size);
}

// AVG of float16/bfloat16 (and their complex pairs) is summed in float32 and divided there,
// rounding once at the end: a sum rounded to the narrow type first can overflow (two float16
// 60000s would average to inf) or round twice.
bool AvgInFloat32(const c10d::ReduceOp& op, const Reduction& r) {
  return op.op_ == c10d::ReduceOp::AVG && (r.dtype == ACL_FLOAT16 || r.dtype == ACL_BF16);
}

// Byte count of a tensor: data movement treats every dtype as bytes.
size_t NumBytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

void CheckCpu(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "collops backend: ", what, " takes CPU tensors, got ",
              t.device(), "; use init_process_group(\"cpu:collops,cuda:nccl\") for GPU tensors");
  TORCH_CHECK(t.layout() == at::kStrided, "collops backend: ", what,
              " takes dense (strided) tensors, got ", t.layout(),
              "; sparse tensors are not supported: call .to_dense() first, or use gloo for them");
}

// Runs `body` on a contiguous view of `t` and copies the result back when `t` was strided.
template <class Body>
void InPlace(at::Tensor& t, const char* what, Body body) {
  CheckCpu(t, what);
  if (t.is_contiguous()) {
    body(t);
    return;
  }
  at::Tensor c = t.contiguous();
  body(c);
  t.copy_(c);
}

// `t` as a flat uint8 tensor (a copy when strided). contiguous() alone is not enough: torch calls
// a tensor contiguous whatever the strides of its size-1 dims, and a dtype view needs stride 1.
at::Tensor AsBytes(const at::Tensor& t) {
  at::Tensor flat = t.reshape(-1);
  if (flat.numel() > 0 && flat.stride(0) != 1)
    flat = at::empty({flat.numel()}, t.options()).copy_(flat);
  return flat.view(at::kByte);
}

// Flattens a list of tensors into one byte buffer; `counts`/`displs` get each one's bytes.
at::Tensor Pack(const std::vector<at::Tensor>& ts, std::vector<int64_t>* counts,
                std::vector<int64_t>* displs) {
  int64_t total = 0;
  for (const auto& t : ts) {
    displs->push_back(total);
    counts->push_back(NumBytes(t));
    total += NumBytes(t);
  }
  at::Tensor buf = at::empty({total}, at::kByte);
  for (size_t i = 0; i < ts.size(); ++i) {
    CheckCpu(ts[i], "a tensor list");
    buf.narrow(0, (*displs)[i], (*counts)[i]).copy_(AsBytes(ts[i]));
  }
  return buf;
}

void Unpack(const at::Tensor& buf, std::vector<at::Tensor>& ts,
            const std::vector<int64_t>& displs) {
  for (size_t i = 0; i < ts.size(); ++i) {
    at::Tensor src = buf.narrow(0, displs[i], NumBytes(ts[i])).view(ts[i].scalar_type());
    ts[i].copy_(src.view(ts[i].sizes()));
  }
}

class CollopsBackend final : public c10d::Backend {
 public:
  // timeoutSeconds: init_process_group's timeout, 0 = COLLOPS_TIMEOUT (CommParam::timeoutSeconds).
  CollopsBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                 double timeoutSeconds)
      : Backend(rank, size), store_(store), timeoutSeconds_(timeoutSeconds) {
    // Agree on a domain now, while every rank is constructing; the communicator itself is
    // created on first use, so groups that never communicate cost no rendezvous.
    try {
      domain_ = JoinGroup(*store, rank, size, timeoutSeconds);
    } catch (const Error& e) {
      TORCH_CHECK(false, StatusName(e.status()), ": ", e.what());
    }
    layout_ = ExchangeHostLayout(*store, domain_, rank, size);
    ShareCpusWithLocalRanks(static_cast<int>(layout_.RanksOn(layout_.hostOfRank[rank]).size()));
    p2p_ = std::make_shared<DeferredP2P>(
        [this](const std::vector<PointToPoint>& ops) { return RunP2P(ops); });
  }

  ~CollopsBackend() override { p2p_->Close(); }

  /// The engine this group runs on: "lccl", or "hccl(lccl+c10d)" across hosts ("" before the
  /// first collective created it).
  std::string CommunicatorName() {
    std::lock_guard<std::mutex> lock(mu_);
    return comm_ ? comm_->BackendName() : "";
  }

  /// `bytes` bytes (uint8) that this group's communicator moves with one copy
  /// (Communicator::AllocateShared: the lccl heap on one host), or ordinary memory where it has
  /// none or its heap is full. Creates the communicator on first use, so it is collective then.
  /// The tensor keeps the communicator alive.
  at::Tensor EmptySharedBytes(int64_t bytes) {
    Comm();
    std::shared_ptr<Communicator> comm;
    {
      std::lock_guard<std::mutex> lock(mu_);
      comm = comm_;
    }
    return SharedOrEmpty({bytes}, at::kByte, std::move(comm));
  }

  const std::string getBackendName() const override { return kBackendName; }

  // TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the group in torch's ProcessGroupWrapper, which sets the
  // number here and then compares it across ranks before every collective, naming ranks that ran
  // a different number of collectives. Every rank constructs its backend in the same
  // collective call, so all count from 0 (as gloo does); nothing needs agreeing.
  void setSequenceNumberForGroup() override {}
  // The wrapper asks for the number first thing in every collective, before its own gloo barrier
  // across the ranks: queued sends and receives must run now, as they would at the start of the
  // collective without the wrapper. Else a rank whose peer waits in recv for its un-waited isend
  // enters that barrier, and both wait for ever.
  uint64_t getSequenceNumberForGroup() override {
    p2p_->Flush();
    return collectivesIssued_.load();
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    return Run(c10d::OpType::BROADCAST, tensors, [&] {
      for (auto& t : tensors) {
        InPlace(t, "broadcast", [&](at::Tensor& c) {
          // In elements of its dtype, so ranks whose tensors differ in dtype fail the check.
          const auto [dtype, es] = MovedAs(c);
          Comm().Broadcast(c.data_ptr(), NumBytes(c) / es, dtype, static_cast<int>(opts.rootRank));
        });
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    return Run(c10d::OpType::ALLREDUCE, tensors, [&] {
      for (auto& t : tensors) AllReduceOne(t, opts.reduceOp);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return Run(c10d::OpType::ALLREDUCE_COALESCED, tensors, [&] {
      for (auto& t : tensors) AllReduceOne(t, opts.reduceOp);
    });
  }

  // Every rank reduces (one AllReduce into scratch); only the root keeps the result.
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    return Run(c10d::OpType::REDUCE, tensors, [&] {
      for (auto& t : tensors) {
        at::Tensor scratch = t.contiguous().clone();
        AllReduceOne(scratch, opts.reduceOp, "reduce");
        if (getRank() == opts.rootRank) t.copy_(scratch);
      }
    });
  }

  // List form, sizes may differ per rank: one AllGatherV into a byte buffer, then unpack.
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    TORCH_CHECK(outputs.size() == inputs.size(),
                "collops backend: allgather needs one output "
                "list per input tensor");
    return Run(c10d::OpType::ALLGATHER, Flatten(outputs), [&] {
      for (size_t k = 0; k < inputs.size(); ++k) AllGatherList(outputs[k], inputs[k]);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    return allgather(outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    return Run(c10d::OpType::_ALLGATHER_BASE, {output}, [&] { AllGatherFlat(output, input); });
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions&) override {
    return Run(c10d::OpType::COALESCED, outputs, [&] {
      for (size_t k = 0; k < inputs.size(); ++k) AllGatherFlat(outputs[k], inputs[k]);
    });
  }

  // Gather is an AllGatherV into scratch whose result only the root keeps (inputs are equal).
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    return Run(c10d::OpType::GATHER, Flatten(outputs), [&] {
      const at::Tensor& in = inputs.at(0);
      at::Tensor all = at::empty({getSize() * in.numel()}, in.options());
      AllGatherFlat(all, in);
      if (getRank() != opts.rootRank) return;
      auto& outs = outputs.at(0);
      TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "collops backend: gather needs ",
                  getSize(), " outputs on the root");
      for (int i = 0; i < getSize(); ++i) {
        outs[i].copy_(all.narrow(0, i * in.numel(), in.numel()).view(outs[i].sizes()));
      }
    });
  }

  // Scatter is an AllToAllV in which only the root sends.
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    return Run(c10d::OpType::SCATTER, outputs, [&] {
      at::Tensor& out = outputs.at(0);
      const int root = static_cast<int>(opts.rootRank);
      std::vector<int64_t> send, sdispls;
      at::Tensor buf = at::empty({0}, at::kByte);
      if (getRank() == root) {
        TORCH_CHECK(static_cast<int>(inputs.at(0).size()) == getSize(),
                    "collops backend: scatter needs ", getSize(),
                    " tensors in scatter_list on the root, got ", inputs.at(0).size());
        buf = Pack(inputs.at(0), &send, &sdispls);
      } else {
        send.assign(getSize(), 0);
        sdispls.assign(getSize(), 0);
      }
      std::vector<int64_t> recv(getSize(), 0), rdispls(getSize(), 0);
      recv[root] = NumBytes(out);
      InPlace(out, "scatter", [&](at::Tensor& c) {
        Comm().AllToAllV(buf.data_ptr(), send.data(), sdispls.data(), c.data_ptr(), recv.data(),
                         rdispls.data(), ACL_INT8);
      });
    });
  }

  // List form, sizes may differ per destination: inputs packed by destination, one
  // ReduceScatterV whose per-rank counts are the inputs' sizes.
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return Run(c10d::OpType::REDUCE_SCATTER, outputs, [&] {
      for (size_t k = 0; k < outputs.size(); ++k) {
        auto& ins = inputs.at(k);
        TORCH_CHECK(static_cast<int>(ins.size()) == getSize(),
                    "collops backend: "
                    "reduce_scatter needs ",
                    getSize(), " inputs, got ", ins.size());
        std::vector<int64_t> counts, displs;
        for (auto& t : ins)
          TORCH_CHECK(t.scalar_type() == outputs[k].scalar_type(),
                      "collops backend: reduce_scatter dtypes differ");
        at::Tensor packed = Pack(ins, &counts, &displs);
        const int64_t es = outputs[k].element_size();
        for (auto& c : counts) c /= es;
        for (auto& d : displs) d /= es;
        ReduceScatterOne(outputs[k], packed, counts, displs, opts.reduceOp);
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    return Run(c10d::OpType::_REDUCE_SCATTER_BASE, {output},
               [&] { ReduceScatterFlat(output, input, opts.reduceOp); });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    return Run(c10d::OpType::COALESCED, outputs, [&] {
      for (size_t k = 0; k < inputs.size(); ++k) {
        ReduceScatterFlat(outputs[k], inputs[k], opts.reduceOp);
      }
    });
  }

  // Splits are in rows of dim 0; empty split lists mean equal splits (torch's convention).
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions&) override {
    return Run(c10d::OpType::ALLTOALL_BASE, {output}, [&] {
      CheckCpu(input, "alltoall_base");
      TORCH_CHECK(input.scalar_type() == output.scalar_type(),
                  "collops backend: all_to_all_single input is ", input.scalar_type(),
                  " but output is ", output.scalar_type());
      at::Tensor in = input.contiguous();
      // In elements of the dtype, so ranks whose tensors differ in dtype fail the check.
      const auto [dtype, es] = MovedAs(in);
      std::vector<int64_t> sc, sd, rc, rd;
      RowSplits(in, inputSplits, "input", es, &sc, &sd);
      RowSplits(output, outputSplits, "output", es, &rc, &rd);
      InPlace(output, "alltoall_base", [&](at::Tensor& c) {
        Comm().AllToAllV(in.data_ptr(), sc.data(), sd.data(), c.data_ptr(), rc.data(), rd.data(),
                         dtype);
      });
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    return Run(c10d::OpType::ALLTOALL, outputs, [&] {
      TORCH_CHECK(static_cast<int>(inputs.size()) == getSize() &&
                      static_cast<int>(outputs.size()) == getSize(),
                  "collops backend: alltoall needs ", getSize(), " inputs and outputs");
      std::vector<int64_t> sc, sd, rc, rd;
      at::Tensor in = Pack(inputs, &sc, &sd);
      at::Tensor out = Pack(outputs, &rc, &rd);
      Comm().AllToAllV(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(), rd.data(),
                       ACL_INT8);
      Unpack(out, outputs, rd);
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return Run(c10d::OpType::BARRIER, {}, [&] { Comm().Barrier(); });
  }

  // Deferred until waited on or until the next call of any other kind (deferred_p2p.h).
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int /*tag*/) override {
    TORCH_CHECK(tensors.size() == 1, "collops backend: send takes one tensor, got ",
                tensors.size());
    CheckCpu(tensors[0], "send");
    return p2p_->Send(tensors[0], dst, getRank());
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int /*tag*/) override {
    TORCH_CHECK(tensors.size() == 1, "collops backend: recv takes one tensor, got ",
                tensors.size());
    CheckCpu(tensors[0], "recv");
    return p2p_->Recv(tensors[0], src, getRank());
  }

 private:
  // The lccl communicator of this group (one host), or the hierarchical one (several), created
  // (rendezvous included) on first use.
  VerifiedCommunicator& Comm() {
    std::lock_guard<std::mutex> lock(mu_);
    // Created once. A communicator that broke (lost peer, timeout) stays: every later call fails
    // fast with its error, as torch's own backends do. Rebuilding it would start a rendezvous
    // that waits the whole timeout for a rank that is gone.
    if (!comm_) {
      std::shared_ptr<Communicator> inner;
      if (layout_.SingleHost()) {
        inner = CreateCommunicator(LcclParam(domain_, getRank(), getSize()));
      } else {
        inner = CreateHierarchical();
      }
      // Verified: torch.distributed callers pass shapes per rank, and ranks that disagree must
      // get ERROR_RANK_MISMATCH, not a lost peer or silently wrong data.
      comm_ = std::make_shared<VerifiedCommunicator>(inner, "collops backend");
    }
    return *comm_;
  }

  CommParam LcclParam(const std::string& domain, int rank, int size) const {
    CommParam p;
    p.rank = rank;
    p.rankSize = size;
    p.backend = "lccl";
    p.commMode = COMM_MULTI_PROCESS;
    p.commDomain = domain;
    p.timeoutSeconds = timeoutSeconds_;
    return p;
  }

  // Every rank creates, in this order: its host's lccl communicator, the gloo group of all ranks,
  // and the gloo group of its rail (the ranks at its local index, one per host; rail 0 is the
  // leaders). The gloo groups live under a Store prefix per creation, so a group re-created after
  // a failure never reads its predecessor's addresses.
  std::shared_ptr<Communicator> CreateHierarchical() {
    const int rank = getRank();
    const int host = layout_.hostOfRank[rank];
    const int local = layout_.LocalIndex(rank);
    std::shared_ptr<Communicator> intra = CreateCommunicator(LcclParam(
        Concat(domain_, "@host", host), local, static_cast<int>(layout_.RanksOn(host).size())));
    // Under the token: the Store outlives restarts (group_join.h).
    const std::string prefix = Concat("collops/hier.", domain_, ".", generation_++, "/");
    auto flat = std::make_shared<ProcessGroupCommunicator>(
        MakeGlooBackend(store_, prefix + "flat/", rank, getSize(), timeoutSeconds_), store_,
        prefix + "flat");
    const std::string railPrefix = Concat(prefix, "rail", local);
    auto rail = std::make_shared<ProcessGroupCommunicator>(
        MakeGlooBackend(store_, railPrefix + "/", layout_.RailRank(rank),
                        static_cast<int>(layout_.HostsOfRail(local).size()), timeoutSeconds_),
        store_, railPrefix);
    return MakeHierarchicalCommunicator(std::move(flat), std::move(intra), std::move(rail),
                                        layout_);
  }

  // Runs one collective, turning collops::Error into a torch error that names the status, and
  // wraps the outputs in a completed Work.
  template <class Body>
  c10::intrusive_ptr<c10d::Work> Run(c10d::OpType type, std::vector<at::Tensor> outputs,
                                     Body body) {
    ++collectivesIssued_;
    p2p_->Flush();  // queued sends and receives come first, as the program issued them
    try {
      body();
    } catch (const Error& e) {
      TORCH_CHECK(false, Describe(e));
    }
    return c10::make_intrusive<CompletedWork>(getRank(), type, std::move(outputs));
  }

  std::string Describe(const Error& e) const {
    return Concat("collops backend (rank ", getRank(), " of ", getSize(), ", domain ", domain_,
                  "): ", StatusName(e.status()), ": ", e.what());
  }

  // One group of queued sends and receives.
  std::string RunP2P(const std::vector<PointToPoint>& ops) {
    try {
      Comm().Exchange(ops);
      return "";
    } catch (const Error& e) {
      // The sizes in a send/recv mismatch are the engine's, who saw bytes (deferred_p2p.cpp).
      if (e.status() != ERROR_RANK_MISMATCH || !IsSendRecvMismatchMessage(e.what())) {
        return Describe(e);
      }
      return Concat(Describe(e),
                    " (send and recv move bytes here, as gloo's do, so the counts "
                    "are bytes: a float32 tensor of 5 elements is 20 int8 elements)");
    }
  }

  static std::vector<at::Tensor> Flatten(const std::vector<std::vector<at::Tensor>>& lists) {
    std::vector<at::Tensor> all;
    for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
    return all;
  }

  void AllReduceOne(at::Tensor& tensor, const c10d::ReduceOp& op, const char* what = "allreduce") {
    CheckCpu(tensor, what);
    if (IsBitwise(op)) {
      AllReduceBitwise(tensor, op, what);
      return;
    }
    Reduction r = ReductionOf(tensor, op, what);
    InPlace(r.data, "allreduce", [&](at::Tensor& c) {
      if (AvgInFloat32(op, r)) {
        at::Tensor wide = c.to(at::kFloat).contiguous();
        Comm().AllReduce(wide.data_ptr(), wide.data_ptr(), wide.numel(), ACL_FLOAT, r.op);
        FinishAvg(op, wide, getSize());
        c.copy_(wide);  // the one rounding
        return;
      }
      Comm().AllReduce(c.data_ptr(), c.data_ptr(), c.numel(), r.dtype, r.op);
      FinishAvg(op, c, getSize());
    });
  }

  // BAND/BOR/BXOR of integer and bool tensors, which gloo computes (a bool BOR is a cheap "any
  // rank"): every rank gathers every rank's tensor and folds them in rank order. R times the
  // memory of a reduction, but these carry flags and masks, not activations.
  void AllReduceBitwise(at::Tensor& tensor, const c10d::ReduceOp& op, const char* what) {
    TORCH_CHECK(!at::isFloatingType(tensor.scalar_type()) && !tensor.is_complex(),
                "collops backend: ", what, " with ReduceOp.", OpName(op),
                " needs an integer or bool tensor, got ", tensor.scalar_type());
    const at::Tensor in = tensor.contiguous();
    const auto [dtype, es] = MovedAs(in);
    const int64_t n = static_cast<int64_t>(NumBytes(in)) / es;
    const EvenBlocks blocks(getSize(), n);
    at::Tensor all = at::empty({getSize(), in.numel()}, in.options());
    // Agreed on as what it is, with the torch dtype: ranks passing BOR and BAND, a bool and a
    // uint8 tensor, or calling all_gather_into_tensor of the same size must not pair.
    Comm().AllGatherVAs(Concat("AllReduce ", OpName(op), " of ", in.scalar_type()), in.data_ptr(),
                        n, all.data_ptr(), blocks.counts.data(), blocks.displs.data(), dtype);
    at::Tensor folded = all[0].clone();
    for (int i = 1; i < getSize(); ++i) {
      switch (op.op_) {
        case c10d::ReduceOp::BAND:
          folded.bitwise_and_(all[i]);
          break;
        case c10d::ReduceOp::BOR:
          folded.bitwise_or_(all[i]);
          break;
        default:
          folded.bitwise_xor_(all[i]);
          break;
      }
    }
    tensor.copy_(folded.view(tensor.sizes()));
  }

  void AllGatherList(std::vector<at::Tensor>& outs, const at::Tensor& input) {
    TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "collops backend: allgather needs ",
                getSize(), " outputs, got ", outs.size());
    CheckCpu(input, "allgather");
    at::Tensor in = input.contiguous();
    const auto [dtype, es] = MovedAs(in);
    std::vector<int64_t> counts, displs;  // in elements of dtype
    int64_t total = 0;
    for (const auto& o : outs) {
      TORCH_CHECK(static_cast<int64_t>(NumBytes(o)) % es == 0, "collops backend: allgather ",
                  "output of ", NumBytes(o), " bytes does not hold whole ", in.scalar_type(),
                  " elements");
      counts.push_back(static_cast<int64_t>(NumBytes(o)) / es);
      displs.push_back(total);
      total += counts.back();
    }
    TORCH_CHECK(counts[getRank()] * es == static_cast<int64_t>(NumBytes(in)),
                "collops backend: allgather output ", getRank(), " has ", counts[getRank()] * es,
                " bytes but this rank's input has ", NumBytes(in));
    at::Tensor buf = at::empty({total * es}, at::kByte);
    Comm().AllGatherV(in.data_ptr(), static_cast<int64_t>(NumBytes(in)) / es, buf.data_ptr(),
                      counts.data(), displs.data(), dtype);
    for (auto& d : displs) d *= es;
    Unpack(buf, outs, displs);
  }

  void AllGatherFlat(at::Tensor& output, const at::Tensor& input) {
    CheckCpu(input, "allgather");
    at::Tensor in = input.contiguous();
    // The bytes move as they are: another output dtype would reinterpret them.
    TORCH_CHECK(output.scalar_type() == in.scalar_type(),
                "collops backend: all_gather_into_tensor output has dtype ", output.scalar_type(),
                " but the input has ", in.scalar_type());
    TORCH_CHECK(output.numel() == in.numel() * getSize(),
                "collops backend: all_gather_into_tensor "
                "output has ",
                output.numel(), " elements, expected ", in.numel() * getSize());
    const auto [dtype, es] = MovedAs(in);
    const int64_t n = static_cast<int64_t>(NumBytes(in)) / es;
    const EvenBlocks blocks(getSize(), n);
    InPlace(output, "all_gather_into_tensor", [&](at::Tensor& c) {
      Comm().AllGatherV(in.data_ptr(), n, c.data_ptr(), blocks.counts.data(), blocks.displs.data(),
                        dtype);
    });
  }

  // counts/displs in elements of `output`'s dtype.
  void ReduceScatterOne(at::Tensor& output, const at::Tensor& in, std::vector<int64_t> counts,
                        std::vector<int64_t> displs, const c10d::ReduceOp& op) {
    TORCH_CHECK(counts[getRank()] == output.numel(), "collops backend: reduce_scatter output has ",
                output.numel(), " elements but this rank's slice has ", counts[getRank()]);
    Reduction r = ReductionOf(output, op, "reduce_scatter");
    for (auto& c : counts) c *= r.lanes;
    for (auto& d : displs) d *= r.lanes;
    InPlace(r.data, "reduce_scatter", [&](at::Tensor& c) {
      if (AvgInFloat32(op, r)) {
        const int64_t n = static_cast<int64_t>(NumBytes(in) / DataTypeSize(r.dtype));
        at::Tensor wideIn =
            n == 0 ? at::empty({0}, at::kFloat)
                   : at::from_blob(in.data_ptr(), {n}, r.data.scalar_type()).to(at::kFloat);
        at::Tensor wide = at::empty({c.numel()}, at::kFloat);
        Comm().ReduceScatterV(wideIn.data_ptr(), counts.data(), displs.data(), wide.data_ptr(),
                              wide.numel(), ACL_FLOAT, r.op);
        FinishAvg(op, wide, getSize());
        c.copy_(wide.view(c.sizes()));  // the one rounding
        return;
      }
      Comm().ReduceScatterV(in.data_ptr(), counts.data(), displs.data(), c.data_ptr(), c.numel(),
                            r.dtype, r.op);
      FinishAvg(op, c, getSize());
    });
  }

  void ReduceScatterFlat(at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op) {
    CheckCpu(input, "reduce_scatter_tensor");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "collops backend: reduce_scatter_tensor output has dtype ", output.scalar_type(),
                " but the input has ", input.scalar_type());
    TORCH_CHECK(input.numel() == output.numel() * getSize(),
                "collops backend: "
                "reduce_scatter_tensor input has ",
                input.numel(), " elements, expected ", output.numel() * getSize());
    const EvenBlocks blocks(getSize(), output.numel());
    ReduceScatterOne(output, input.contiguous(), blocks.counts, blocks.displs, op);
  }

  // Byte counts and displacements of `t`'s dim-0 splits.
  // Counts and displacements of the row splits, in units of `unitBytes` (an element).
  void RowSplits(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                 int64_t unitBytes, std::vector<int64_t>* counts,
                 std::vector<int64_t>* displs) const {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t rowUnits = rows == 0 ? 0 : static_cast<int64_t>(NumBytes(t)) / rows / unitBytes;
    std::vector<int64_t> s = splits;
    if (s.empty()) {
      TORCH_CHECK(rows % getSize() == 0, "collops backend: all_to_all_single ", which, " has ",
                  rows, " rows, not divisible by ", getSize(), " ranks; pass split sizes");
      s.assign(getSize(), rows / getSize());
    }
    TORCH_CHECK(static_cast<int>(s.size()) == getSize(), "collops backend: all_to_all_single ",
                which, " split sizes have ", s.size(), " entries for ", getSize(), " ranks");
    int64_t at = 0;
    for (int64_t n : s) {
      TORCH_CHECK(n >= 0, "collops backend: negative ", which, " split size ", n);
      displs->push_back(at * rowUnits);
      counts->push_back(n * rowUnits);
      at += n;
    }
    TORCH_CHECK(at == rows, "collops backend: all_to_all_single ", which, " split sizes sum to ",
                at, " but the tensor has ", rows, " rows");
  }

  std::string domain_;
  c10::intrusive_ptr<c10d::Store> store_;
  HostLayout layout_;
  double timeoutSeconds_;  // init_process_group's timeout, 0 = COLLOPS_TIMEOUT
  int generation_ = 0;     // hierarchical communicators created so far
  std::mutex mu_;
  std::shared_ptr<DeferredP2P> p2p_;
  std::shared_ptr<VerifiedCommunicator> comm_;
  std::atomic<uint64_t> collectivesIssued_{0};  // collectives only, not sends and receives
};

// The group's timeout in seconds when the caller chose one; 0 when it is torch's default (what
// every group gets from an init_process_group or new_group without timeout=), so COLLOPS_TIMEOUT
// (default 300 s) stays in charge rather than torch's 30 minutes.
double ChosenTimeoutSeconds(const pybind11::object& timeout) {
  if (timeout.is_none()) return 0;
  const pybind11::object fallback =
      pybind11::module_::import("torch.distributed.constants").attr("default_pg_timeout");
  if (timeout.equal(fallback)) return 0;
  const double seconds = timeout.attr("total_seconds")().cast<double>();
  TORCH_CHECK(seconds > 0, "collops backend: the process group's timeout must be positive, got ",
              seconds, " s");
  return seconds;
}

c10::intrusive_ptr<c10d::Backend> CreateBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size,
                                                const pybind11::object& timeout) {
  return c10::make_intrusive<CollopsBackend>(store, rank, size, ChosenTimeoutSeconds(timeout));
}

std::string CommunicatorName(const c10::intrusive_ptr<c10d::Backend>& backend) {
  auto* collops = dynamic_cast<CollopsBackend*>(backend.get());
  TORCH_CHECK(collops != nullptr, "communicator_name: ", backend->getBackendName(),
              " is not a collops backend");
  return collops->CommunicatorName();
}

// EmptySharedBytes of a collops group's backend, handed to Python as a DLPack capsule
// (torch.from_dlpack): a tensor return would need torch_python's pybind casters.
pybind11::capsule EmptySharedBytes(const c10::intrusive_ptr<c10d::Backend>& backend,
                                   int64_t bytes) {
  auto* collops = dynamic_cast<CollopsBackend*>(backend.get());
  TORCH_CHECK(collops != nullptr, "empty_shared: ", backend->getBackendName(),
              " is not a collops backend");
  TORCH_CHECK(bytes >= 0, "empty_shared: ", bytes, " bytes");
  at::Tensor memory;
  {
    // Without the GIL, as communicator_name: creating the communicator may need it elsewhere.
    pybind11::gil_scoped_release release;
    memory = collops->EmptySharedBytes(bytes);
  }
  DLManagedTensor* managed = at::toDLPack(memory);
  return pybind11::capsule(managed, "dltensor", [](PyObject* capsule) {
    // Still named "dltensor" only when nobody consumed it (from_dlpack renames it).
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* unused = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
      if (unused->deleter != nullptr) unused->deleter(unused);
    }
  });
}

}  // namespace
}  // namespace collops

// Loaded by collops/_c10d_backend.py from this same library file (see the header comment).
PYBIND11_MODULE(_c10d, m) {
  m.doc() = "The collops torch.distributed backend factory, and what Python reaches beyond it.";
  pybind11::module_::import("torch.distributed");  // registers the Store and Backend types
  m.def("create_backend", &collops::CreateBackend, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout"));
  // Without the GIL: a collective creating the communicator holds the backend's lock and may need
  // the GIL (gloo groups are made through Python) while this waits for that lock.
  m.def("communicator_name", &collops::CommunicatorName, pybind11::arg("backend"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "The engine a collops group's backend runs on: \"lccl\" on one host, "
        "\"hccl(lccl+c10d)\" across hosts, \"\" before its first collective.");
  m.def(
      "empty_shared_bytes", &collops::EmptySharedBytes, pybind11::arg("backend"),
      pybind11::arg("bytes"),
      "A DLPack capsule of `bytes` uint8 that the group's lccl communicator moves with one copy.");
  // Without the GIL: freeing a communicator may wait for threads of it that need the GIL.
  m.def(
      "release_communicators",
      [](const std::optional<std::string>& commDomain) {
        return collops::DefaultContext().Communicators().Release(commDomain);
      },
      pybind11::arg("comm_domain"), pybind11::call_guard<pybind11::gil_scoped_release>(),
      "Drops the default context's communicators of comm_domain (None: all); returns how many.");
}
