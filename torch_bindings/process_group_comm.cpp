// ProcessGroupCommunicator: every collops primitive over a torch.distributed group's backend.
//
// How each primitive maps (R = group size; counts in elements, moved as bytes unless reduced):
// - AllGatherBytes, Broadcast, Barrier: the backend's own collective (host memory is staged
//   through the device for AllGatherBytes, whose callers always pass host buffers).
// - AllReduce: allreduce in place on `out`. int16 is reduced as int32 (neither gloo nor NCCL
//   reduces int16; sums and products wrap back to the same int16 bits); on CPU float16 and
//   bfloat16 are reduced as float32 and rounded once (DESIGN.md; gloo would accumulate in the
//   narrow type). NCCL reduces float16/bfloat16 natively. Floating-point max and min also
//   max-reduce an isnan mask (uint8) and put NaN where it is set: gloo drops NaNs, lccl lets
//   them win.
// - AllGatherV: every block padded to the largest count, one allgather into tensor, blocks copied
//   to their rdispls (skipped when the layout is already the padded one).
// - ReduceScatterV: this rank's send blocks packed in rank order, padded to the largest count;
//   one reduce_scatter into tensor; the first recvCount elements kept. A backend without
//   reduce_scatter gets allreduce + slice instead. Float max/min carry a NaN mask as AllReduce.
// - AllToAllV: one all_to_all_single with byte splits; blocks packed in rank order first (and
//   unpacked to rdispls after) only when the displacements are not already packed.
// - Send/Recv/Exchange: a (count, dtype) header each way, then the payload, on tags of their own;
//   a group posts every op before it waits on any.
// - Split: AllGatherBytes of (color, key), then a gloo group per color over a PrefixStore.
#include "process_group_comm.h"

#include <Python.h>
#include <pybind11/pybind11.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "collops/backend.h"
#include "collops/status.h"

// The holder torch's own bindings use, so Store and Backend objects cross to and from Python.
PYBIND11_DECLARE_HOLDER_TYPE(T, c10::intrusive_ptr<T>, true)

namespace collops {
namespace {

namespace py = pybind11;

// Tags of the Send/Recv handshake and payload: apart from tag 0, which applications use.
constexpr int kAnnounceTag = 0x636f01;
constexpr int kReplyTag = 0x636f02;
constexpr int kDataTag = 0x636f03;

thread_local c10::Device tDevice{c10::kCPU};

// Holds the GIL (from any thread; OperationTorch runs collectives with it released).
class PythonLock {
 public:
  PythonLock() : state_(PyGILState_Ensure()) {}
  ~PythonLock() { PyGILState_Release(state_); }
  PythonLock(const PythonLock&) = delete;
  PythonLock& operator=(const PythonLock&) = delete;

