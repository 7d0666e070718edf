#include "core/comm/shm/p2p.h"

#include <algorithm>
#include <cstring>

#include "core/comm/shm/algorithm_table.h"
#include "core/comm/shm/peer_checks.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {
namespace {

/// `where` makes the message prefix only on failure (it costs more than a small message).
/// 0 for a refusal (PointToPoint::Refusal), which moves nothing.
template <class Where>
size_t PeerElementBytes(const PointToPoint& op, int rank, int size, Where&& where,
                        const char* role) {
  if (op.peer < 0 || op.peer >= size || op.peer == rank) {
    Fail(ERROR_INVALID_PARAM, where(), role, " rank ", op.peer, " is not another rank of ", size);
  }
  const size_t bytes = DataTypeSize(op.dtype);
  if (bytes == 0 && !op.IsRefusal()) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, where(), "dtype ", DataTypeName(op.dtype));
  }
  return bytes;
}

}  // namespace

struct PointToPointChannels::Transfer {
  enum Stage { kQueued, kAnnounced, kMoving, kDone };
  PointToPoint op;
  bool send = false;
  size_t bytes = 0;
  bool cross = false;        ///< moves by process_vm_readv
  int previous = -1;         ///< the transfer before this one on its channel, in the group
  PairSide* mine = nullptr;  ///< this rank's side of the channel
  PairSide* theirs = nullptr;
  uint64_t message = 0;
  int slot = 0;
  uint8_t* staging = nullptr;  ///< the sender's region for this message (staged messages)
  size_t chunkBytes = 0;
  uint64_t index = 0;  ///< the channel's chunk count after this transfer's last step
  size_t moved = 0;    ///< bytes copied so far
  Stage stage = kQueued;
};

PointToPointChannels::PointToPointChannels(Transport& transport)
    : t_(transport),
      sendMessages_(transport.Size(), 0),
      recvMessages_(transport.Size(), 0),
      sendChunks_(transport.Size(), 0),
      recvChunks_(transport.Size(), 0) {}

void PointToPointChannels::Run(const std::vector<PointToPoint>& ops) {
  const int rank = t_.Rank(), size = t_.Size();
  auto where = [this] { return t_.Where(); };
  const Algo forced = t_.Forced(Collective::kSendRecv);
  if (forced == kAlgoCrossMemory && !t_.CrossMemory()) {
    FailForced(t_.Where(), Collective::kSendRecv, forced, kNoCrossMemory);
  }
  std::vector<Transfer> group(ops.size());
  const std::vector<int> previous = PreviousOnChannel(ops);
  // Staged sends share the next round's half: one region per destination, in order of first use.
  std::vector<int> regionOf(size, -1);
  int regions = 0;
  const bool receives = std::any_of(ops.begin(), ops.end(), [](const PointToPoint& p) {
    return p.kind == PointToPoint::Kind::kRecv;
  });
  for (size_t i = 0; i < ops.size(); ++i) {
    Transfer& t = group[i];
    t.op = ops[i];
    t.send = t.op.kind == PointToPoint::Kind::kSend;
    const size_t e = PeerElementBytes(t.op, rank, size, where, t.send ? "destination" : "source");
    t.bytes = t.op.count * e;
    // A receive learns it from the sender.
    t.cross =
        t.send && t_.CrossMemory() && CrossMemoryMessage(t_.Policy(), forced, t.bytes, receives);
    PairControl& pair = t.send ? t_.Pair(rank, t.op.peer) : t_.Pair(t.op.peer, rank);
    t.mine = t.send ? &pair.send : &pair.recv;
    t.theirs = t.send ? &pair.recv : &pair.send;
    t.previous = previous[i];
    if (t.send && !t.cross && t.bytes != 0 && regionOf[t.op.peer] < 0)
      regionOf[t.op.peer] = regions++;
  }
  const size_t regionBytes = regions == 0 ? 0 : t_.HalfBytes() / regions / 128 * 128;
  for (Transfer& t : group) {
    if (!t.send || t.cross || t.bytes == 0) continue;
    t.staging = t_.NextHalf() + regionOf[t.op.peer] * regionBytes;
    t.chunkBytes = regionBytes / 2;
  }

  std::string mismatch;
  for (;;) {
    bool progressed = false;
    const Transfer* waiting = nullptr;
    for (Transfer& t : group) {
      if (t.stage == Transfer::kDone) continue;
      progressed = Advance(t, group, mismatch) || progressed;
      if (t.stage != Transfer::kDone && waiting == nullptr) waiting = &t;
    }
    if (waiting == nullptr) break;
    if (progressed) continue;
    auto ready = [&] {
      for (const Transfer& t : group) {
        if (t.stage != Transfer::kDone && Ready(t)) return true;
      }
      return false;
    };
    t_.AwaitBell(ready, waiting->op.peer, [&] {
      for (const Transfer& t : group) {
        if (t.stage == Transfer::kDone) continue;
        t_.CheckPeer(t.op.peer);
        t_.CheckCallOrder(t.op.peer);
      }
    });
  }
  // A peer that gave up meanwhile (its timeout) may have freed or reused the buffer this group
  // read from or wrote into: as a Round(), the group fails instead of reporting success.
  t_.ThrowIfAborted();
  if (!mismatch.empty()) Fail(ERROR_RANK_MISMATCH, mismatch);
}

