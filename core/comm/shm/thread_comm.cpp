#include "core/comm/shm/thread_comm.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "collops/backend.h"
#include "collops/reduce.h"
#include "collops/signature.h"
#include "collops/status.h"
#include "core/comm/shm/shm_policy.h"

namespace collops {
namespace {

const char* At(const void* base, int64_t elements, size_t elementSize) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(elementSize);
}
char* At(void* base, int64_t elements, size_t elementSize) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(elementSize);
}

// The local slice may overlap its destination (AllGatherV with `in` inside `out`).
void CopyLocal(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
}
void CopyPeer(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

// Slice r of `count` elements split in `parts` near-equal pieces: {first element, length}.
std::pair<size_t, size_t> Slice(size_t count, int parts, int r) {
  const size_t base = count / parts;
  const size_t extra = count % parts;
  const size_t index = static_cast<size_t>(r);
  return {index * base + (index < extra ? index : extra), base + (index < extra ? 1 : 0)};
}

}  // namespace

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<shm::ThreadGroup> group, int rank)
    : group_(std::move(group)),
      rank_(rank),
      size_(group_->size()),
      srcs_(size_),
      quantSrcs_(size_),
      sent_(size_),
      received_(size_) {}

shm::RankSlot& ThreadCommunicator::Publish(const void* in, void* out, int64_t count, DataType dtype,
                                           int32_t op) {
  shm::RankSlot& slot = group_->slot(rank_);
  slot.in = in;
  slot.out = out;
  slot.count = count;
  slot.dtype = dtype;
  slot.op = op;
  slot.sendCounts = slot.sdispls = slot.recvCounts = nullptr;
  return slot;
}

void ThreadCommunicator::FailTogether(const char* what, const std::string& message) {
  group_->Sync(rank_, what);
  Fail(ERROR_RANK_MISMATCH, message);
}

std::string ThreadCommunicator::CheckUniform(const char* what, bool checkCount,
                                             const char* opField) const {
  const shm::RankSlot& first = group_->slot(0);
  const bool reduce = opField != nullptr && std::strcmp(opField, "reduce op") == 0;
  auto opText = [&](int32_t op) {
    return reduce ? std::string(ReduceOpName(static_cast<ReduceOp>(op))) : std::to_string(op);
  };
  for (int j = 1; j < size_; ++j) {
    const shm::RankSlot& other = group_->slot(j);
    if (checkCount && other.count != first.count) {
      return Concat("lccl ", what, ": rank 0 has count ", first.count, " but rank ", j,
                    " has count ", other.count);
    }
    if (other.dtype != first.dtype) {
      return Concat("lccl ", what, ": rank 0 has dtype ", DataTypeName(first.dtype), " but rank ",
                    j, " has dtype ", DataTypeName(other.dtype));
    }
    if (opField != nullptr && other.op != first.op) {
      return Concat("lccl ", what, ": rank 0 has ", opField, " ", opText(first.op), " but rank ", j,
                    " has ", opField, " ", opText(other.op));
    }
  }
  return "";
}

size_t ThreadCommunicator::CheckedElementSize(const char* what, DataType dtype,
                                              bool reduction) const {
  const size_t size = DataTypeSize(dtype);
  if (size == 0) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, "lccl ", what, " on rank ", rank_, ": dtype ",
         DataTypeName(dtype), " is not supported");
  }
  if (reduction && !IsReducibleDtype(dtype)) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, "lccl ", what, " on rank ", rank_, ": dtype ",
         DataTypeName(dtype), " cannot be reduced");
  }
  return size;
}

void ThreadCommunicator::ReduceOrBreak(const char* what, DataType dtype, ReduceOp op, void* dst,
                                       size_t count) {
  try {
    ReduceArrays(dtype, op, srcs_.data(), size_, dst, count);
  } catch (const Error& e) {
    // Peers may still be reducing from this rank's input: it leaves with them, at the Sync that
    // ends their reduction, which every caller of ReduceOrBreak reaches next under `what`.
    group_->SyncThenBreak(rank_, what, e.status(),
                          Concat("lccl ", what, " on rank ", rank_, ": ", e.what()));
  }
}