 private:
  PyGILState_STATE state_;
};

void RequirePython(const char* forWhat) {
  if (!Py_IsInitialized()) {
    Fail(ERROR_BACKEND_UNAVAILABLE, "backend c10d: ", forWhat,
         " needs torch.distributed, but this process has no Python interpreter");
  }
}

at::ScalarType ScalarTypeOf(DataType dtype) {
  switch (dtype) {
    case ACL_FLOAT:
      return at::kFloat;
    case ACL_FLOAT16:
      return at::kHalf;
    case ACL_BF16:
      return at::kBFloat16;
    case ACL_INT8:
      return at::kChar;
    case ACL_INT16:
      return at::kShort;
    case ACL_INT32:
      return at::kInt;
    case ACL_INT64:
      return at::kLong;
    case ACL_UINT8:
      return at::kByte;
    case ACL_DOUBLE:
      return at::kDouble;
    case ACL_BOOL:
      return at::kBool;
    default:
      Fail(ERROR_INVALID_TENSOR_DTYPE, "backend c10d: dtype ", DataTypeName(dtype),
           " has no torch equivalent");
  }
}

// The dtype a reduction of `dtype` runs in (see the header comment).
at::ScalarType ReductionType(DataType dtype, const c10::Device& device) {
  if (dtype == ACL_INT16) return at::kInt;
  if (device.is_cpu() && (dtype == ACL_FLOAT16 || dtype == ACL_BF16)) return at::kFloat;
  return ScalarTypeOf(dtype);
}

// True when a max or min over `type` must carry its NaNs beside the data: gloo compares with
// std::max/std::min semantics, so a NaN survives on some ranks' operand orders and is dropped on
// others, where lccl (like torch.maximum) lets NaN win. Any backend gets the same treatment.
bool NeedsNanMask(at::ScalarType type, ReduceOp op) {
  return (op == ReduceOp::kMax || op == ReduceOp::kMin) && at::isFloatingType(type);
}

// Where `nans` (a reduced isnan mask, as uint8) is set, `t` becomes the canonical quiet NaN, the
// bits lccl's kernels give a NaN result (0x7fc00000 in float32, 0x7e00 float16, 0x7fc0
// bfloat16). Applied to the narrow result: torch's vectorised float32 -> bfloat16 conversion
// turns a NaN into 0xffff.
void PutNans(at::Tensor& t, const at::Tensor& nans) {
  t.masked_fill_(nans.to(at::kBool), std::numeric_limits<double>::quiet_NaN());
}

c10d::ReduceOp ToTorchOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceOp::kProd:
      return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    case ReduceOp::kMax:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceOp::kMin:
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
  }
  Fail(ERROR_INVALID_PARAM, "backend c10d: unknown reduce op ", static_cast<int>(op));
}

at::TensorOptions OptionsOf(at::ScalarType type) {
  return at::TensorOptions().dtype(type).device(CurrentTensorDevice());
}

// A tensor over `numel` elements at `data` on CurrentTensorDevice() (no copy). Empty views get
// their own (empty) storage, so no backend ever sees a null data pointer.
at::Tensor View(const void* data, int64_t numel, at::ScalarType type) {
  if (numel == 0 || data == nullptr) return at::empty({0}, OptionsOf(type));
  return at::from_blob(const_cast<void*>(data), {numel}, OptionsOf(type));
}

at::Tensor Bytes(const void* data, int64_t bytes) { return View(data, bytes, at::kByte); }

// The extent (in elements) a set of blocks covers: max over j of displs[j] + counts[j].
int64_t Extent(const int64_t* counts, const int64_t* displs, int n) {
  int64_t extent = 0;
  for (int j = 0; j < n; ++j) {
    if (counts[j] > 0) extent = std::max(extent, displs[j] + counts[j]);
  }
  return extent;
}

// True when block j starts where block j-1 ended, from 0: the layout torch's split sizes mean.
bool Packed(const int64_t* counts, const int64_t* displs, int n) {
  int64_t at = 0;
  for (int j = 0; j < n; ++j) {
    if (counts[j] > 0 && displs[j] != at) return false;
    at += counts[j];
  }
  return true;
}

bool Contains(std::string text, const std::string& lowerNeedle) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text.find(lowerNeedle) != std::string::npos;
}

// The Status a failed torch collective means for collops: a timeout or a vanished peer breaks
// the group for good (so the pool stops handing it out); anything else is a communication failure.
Status StatusOfTorchError(const std::string& message) {
  if (Contains(message, "timed out") || Contains(message, "timeout")) return ERROR_TIMEOUT;
  if (Contains(message, "connection closed") || Contains(message, "connection reset") ||
      Contains(message, "broken pipe") || Contains(message, "peer")) {
    return ERROR_PEER_LOST;
  }
  return ERROR_COMM_FAIL;
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out.empty() ? "none" : out;
}