void PointToPointChannels::Announce(Transfer& t) {
  const int peer = t.op.peer;
  t.message = t.send ? ++sendMessages_[peer] : ++recvMessages_[peer];
  t.slot = static_cast<int>(t.message & 1);
  PairSide& mine = *t.mine;
  mine.count[t.slot] = static_cast<int64_t>(t.op.count);
  mine.dtype[t.slot] = t.op.dtype;
  if (t.send) {
    mine.stagingHalf[t.slot] = static_cast<uint32_t>((t_.Rounds() + 1) & 1);
    mine.stagingOffset[t.slot] = t.staging == nullptr ? 0 : t.staging - t_.NextHalf();
    mine.chunkBytes[t.slot] = t.chunkBytes;
    mine.address[t.slot] = t.cross ? reinterpret_cast<uintptr_t>(t.op.buf) : 0;
  }
  mine.messages.store(t.message, std::memory_order_release);
  t_.Ring(peer);
  t.stage = Transfer::kAnnounced;
}

void PointToPointChannels::ReceiveStaged(Transfer& t) {
  // The sender's record is its own bytes in shared memory: read once, checked, then used.
  const int peer = t.op.peer;
  const uint64_t offset = t.theirs->stagingOffset[t.slot];
  const uint64_t chunkBytes = t.theirs->chunkBytes[t.slot];
  const uint64_t half = t_.HalfBytes();
  if (!StagedRegionFits(offset, chunkBytes, half)) {
    t_.Break(ERROR_COMM_FAIL, peer,
             Concat(t_.Where(), "rank ", peer, " (", t_.PidOf(peer), ") announced message ",
                    t.message, " in two chunks of ", chunkBytes, " bytes at offset ", offset,
                    ", outside the ", half, "-byte half of its slot (memory corruption?)"));
  }
  t.staging = t_.Half(peer, t.theirs->stagingHalf[t.slot]) + offset;
  t.chunkBytes = chunkBytes;
}

bool PointToPointChannels::Ready(const Transfer& t) const {
  const uint64_t theirChunks = t.theirs->chunks.load(std::memory_order_acquire);
  switch (t.stage) {
    case Transfer::kQueued:
      return false;  // waits for a transfer of this group, not for a peer
    case Transfer::kAnnounced:
      return t.theirs->messages.load(std::memory_order_acquire) >= t.message;
    case Transfer::kMoving:
      if (!t.send) return theirChunks >= t.index + 1;
      // The chunk buffer of chunk index-1 must have been drained before the sender refills it.
      if (!t.cross && t.moved < t.bytes) return theirChunks + 2 >= t.index + 1;
      return theirChunks >= t.index;
    case Transfer::kDone:
      return false;
  }
  return false;
}

bool PointToPointChannels::Advance(Transfer& t, const std::vector<Transfer>& group,
                                   std::string& mismatch) {
  const int peer = t.op.peer, rank = t_.Rank();
  bool announced = false;
  if (t.stage == Transfer::kQueued) {
    if (t.previous >= 0 && group[t.previous].stage != Transfer::kDone) return false;
    Announce(t);
    announced = true;
  }
  if (t.stage == Transfer::kAnnounced) {
    if (!Ready(t)) return announced;
    const int64_t theirCount = t.theirs->count[t.slot];
    const int32_t theirType = t.theirs->dtype[t.slot];
    const int64_t count = static_cast<int64_t>(t.op.count);
    if (theirCount != count || theirType != t.op.dtype) {
      // Both sides see the same pair of announcements and move nothing for this message.
      if (mismatch.empty()) {
        mismatch = t.send ? SendRecvMismatchMessage("lccl", rank, count, t.op.dtype, peer,
                                                    theirCount, theirType)
                          : SendRecvMismatchMessage("lccl", peer, theirCount, theirType, rank,
                                                    count, t.op.dtype);
      }
      t.stage = Transfer::kDone;
      return true;
    }
    t.index = t.send ? sendChunks_[peer] : recvChunks_[peer];
    if (!t.send) {
      t.cross = t.theirs->address[t.slot] != 0;
      if (!t.cross && t.bytes != 0) ReceiveStaged(t);
    }
    if (t.cross) {
      if (!t.send) {
        t_.CopyCrossMemory(CrossMemoryDirection::kRead, peer, static_cast<uint8_t*>(t.op.buf),
                           t.theirs->address[t.slot], t.bytes);
        t.mine->chunks.store(++t.index, std::memory_order_release);
        t_.Ring(peer);
        recvChunks_[peer] = t.index;
        t.stage = Transfer::kDone;
        return true;
      }
      ++t.index;  // the receiver reads it all, then counts one chunk
    }
    t.stage = Transfer::kMoving;
  }
  bool progressed = false;
  while (!t.cross && t.moved < t.bytes && Ready(t)) {
    const uint64_t next = t.index + 1;
    const size_t n = std::min(t.chunkBytes, t.bytes - t.moved);
    uint8_t* chunk = t.staging + (next & 1) * t.chunkBytes;
    if (t.send) {
      CopyBytes(chunk, static_cast<const uint8_t*>(t.op.buf) + t.moved, n);
    } else {
      CopyBytes(static_cast<uint8_t*>(t.op.buf) + t.moved, chunk, n);
    }
    t.mine->chunks.store(next, std::memory_order_release);
    t_.Ring(peer);
    t.index = next;
    t.moved += n;
    progressed = true;
  }
  const bool allMoved = t.cross || t.moved >= t.bytes;
  if (allMoved && (!t.send || Ready(t))) {
    (t.send ? sendChunks_ : recvChunks_)[peer] = t.index;
    t.stage = Transfer::kDone;
    progressed = true;
  }
  return progressed;
}

}  // namespace shm
}  // namespace collops