void ThreadCommunicator::Agree(const CallSignature& mine) {
  // The exchange is one AllGatherBytes; named after the call it checks, so that a rank that times
  // out in it, or a peer asking where it is, names the operation the user called.
  if (mine.opName != agreedOpName_) {
    agreedOpName_ = mine.opName;
    agreementName_ = shm::InternedName(mine.opName + " (cross-rank check)");
  }
  ExchangeAgreement(size_, mine, [&](const void* in, void* out, size_t bytes) {
    GatherBytes(agreementName_, in, out, bytes);
  });
}

void ThreadCommunicator::AllGatherBytes(const void* in, void* out, size_t bytes) {
  GatherBytes("AllGatherBytes", in, out, bytes);
}

void ThreadCommunicator::GatherBytes(const char* what, const void* in, void* out, size_t bytes) {
  group_->ThrowIfBroken();
  Publish(in, out, static_cast<int64_t>(bytes), ACL_UINT8, 0);
  group_->Sync(rank_, what);
  const std::string bad = CheckUniform(what, true, nullptr);
  if (!bad.empty()) FailTogether(what, bad);

  CopyLocal(At(out, rank_, bytes), in, bytes);
  for (int step = 1; step < size_; ++step) {
    const int j = (rank_ + step) % size_;
    CopyPeer(At(out, j, bytes), group_->slot(j).in, bytes);
  }
  group_->Sync(rank_, what);
}

void ThreadCommunicator::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                   ReduceOp op) {
  group_->ThrowIfBroken();
  const size_t es = CheckedElementSize("AllReduce", dtype, true);
  Publish(in, out, static_cast<int64_t>(count), dtype, static_cast<int32_t>(op));
  group_->Sync(rank_, "AllReduce");
  const std::string bad = CheckUniform("AllReduce", true, "reduce op");
  if (!bad.empty()) FailTogether("AllReduce", bad);

  // The path must be the same on every rank (they run different numbers of Syncs), so it is
  // chosen from what all ranks published, not from this rank's arguments alone.
  bool anyInPlace = false;
  for (int j = 0; j < size_; ++j) {
    anyInPlace = anyInPlace || group_->slot(j).in == group_->slot(j).out;
  }
  if (!anyInPlace && count * es <= shm::kThreadOneShotMaxBytes) {
    for (int j = 0; j < size_; ++j) srcs_[j] = group_->slot(j).in;
    if (count != 0) ReduceOrBreak("AllReduce", dtype, op, out, count);
    group_->Sync(rank_, "AllReduce");
    return;
  }

  // In place, this rank writes only its own slice of its buffer, which no peer reads: peers read
  // their own slices of it. Reading the owners' slices after the second Sync is safe for the same
  // reason, and the third Sync keeps each owner's slice unchanged until every rank has copied it.
  const auto [begin, length] = Slice(count, size_, rank_);
  for (int j = 0; j < size_; ++j) srcs_[j] = At(group_->slot(j).in, begin, es);
  if (length != 0) ReduceOrBreak("AllReduce", dtype, op, At(out, begin, es), length);
  group_->Sync(rank_, "AllReduce");
  for (int step = 1; step < size_; ++step) {
    const int j = (rank_ + step) % size_;
    const auto [first, n] = Slice(count, size_, j);
    CopyPeer(At(out, first, es), At(group_->slot(j).out, first, es), n * es);
  }
  group_->Sync(rank_, "AllReduce");
}

bool ThreadCommunicator::AllReduceQuantised(const int8_t* in, void* out, size_t count,
                                            const QuantScale& quant, DataType outDtype) {
  group_->ThrowIfBroken();
  const char* what = "AllReduceQuantised";
  if (outDtype != ACL_FLOAT16 && outDtype != ACL_BF16 && outDtype != ACL_FLOAT) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, "lccl ", what, " on rank ", rank_, ": dtype ",
         DataTypeName(outDtype), " is not an output of the quantised AllReduce");
  }
  const size_t es = DataTypeSize(outDtype);
  Publish(in, out, static_cast<int64_t>(count), outDtype, 0);
  group_->Sync(rank_, what);
  const std::string bad = CheckUniform(what, true, nullptr);
  if (!bad.empty()) FailTogether(what, bad);
  auto dequantise = [&](size_t first, size_t n, void* dst) {
    for (int j = 0; j < size_; ++j) {
      quantSrcs_[j] = static_cast<const int8_t*>(group_->slot(j).in) + first;
    }
    try {
      SumDequantiseInt8(quantSrcs_.data(), size_, n, static_cast<int64_t>(first), quant, outDtype,
                        dst);
    } catch (const Error& e) {
      group_->BreakAndThrow(e.status(), Concat("lccl ", what, " on rank ", rank_, ": ", e.what()));
    }
  };
  if (size_ == 2 || count * es <= shm::kThreadOneShotMaxBytes) {
    dequantise(0, count, out);
    group_->Sync(rank_, what);
    return true;
  }
  // The peers read this rank's slice of its output after the second Sync, and the third keeps it
  // there until they have.
  const auto [begin, length] = Slice(count, size_, rank_);
  if (length != 0) dequantise(begin, length, At(out, begin, es));
  group_->Sync(rank_, what);
  for (int step = 1; step < size_; ++step) {
    const int j = (rank_ + step) % size_;
    const auto [first, n] = Slice(count, size_, j);
    CopyPeer(At(out, first, es), At(group_->slot(j).out, first, es), n * es);
  }
  group_->Sync(rank_, what);
  return true;
}