// The name torch.distributed knows the group `domain` by ("" = the default group's name).
std::string ResolveGroupName(const std::string& domain) {
  RequirePython("commDomain lookup");
  PythonLock lock;
  try {
    py::module_ dist = py::module_::import("torch.distributed");
    if (!dist.attr("is_available")().cast<bool>()) {
      Fail(ERROR_BACKEND_UNAVAILABLE,
           "backend c10d: this torch build has no torch.distributed (is_available() is False)");
    }
    if (!dist.attr("is_initialized")().cast<bool>()) {
      Fail(ERROR_BACKEND_UNAVAILABLE,
           "backend c10d: torch.distributed is not initialised in this process; call "
           "torch.distributed.init_process_group(...) before using backend \"c10d\"");
    }
    py::module_ world = py::module_::import("torch.distributed.distributed_c10d");
    const std::string defaultName =
        py::str(world.attr("_get_default_group")().attr("group_name")).cast<std::string>();
    std::vector<std::string> known;
    for (auto item : world.attr("_world").attr("pg_names").cast<py::dict>()) {
      known.push_back(py::str(item.second).cast<std::string>());
    }
    std::sort(known.begin(), known.end());
    const std::string name = domain.empty() ? defaultName : domain;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      Fail(ERROR_INVALID_PARAM, "backend c10d: commDomain \"", domain,
           "\" is not the name of a torch.distributed process group of this process (known "
           "groups: ",
           Join(known), "; \"\" means the default group \"", defaultName,
           "\"; a rank outside a new_group's ranks has no such group)");
    }
    return name;
  } catch (py::error_already_set& e) {
    Fail(ERROR_BACKEND_UNAVAILABLE,
         "backend c10d: asking torch.distributed for its groups failed: ", e.what());
  }
}

}  // namespace

c10::Device CurrentTensorDevice() { return tDevice; }

TensorDeviceScope::TensorDeviceScope(c10::Device device) : previous_(tDevice) { tDevice = device; }
TensorDeviceScope::~TensorDeviceScope() { tDevice = previous_; }

ProcessGroupCommunicator::ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                   std::string name)
    : group_(std::move(group)),
      store_(group_->getStore()),
      name_(std::move(name)),
      rank_(group_->getRank()),
      size_(group_->getSize()) {}

ProcessGroupCommunicator::ProcessGroupCommunicator(c10::intrusive_ptr<c10d::Backend> backend,
                                                   c10::intrusive_ptr<c10d::Store> store,
                                                   std::string name)
    : backend_(std::move(backend)),
      store_(std::move(store)),
      name_(std::move(name)),
      rank_(backend_->getRank()),
      size_(backend_->getSize()) {}

std::string ProcessGroupCommunicator::Describe() const {
  const std::string engine = group_ ? group_->getBackendName() : backend_->getBackendName();
  return Concat(group_ ? "torch.distributed group \"" : "collops gloo group \"", name_, "\" (",
                engine, ")");
}

