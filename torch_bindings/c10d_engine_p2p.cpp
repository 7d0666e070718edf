// The "c10d" engine's point to point: Send, Recv and Exchange over the group's send/recv, each
// payload announced by a (count, dtype) header so that a mismatch fails on both sides
// (c10d_engine.h).
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <string>
#include <vector>

#include "c10d_engine.h"
#include "c10d_engine_tensors.h"
#include "collops/backend.h"
#include "collops/status.h"

namespace collops {
namespace {

// Tags of the Send/Recv handshake and payload: apart from tag 0, which applications use.
constexpr int kAnnounceTag = 0x636f01;
constexpr int kReplyTag = 0x636f02;
constexpr int kDataTag = 0x636f03;

}  // namespace

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
    if (op.count * DataTypeSize(op.dtype) != 0) {  // as the receiver reckons it: a refusal has none
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

}  // namespace collops