void ThreadCommunicator::AllGatherV(const void* in, size_t sendCount, void* out,
                                    const int64_t* recvCounts, const int64_t* rdispls,
                                    DataType dtype) {
  group_->ThrowIfBroken();
  const size_t es = CheckedElementSize("AllGatherV", dtype, false);
  Publish(in, out, static_cast<int64_t>(sendCount), dtype, 0).recvCounts = recvCounts;
  group_->Sync(rank_, "AllGatherV");
  std::string bad = CheckUniform("AllGatherV", false, nullptr);
  for (int i = 0; i < size_ && bad.empty(); ++i) {
    for (int j = 0; j < size_ && bad.empty(); ++j) {
      const int64_t wanted = group_->slot(i).recvCounts[j];
      const int64_t has = group_->slot(j).count;
      if (wanted > has) {
        bad = Concat("lccl AllGatherV: rank ", i, " expects recvCounts[", j, "] = ", wanted,
                     " elements from rank ", j, ", but rank ", j, " sends sendCount = ", has);
      }
    }
  }
  if (!bad.empty()) FailTogether("AllGatherV", bad);

  CopyLocal(At(out, rdispls[rank_], es), in, recvCounts[rank_] * es);
  for (int step = 1; step < size_; ++step) {
    const int j = (rank_ + step) % size_;
    CopyPeer(At(out, rdispls[j], es), group_->slot(j).in, recvCounts[j] * es);
  }
  group_->Sync(rank_, "AllGatherV");
}

void ThreadCommunicator::ReduceScatterV(const void* in, const int64_t* sendCounts,
                                        const int64_t* sdispls, void* out, size_t recvCount,
                                        DataType dtype, ReduceOp op) {
  group_->ThrowIfBroken();
  const size_t es = CheckedElementSize("ReduceScatterV", dtype, true);
  shm::RankSlot& mine =
      Publish(in, out, static_cast<int64_t>(recvCount), dtype, static_cast<int32_t>(op));
  mine.sendCounts = sendCounts;
  mine.sdispls = sdispls;
  group_->Sync(rank_, "ReduceScatterV");
  std::string bad = CheckUniform("ReduceScatterV", false, "reduce op");
  for (int j = 0; j < size_ && bad.empty(); ++j) {
    for (int i = 0; i < size_ && bad.empty(); ++i) {
      const int64_t sends = group_->slot(j).sendCounts[i];
      const int64_t expects = group_->slot(i).count;
      if (sends != expects) {
        bad = Concat("lccl ReduceScatterV: rank ", j, " sends sendCounts[", i, "] = ", sends,
                     " elements to rank ", i, ", but rank ", i, " expects recvCount = ", expects);
      }
    }
  }
  if (!bad.empty()) FailTogether("ReduceScatterV", bad);

  for (int j = 0; j < size_; ++j) {
    srcs_[j] = At(group_->slot(j).in, group_->slot(j).sdispls[rank_], es);
  }
  if (recvCount != 0) ReduceOrBreak("ReduceScatterV", dtype, op, out, recvCount);
  group_->Sync(rank_, "ReduceScatterV");
}