bool ProcessGroupCommunicator::Broken() const {
  if (broken_) return true;
  if (!group_) return false;
  try {
    return c10d::resolve_process_group(name_).get() != group_.get();
  } catch (const std::exception&) {
    return true;  // destroyed: no longer registered under its name
  }
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupCommunicator::BackendFor(
    const c10::Device& device) const {
  if (backend_) {
    if (!device.is_cpu()) {
      Fail(ERROR_BACKEND_UNAVAILABLE, "backend c10d: ", Describe(), " takes CPU memory, not ",
           device.str());
    }
    return backend_;
  }
  if (!group_->hasBackendForDeviceType(device.type())) {
    Fail(ERROR_BACKEND_UNAVAILABLE, "backend c10d: ", Describe(), " has no backend for ",
         c10::DeviceTypeName(device.type(), /*lower_case=*/true),
         " tensors (init_process_group(\"cpu:gloo,cuda:nccl\") serves both)");
  }
  return group_->getBackend(device.type());
}

void ProcessGroupCommunicator::Wait(const c10::intrusive_ptr<c10d::Work>& work) const {
  work->wait();
}

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

void ProcessGroupCommunicator::Failed(const char* primitive, const std::string& what) {
  const Status status = StatusOfTorchError(what);
  const std::string message = Concat("backend c10d: ", primitive, " on ", Describe(), ", rank ",
                                     rank_, " of ", size_, ", failed: ", what);
  if (status == ERROR_TIMEOUT || status == ERROR_PEER_LOST) {
    broken_ = true;
    if (failureHook_) failureHook_(status, message);
  }
  Fail(status, message);
}

void ProcessGroupCommunicator::AllGatherBytes(const void* in, void* out, size_t bytes) {
  if (bytes == 0) return;
  Guard("AllGatherBytes", [&] {
    const c10::Device device = CurrentTensorDevice();
    const int64_t n = static_cast<int64_t>(bytes);
    // Callers pass host buffers (signature records, counts): stage them through the device.
    at::Tensor src = at::from_blob(const_cast<void*>(in), {n}, at::kByte).to(device);
    at::Tensor dst = at::empty({n * size_}, OptionsOf(at::kByte));
    Wait(BackendFor(device)->_allgather_base(dst, src, c10d::AllgatherOptions()));
    at::from_blob(out, {n * size_}, at::kByte).copy_(dst);
  });
}

void ProcessGroupCommunicator::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                         ReduceOp op) {
  if (count == 0) return;
  Guard("AllReduce", [&] {
    const c10::Device device = CurrentTensorDevice();
    const at::ScalarType type = ScalarTypeOf(dtype);
    const at::ScalarType wide = ReductionType(dtype, device);
    at::Tensor src = View(in, count, type);
    at::Tensor dst = View(out, count, type);
    at::Tensor buffer = dst;
    if (wide != type) {
      buffer = src.to(wide);
    } else if (in != out) {
      dst.copy_(src);
    }
    // Taken before the reduction overwrites the buffer; max-reduced, it marks every element
    // that was NaN on any rank.
    at::Tensor nans;
    if (NeedsNanMask(wide, op)) nans = buffer.isnan().to(at::kByte);
    auto allReduce = [&](at::Tensor& t, ReduceOp reduction) {
      c10d::AllreduceOptions opts;
      opts.reduceOp = ToTorchOp(reduction);
      std::vector<at::Tensor> tensors{t};
      Wait(BackendFor(device)->allreduce(tensors, opts));
    };
    allReduce(buffer, op);
    if (nans.defined()) allReduce(nans, ReduceOp::kMax);
    if (wide != type) dst.copy_(buffer);  // the one rounding back to the narrow type
    if (nans.defined()) PutNans(dst, nans);
  });
}

void ProcessGroupCommunicator::AllGatherV(const void* in, size_t sendCount, void* out,
                                          const int64_t* recvCounts, const int64_t* rdispls,
                                          DataType dtype) {
  const int64_t most = *std::max_element(recvCounts, recvCounts + size_);
  if (most == 0) return;
  Guard("AllGatherV", [&] {
    const c10::Device device = CurrentTensorDevice();
    const int64_t es = static_cast<int64_t>(DataTypeSize(dtype));
    bool padded = true;  // out already is R blocks of `most` elements in rank order
    for (int i = 0; i < size_; ++i) padded &= recvCounts[i] == most && rdispls[i] == i * most;
    at::Tensor block = Bytes(in, static_cast<int64_t>(sendCount) * es);
    if (static_cast<int64_t>(sendCount) != most) {
      at::Tensor full = at::zeros({most * es}, OptionsOf(at::kByte));
      full.narrow(0, 0, block.numel()).copy_(block);
      block = full;
    }
    at::Tensor all = padded ? Bytes(out, size_ * most * es)
                            : at::empty({size_ * most * es}, OptionsOf(at::kByte));
    Wait(BackendFor(device)->_allgather_base(all, block, c10d::AllgatherOptions()));
    if (padded) return;
    auto* base = static_cast<uint8_t*>(out);
    for (int i = 0; i < size_; ++i) {
      if (recvCounts[i] == 0) continue;
      Bytes(base + rdispls[i] * es, recvCounts[i] * es)
          .copy_(all.narrow(0, i * most * es, recvCounts[i] * es));
    }
  });
}

