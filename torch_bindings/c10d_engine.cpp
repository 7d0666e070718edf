// The "c10d" engine: every collops primitive over a torch.distributed group's backend
// (c10d_engine.h).
//
// How each primitive maps (R = group size; counts in elements, moved as bytes unless reduced):
// - AllGatherBytes, Broadcast, Barrier: the backend's own collective (host memory is staged
//   through the device for AllGatherBytes, whose callers always pass host buffers).
// - AllReduce: allreduce in place on `out`. int16 is reduced as int32 (neither gloo nor NCCL
//   reduces int16; sums and products wrap back to the same int16 bits); on CPU float16 and
//   bfloat16 are reduced as float32 and rounded once, as lccl does (gloo would accumulate in the
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
// - Send/Recv/Exchange (c10d_engine_p2p.cpp): a (count, dtype) header each way, then the payload,
//   on tags of their own; a group posts every op before it waits on any.
// - Split: AllGatherBytes of (color, key), then a gloo group per color over a PrefixStore
//   (c10d_groups.h).
#include "c10d_engine.h"

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

#include "c10d_engine_tensors.h"
#include "c10d_groups.h"
#include "collops/status.h"
#include "dtype_map.h"

namespace collops {
namespace {

thread_local c10::Device tDevice{c10::kCPU};

at::ScalarType ScalarTypeOf(DataType dtype) { return RequireTorchDtype(dtype, "backend c10d: "); }

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

}  // namespace collops