void ThreadCommunicator::AllToAllV(const void* in, const int64_t* sendCounts,
                                   const int64_t* sdispls, void* out, const int64_t* recvCounts,
                                   const int64_t* rdispls, DataType dtype) {
  group_->ThrowIfBroken();
  const size_t es = CheckedElementSize("AllToAllV", dtype, false);
  shm::RankSlot& mine = Publish(in, out, 0, dtype, 0);
  mine.sendCounts = sendCounts;
  mine.sdispls = sdispls;
  mine.recvCounts = recvCounts;
  group_->Sync(rank_, "AllToAllV");
  std::string bad = CheckUniform("AllToAllV", false, nullptr);
  for (int j = 0; j < size_ && bad.empty(); ++j) {
    for (int i = 0; i < size_ && bad.empty(); ++i) {
      const int64_t sends = group_->slot(j).sendCounts[i];
      const int64_t expects = group_->slot(i).recvCounts[j];
      if (sends != expects) {
        bad = Concat("lccl AllToAllV: rank ", j, " sends sendCounts[", i, "] = ", sends,
                     " elements to rank ", i, ", but rank ", i, " expects recvCounts[", j,
                     "] = ", expects);
      }
    }
  }
  if (!bad.empty()) FailTogether("AllToAllV", bad);

  CopyLocal(At(out, rdispls[rank_], es), At(in, sdispls[rank_], es), recvCounts[rank_] * es);
  for (int step = 1; step < size_; ++step) {
    const int j = (rank_ + step) % size_;
    const shm::RankSlot& peer = group_->slot(j);
    CopyPeer(At(out, rdispls[j], es), At(peer.in, peer.sdispls[rank_], es), recvCounts[j] * es);
  }
  group_->Sync(rank_, "AllToAllV");
}

void ThreadCommunicator::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  group_->ThrowIfBroken();
  const size_t es = CheckedElementSize("Broadcast", dtype, false);
  if (root < 0 || root >= size_) {
    Fail(ERROR_INVALID_PARAM, "lccl Broadcast on rank ", rank_, ": root = ", root,
         " must be in [0, ", size_, ")");
  }
  Publish(buf, buf, static_cast<int64_t>(count), dtype, root);
  group_->Sync(rank_, "Broadcast");
  const std::string bad = CheckUniform("Broadcast", true, "root");
  if (!bad.empty()) FailTogether("Broadcast", bad);
  if (rank_ != root) CopyPeer(buf, group_->slot(root).in, count * es);
  group_->Sync(rank_, "Broadcast");
}

void ThreadCommunicator::CheckPeer(const char* what, int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    Fail(ERROR_INVALID_PARAM, "lccl ", what, " on rank ", rank_, ": peer = ", peer,
         " must be another rank in [0, ", size_, ")");
  }
}

void ThreadCommunicator::Send(const void* buf, size_t count, DataType dtype, int peer) {
  Exchange({PointToPoint::Send(buf, count, dtype, peer)});
}

void ThreadCommunicator::Recv(void* buf, size_t count, DataType dtype, int peer) {
  Exchange({PointToPoint::Recv(buf, count, dtype, peer)});
}