void ProcessGroupCommunicator::ReduceScatterPadded(at::Tensor& packed, at::Tensor& result,
                                                   ReduceOp op) {
  auto backend = BackendFor(CurrentTensorDevice());
  if (!noReduceScatter_) {
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = ToTorchOp(op);
    try {
      Wait(backend->_reduce_scatter_base(result, packed, opts));
      return;
    } catch (const c10::Error& e) {
      // Thrown by Backend's default before anything moved, alike on every rank.
      if (!Contains(e.what_without_backtrace(), "does not support")) throw;
      noReduceScatter_ = true;
    }
  }
  c10d::AllreduceOptions opts;
  opts.reduceOp = ToTorchOp(op);
  std::vector<at::Tensor> tensors{packed};
  Wait(backend->allreduce(tensors, opts));
  result.copy_(packed.narrow(0, rank_ * result.numel(), result.numel()));
}

void ProcessGroupCommunicator::ReduceScatterV(const void* in, const int64_t* sendCounts,
                                              const int64_t* sdispls, void* out, size_t recvCount,
                                              DataType dtype, ReduceOp op) {
  const int64_t most = *std::max_element(sendCounts, sendCounts + size_);
  if (most == 0) return;
  Guard("ReduceScatterV", [&] {
    const c10::Device device = CurrentTensorDevice();
    const at::ScalarType type = ScalarTypeOf(dtype);
    const at::ScalarType wide = ReductionType(dtype, device);
    at::Tensor src = View(in, Extent(sendCounts, sdispls, size_), type);
    // Padding is zero and its reduction is thrown away, so any op may run over it.
    at::Tensor packed = at::zeros({size_ * most}, OptionsOf(wide));
    for (int r = 0; r < size_; ++r) {
      if (sendCounts[r] == 0) continue;
      packed.narrow(0, r * most, sendCounts[r]).copy_(src.narrow(0, sdispls[r], sendCounts[r]));
    }
    // As in AllReduce: an isnan mask, reduce-scattered with max, puts back the NaNs gloo drops.
    at::Tensor nans;
    if (NeedsNanMask(wide, op)) {
      at::Tensor packedNans = packed.isnan().to(at::kByte);
      nans = at::empty({most}, OptionsOf(at::kByte));
      ReduceScatterPadded(packedNans, nans, ReduceOp::kMax);
    }
    at::Tensor result = at::empty({most}, OptionsOf(wide));
    ReduceScatterPadded(packed, result, op);
    if (recvCount > 0) {
      const auto n = static_cast<int64_t>(recvCount);
      at::Tensor mine = View(out, n, type);
      mine.copy_(result.narrow(0, 0, n));
      if (nans.defined()) PutNans(mine, nans.narrow(0, 0, n));
    }
  });
}

void ProcessGroupCommunicator::AllToAllV(const void* in, const int64_t* sendCounts,
                                         const int64_t* sdispls, void* out,
                                         const int64_t* recvCounts, const int64_t* rdispls,
                                         DataType dtype) {
  StartAllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype);
  FinishAllToAllV();
}

void ProcessGroupCommunicator::StartAllToAllV(const void* in, const int64_t* sendCounts,
                                              const int64_t* sdispls, void* out,
                                              const int64_t* recvCounts, const int64_t* rdispls,
                                              DataType dtype) {
  if (started_ != nullptr) {
    Fail(ERROR_INTERNAL_ERROR, "backend c10d: StartAllToAllV on ", Describe(), " (rank ", rank_,
         "): the AllToAllV started before it was not finished");
  }
  Guard("AllToAllV", [&] {
    const c10::Device device = CurrentTensorDevice();
    const int64_t es = static_cast<int64_t>(DataTypeSize(dtype));
    std::vector<int64_t> inSplits(size_), outSplits(size_);
    for (int j = 0; j < size_; ++j) {
      inSplits[j] = sendCounts[j] * es;
      outSplits[j] = recvCounts[j] * es;
    }
    const int64_t sendBytes = std::accumulate(inSplits.begin(), inSplits.end(), int64_t{0});
    const int64_t recvBytes = std::accumulate(outSplits.begin(), outSplits.end(), int64_t{0});
    const bool inPacked = Packed(sendCounts, sdispls, size_);
    const bool outPacked = Packed(recvCounts, rdispls, size_);
    at::Tensor src = inPacked ? Bytes(in, sendBytes) : at::empty({sendBytes}, OptionsOf(at::kByte));
    if (!inPacked) {
      at::Tensor whole = Bytes(in, Extent(sendCounts, sdispls, size_) * es);
      int64_t at = 0;
      for (int j = 0; j < size_; ++j) {
        if (inSplits[j] > 0)
          src.narrow(0, at, inSplits[j]).copy_(whole.narrow(0, sdispls[j] * es, inSplits[j]));
        at += inSplits[j];
      }
    }
    auto started = std::make_unique<StartedAllToAllV>();
    started->received =
        outPacked ? Bytes(out, recvBytes) : at::empty({recvBytes}, OptionsOf(at::kByte));
    if (!outPacked) {
      started->out = static_cast<uint8_t*>(out);
      started->bytesFrom = outSplits;
      for (int j = 0; j < size_; ++j) started->placeAt.push_back(rdispls[j] * es);
    }
    // Copies: alltoall_base takes the split vectors by reference and gloo's moves them into its
    // Work.
    std::vector<int64_t> outArg = outSplits, inArg = inSplits;
    started->sent = src;
    started->work = BackendFor(device)->alltoall_base(started->received, src, outArg, inArg,
                                                      c10d::AllToAllOptions());
    started_ = std::move(started);
  });
}

void ProcessGroupCommunicator::FinishAllToAllV() {
  if (started_ == nullptr) return;
  const std::unique_ptr<StartedAllToAllV> started = std::move(started_);
  Guard("AllToAllV", [&] {
    Wait(started->work);
    if (started->out == nullptr) return;
    int64_t at = 0;
    for (int j = 0; j < size_; ++j) {
      const int64_t bytes = started->bytesFrom[j];
      if (bytes > 0) {
        Bytes(started->out + started->placeAt[j], bytes)
            .copy_(started->received.narrow(0, at, bytes));
      }
      at += bytes;
    }
  });
}

void ProcessGroupCommunicator::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  if (count == 0) return;
  Guard("Broadcast", [&] {
    const c10::Device device = CurrentTensorDevice();
    std::vector<at::Tensor> tensors{Bytes(buf, static_cast<int64_t>(count * DataTypeSize(dtype)))};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    Wait(BackendFor(device)->broadcast(tensors, opts));
  });
}