// A send posts its buffer on the channel and is done once the receiver took it; a receive copies
// straight from the posted buffer. The group takes every step any of its ops can take without
// waiting and sleeps on this rank's word (peers notify it after each post toward it) only when
// none can; ops on one channel run in the order given (a channel holds one message at a time).
void ThreadCommunicator::Exchange(const std::vector<PointToPoint>& ops) {
  group_->ThrowIfBroken();
  struct Op {
    PointToPoint p2p;
    bool send;
    size_t es;
    shm::Channel* channel;
    int previous = -1;  ///< the op before this one on its channel
    uint64_t k = 0;     ///< its message number on the channel, once started
    bool done = false;
  };
  std::vector<Op> group;
  const std::vector<int> previous = PreviousOnChannel(ops);
  for (const PointToPoint& p : ops) {
    const bool send = p.kind == PointToPoint::Kind::kSend;
    CheckPeer(send ? "Send" : "Recv", p.peer);
    // A refusal (PointToPoint::Refusal) moves nothing.
    Op op{p, send, p.IsRefusal() ? 0 : CheckedElementSize(send ? "Send" : "Recv", p.dtype, false),
          send ? &group_->channel(rank_, p.peer) : &group_->channel(p.peer, rank_)};
    op.previous = previous[group.size()];
    group.push_back(op);
  }
  std::string mismatch;
  auto ready = [&](const Op& op) {
    if (op.done) return false;
    if (op.k == 0) return false;  // waits for an op of this group
    return op.send ? op.channel->taken.load(std::memory_order_acquire) >= op.k
                   : op.channel->posted.load(std::memory_order_acquire) >= op.k;
  };
  // One step of `op` that needs no waiting; true when it took one.
  auto advance = [&](Op& op) {
    shm::Channel& channel = *op.channel;
    const int peer = op.p2p.peer;
    if (op.k == 0) {
      if (op.previous >= 0 && !group[op.previous].done) return false;
      if (!op.send) {
        op.k = ++received_[peer];
        return true;
      }
      op.k = ++sent_[peer];
      channel.buf = op.p2p.buf;
      channel.count = op.p2p.count;
      channel.dtype = op.p2p.dtype;
      channel.posted.store(op.k, std::memory_order_release);
      group_->slot(peer).word.Notify();
      return true;
    }
    if (!ready(op)) return false;
    if (op.send) {
      if ((channel.recvCount != op.p2p.count || channel.recvDtype != op.p2p.dtype) &&
          mismatch.empty()) {
        mismatch = SendRecvMismatchMessage(
            "lccl", rank_, static_cast<int64_t>(op.p2p.count), op.p2p.dtype, peer,
            static_cast<int64_t>(channel.recvCount), channel.recvDtype);
      }
    } else {
      // Read the message before releasing it: the sender may post the next one right after.
      const size_t sendCount = channel.count;
      const DataType sendDtype = channel.dtype;
      const bool match = sendCount == op.p2p.count && sendDtype == op.p2p.dtype;
      if (match) CopyPeer(op.p2p.buf, channel.buf, op.p2p.count * op.es);
      channel.recvCount = op.p2p.count;
      channel.recvDtype = op.p2p.dtype;
      channel.taken.store(op.k, std::memory_order_release);
      group_->slot(peer).word.Notify();
      if (!match && mismatch.empty()) {
        mismatch = SendRecvMismatchMessage("lccl", peer, static_cast<int64_t>(sendCount), sendDtype,
                                           rank_, static_cast<int64_t>(op.p2p.count), op.p2p.dtype);
      }
    }
    op.done = true;
    return true;
  };
  for (;;) {
    bool progressed = false;
    Op* waiting = nullptr;
    for (Op& op : group) {
      while (!op.done && advance(op)) progressed = true;
      if (!op.done && waiting == nullptr) waiting = &op;
    }
    if (waiting == nullptr) break;
    if (progressed) continue;
    const int peer = waiting->p2p.peer;
    // Marked until the timeout is reported: a peer timing out at the same moment reads the mark.
    const shm::WaitingMark mark(group_->slot(rank_), waiting->send ? "Send" : "Recv", peer);
    const double timedOut = group_->WaitFor(
        group_->slot(rank_).word, [&] { return std::any_of(group.begin(), group.end(), ready); },
        rank_);
    if (timedOut != 0) {
      group_->BreakAndThrow(
          ERROR_TIMEOUT,
          Concat(group_->Describe(), ": ", waiting->send ? "Send from" : "Recv on", " rank ", rank_,
                 waiting->send ? " to rank " : " from rank ", peer, " timed out after ",
                 shm::FormatSeconds(timedOut), ": rank ", peer, " did not arrive at the matching ",
                 waiting->send ? "Recv" : "Send", group_->Whereabouts({peer})));
    }
  }
  if (!mismatch.empty()) Fail(ERROR_RANK_MISMATCH, mismatch);
}

void ThreadCommunicator::Abort(Status status, const std::string& why) {
  group_->Break(status, Concat(group_->Describe(), ": rank ", rank_, " aborted: ", why));
}

void ThreadCommunicator::Barrier() { group_->Sync(rank_, "Barrier"); }

std::shared_ptr<ThreadCommunicator> JoinThreadGroup(const CommParam& param) {
  return std::make_shared<ThreadCommunicator>(shm::ThreadGroup::Join(param), param.rank);
}

namespace {

[[maybe_unused]] const bool kRegistered = RegisterCommunicatorBackend(
    "lccl", COMM_MULTI_THREAD,
    [](const CommParam& param) -> std::shared_ptr<Communicator> { return JoinThreadGroup(param); });

}  // namespace
}  // namespace collops