// A send announces (count, dtype) and posts its payload at once, then learns from the receiver's
// reply whether they matched; a receive waits for the announcement, takes the payload (into
// scratch, dropped, when it does not match) and replies with what it expected, so a mismatch
// fails on both sides and writes nothing. A group posts every send before it waits on anything,
// and waits on its receives in order: backends' send/recv Works (gloo's) complete only inside
// wait(), so a group cannot poll them, and since every send of every group is posted when the
// group starts, a receive waits only for its peer to have started the matching group.
void ProcessGroupCommunicator::RunGroup(const std::vector<PointToPoint>& ops) {
  for (const PointToPoint& op : ops) {
    if (op.peer < 0 || op.peer >= size_ || op.peer == rank_) {
      Fail(ERROR_INVALID_PARAM,
           "backend c10d: ", op.kind == PointToPoint::Kind::kSend ? "Send to" : "Recv from",
           " rank ", op.peer, ", which is not another rank of ", size_);
    }
  }
  auto backend = BackendFor(CurrentTensorDevice());
  const size_t n = ops.size();
  std::vector<int64_t> mineValues(2 * n);
  for (size_t i = 0; i < n; ++i) {
    mineValues[2 * i] = static_cast<int64_t>(ops[i].count);
    mineValues[2 * i + 1] = static_cast<int64_t>(ops[i].dtype);
  }
  const at::Tensor mineAll =
      at::from_blob(mineValues.data(), {static_cast<int64_t>(2 * n)}, at::kLong)
          .to(CurrentTensorDevice());
  const at::Tensor theirsAll = at::empty({static_cast<int64_t>(2 * n)}, OptionsOf(at::kLong));
  auto mineOf = [&](size_t i) { return std::vector<at::Tensor>{mineAll.narrow(0, 2 * i, 2)}; };
  auto theirsOf = [&](size_t i) { return std::vector<at::Tensor>{theirsAll.narrow(0, 2 * i, 2)}; };
  auto payloadOf = [](void* data, int64_t bytes) {
    return std::vector<at::Tensor>{Bytes(data, bytes)};
  };
  std::vector<c10::intrusive_ptr<c10d::Work>> works(n), replies;
  for (size_t i = 0; i < n; ++i) {
    const PointToPoint& op = ops[i];
    if (op.kind != PointToPoint::Kind::kSend) continue;
    auto announce = mineOf(i);
    replies.push_back(backend->send(announce, op.peer, kAnnounceTag));
    if (op.count != 0) {
      auto payload = payloadOf(op.buf, static_cast<int64_t>(op.count * DataTypeSize(op.dtype)));
      replies.push_back(backend->send(payload, op.peer, kDataTag));
    }
    auto reply = theirsOf(i);
    works[i] = backend->recv(reply, op.peer, kReplyTag);
  }
  std::string mismatch;
  auto noteMismatch = [&](size_t i, const int64_t* t) {
    if (!mismatch.empty()) return;
    const PointToPoint& op = ops[i];
    const int64_t* m = &mineValues[2 * i];
    mismatch = op.kind == PointToPoint::Kind::kSend
                   ? SendRecvMismatchMessage("c10d", rank_, m[0], m[1], op.peer, t[0], t[1])
                   : SendRecvMismatchMessage("c10d", op.peer, t[0], t[1], rank_, m[0], m[1]);
  };
  auto theirValues = [&](size_t i, int64_t* t) {
    const at::Tensor got = theirsAll.narrow(0, 2 * i, 2).cpu();
    t[0] = got[0].item<int64_t>();
    t[1] = got[1].item<int64_t>();
  };
  for (size_t i = 0; i < n; ++i) {
    const PointToPoint& op = ops[i];
    if (op.kind != PointToPoint::Kind::kRecv) continue;
    auto announce = theirsOf(i);
    Wait(backend->recv(announce, op.peer, kAnnounceTag));
    int64_t t[2];
    theirValues(i, t);
    const bool match = t[0] == mineValues[2 * i] && t[1] == mineValues[2 * i + 1];
    const int64_t bytes = t[0] * static_cast<int64_t>(DataTypeSize(static_cast<DataType>(t[1])));
    if (bytes > 0) {
      at::Tensor drop;
      if (!match) drop = at::empty({bytes}, OptionsOf(at::kByte));
      auto payload = payloadOf(match ? op.buf : drop.data_ptr(), bytes);
      Wait(backend->recv(payload, op.peer, kDataTag));
    }
    if (!match) noteMismatch(i, t);
    auto reply = mineOf(i);
    Wait(backend->send(reply, op.peer, kReplyTag));
  }
  for (const auto& work : replies) Wait(work);
  for (size_t i = 0; i < n; ++i) {
    if (ops[i].kind != PointToPoint::Kind::kSend) continue;
    Wait(works[i]);
    int64_t t[2];
    theirValues(i, t);
    if (t[0] != mineValues[2 * i] || t[1] != mineValues[2 * i + 1]) noteMismatch(i, t);
  }
  if (!mismatch.empty()) Fail(ERROR_RANK_MISMATCH, mismatch);
}

void ProcessGroupCommunicator::Send(const void* buf, size_t count, DataType dtype, int peer) {
  Guard("Send", [&] { RunGroup({PointToPoint::Send(buf, count, dtype, peer)}); });
}

void ProcessGroupCommunicator::Recv(void* buf, size_t count, DataType dtype, int peer) {
  Guard("Recv", [&] { RunGroup({PointToPoint::Recv(buf, count, dtype, peer)}); });
}

void ProcessGroupCommunicator::Exchange(const std::vector<PointToPoint>& ops) {
  Guard("Exchange", [&] { RunGroup(ops); });
}

void ProcessGroupCommunicator::Barrier() {
  Guard("Barrier",
        [&] { Wait(BackendFor(CurrentTensorDevice())->barrier(c10d::BarrierOptions())); });
}

std::shared_ptr<Communicator> ProcessGroupCommunicator::Split(int color, int key) {
  struct Choice {
    int32_t color;
    int32_t key;
  };
  const Choice mine{color, key};
  std::vector<Choice> all(size_);
  AllGatherBytes(&mine, all.data(), sizeof(Choice));  // host memory, staged as AllGatherBytes does
  const int index = splits_++;
  if (color < 0) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < size_; ++r) {
    if (all[r].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[a].key < all[b].key; });
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  if (!store_) {
    Fail(ERROR_BACKEND_UNAVAILABLE, "backend c10d: ", Describe(),
         " has no store to build sub-groups from, so Split is not available on it");
  }
  const std::string prefix = Concat(name_, "/collops.split.", index, ".color", color);
  auto backend = MakeGlooBackend(store_, prefix + "/", newRank, static_cast<int>(members.size()));
  return std::make_shared<ProcessGroupCommunicator>(std::move(backend), store_, prefix);
}

c10::intrusive_ptr<c10d::Backend> MakeGlooBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const std::string& prefix, int rank, int size,
                                                  double timeoutSeconds) {
  RequirePython("creating a gloo group");
  PythonLock lock;
  try {
    py::module_ dist = py::module_::import("torch.distributed");
    py::object prefixed = dist.attr("PrefixStore")(prefix, py::cast(store));
    py::object timeout =
        py::module_::import("datetime").attr("timedelta")(0, CommTimeoutSeconds(timeoutSeconds));
    py::object gloo = dist.attr("ProcessGroupGloo")(prefixed, rank, size, timeout);
    return gloo.cast<c10::intrusive_ptr<c10d::Backend>>();
  } catch (py::error_already_set& e) {
    Fail(ERROR_COMM_FAIL, "backend c10d: creating a gloo group (rank ", rank, " of ", size,
         ", store prefix \"", prefix, "\") failed: ", e.what());
  } catch (const py::cast_error& e) {
    Fail(ERROR_INTERNAL_ERROR,
         "backend c10d: torch's ProcessGroupGloo did not convert to a "
         "c10d::Backend: ",
         e.what());
  }
}

std::shared_ptr<Communicator> AdoptProcessGroup(const CommParam& param) {
  const std::string name = ResolveGroupName(param.commDomain);
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  try {
    group = c10d::resolve_process_group(name);
  } catch (const std::exception& e) {
    Fail(ERROR_INVALID_PARAM, "backend c10d: torch.distributed lists group \"", name,
         "\" but its registry does not resolve it: ", e.what());
  }
  const std::string which = Concat("torch.distributed group \"", name, "\"");
  if (param.rankSize != group->getSize()) {
    Fail(ERROR_INVALID_PARAM, "backend c10d: rankSize = ", param.rankSize, " but ", which,
         " (commDomain \"", param.commDomain, "\") has ", group->getSize(), " ranks");
  }
  if (param.rank != group->getRank()) {
    Fail(ERROR_INVALID_PARAM, "backend c10d: rank = ", param.rank, " but this process is rank ",
         group->getRank(), " of ", which, " (commDomain \"", param.commDomain, "\")");
  }
  return std::make_shared<ProcessGroupCommunicator>(std::move(group), name);
}

namespace {
[[maybe_unused]] const bool kRegistered =
    RegisterCommunicatorBackend("c10d", COMM_MULTI_PROCESS, AdoptProcessGroup);
}  // namespace

}  // namespace collops
