// Send/Recv/Exchange of ProcessCommunicator: a channel per ordered (src, dst) pair (PairControl).
//
// Both sides first announce (count, dtype) of message m on their own side of the channel and wait
// for the other's announcement of m; if they differ, both report the same ERROR_RANK_MISMATCH and
// the channel stays consistent (no data moved). Data then flows through the sender's slot half
// that the *next* collective round will use — nobody reads it now, and the next round is written
// only after the group returned — in a region per destination of the group (the whole half for a
// lone Send), split in two chunk buffers so the sender fills one while the receiver drains the
// other. A message of at least SegmentHeader::crossMemoryMinBytes, where the creation probe found
// process_vm_readv allowed, is usually not staged (ProcessCommunicator::CrossMessage): the sender
// announces its address with (count, dtype), and the receiver reads it whole straight into its
// buffer, one copy instead of two. The sender makes the choice (it may depend on what else its
// group does) and the receiver follows the announced address. A send completes once the receiver
// has copied everything (synchronous, like MPI_Ssend).
//
// Send and Recv are groups of one. A group never blocks on one transfer: it takes every step any
// of its transfers can take without waiting, and sleeps on its rank's bell (which every peer rings
// after each post toward it) only when none can. Transfers on one channel run in the order given,
// each announced once the one before it on that channel is done.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/comm/shm/process_comm.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {
namespace {

/// `where` makes the message prefix only on failure (it costs more than a small message).
template <class Where>
size_t PeerElementBytes(int peer, int rank, int size, DataType dtype, Where&& where,
                        const char* role) {
  if (peer < 0 || peer >= size || peer == rank) {
    Fail(ERROR_INVALID_PARAM, where(), role, " rank ", peer, " is not another rank of ", size);
  }
  const size_t bytes = DataTypeSize(dtype);
  if (bytes == 0) Fail(ERROR_INVALID_TENSOR_DTYPE, where(), "dtype ", DataTypeName(dtype));
  return bytes;
}

}  // namespace

struct ProcessCommunicator::Transfer {
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

void ProcessCommunicator::Send(const void* buf, size_t count, DataType dtype, int peer) {
  RunGroup("Send", {PointToPoint::Send(buf, count, dtype, peer)});
}

void ProcessCommunicator::Recv(void* buf, size_t count, DataType dtype, int peer) {
  RunGroup("Recv", {PointToPoint::Recv(buf, count, dtype, peer)});
}

void ProcessCommunicator::Exchange(const std::vector<PointToPoint>& ops) {
  RunGroup("Exchange", ops);
}

void ProcessCommunicator::RunGroup(const char* op, const std::vector<PointToPoint>& ops) {
  Enter(op);
  auto where = [this] { return Where(); };
  std::vector<Transfer> group(ops.size());
  const std::vector<int> previous = PreviousOnChannel(ops);
  // Staged sends share the next round's half: one region per destination, in order of first use.
  std::vector<int> regionOf(size_, -1);
  int regions = 0;
  const bool receives = std::any_of(ops.begin(), ops.end(), [](const PointToPoint& p) {
    return p.kind == PointToPoint::Kind::kRecv;
  });
  for (size_t i = 0; i < ops.size(); ++i) {
    Transfer& t = group[i];
    t.op = ops[i];
    t.send = t.op.kind == PointToPoint::Kind::kSend;
    const size_t e = PeerElementBytes(t.op.peer, rank_, size_, t.op.dtype, where,
                                      t.send ? "destination" : "source");
    t.bytes = t.op.count * e;
    t.cross = t.send && CrossMessage(t.bytes, receives);  // a receive learns it from the sender
    PairControl& pair = t.send ? segment_.Pair(rank_, t.op.peer) : segment_.Pair(t.op.peer, rank_);
    t.mine = t.send ? &pair.send : &pair.recv;
    t.theirs = t.send ? &pair.recv : &pair.send;
    t.previous = previous[i];
    if (t.send && !t.cross && t.bytes != 0 && regionOf[t.op.peer] < 0)
      regionOf[t.op.peer] = regions++;
  }
  const size_t regionBytes = regions == 0 ? 0 : segment_.HalfBytes() / regions / 128 * 128;
  for (Transfer& t : group) {
    if (!t.send || t.cross || t.bytes == 0) continue;
    t.staging = NextHalf() + regionOf[t.op.peer] * regionBytes;
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
    Await(segment_.Rank(rank_).bell, ready, waiting->op.peer, [&] {
      for (const Transfer& t : group) {
        if (t.stage == Transfer::kDone) continue;
        CheckPeer(t.op.peer);
        CheckCallOrder(t.op.peer);
      }
    });
  }
  if (!mismatch.empty()) Fail(ERROR_RANK_MISMATCH, mismatch);
}

void ProcessCommunicator::Announce(Transfer& t) {
  const int peer = t.op.peer;
  t.message = t.send ? ++sendMessages_[peer] : ++recvMessages_[peer];
  t.slot = static_cast<int>(t.message & 1);
  PairSide& mine = *t.mine;
  mine.count[t.slot] = static_cast<int64_t>(t.op.count);
  mine.dtype[t.slot] = t.op.dtype;
  if (t.send) {
    mine.stagingHalf[t.slot] = static_cast<uint32_t>((round_ + 1) & 1);
    mine.stagingOffset[t.slot] = t.staging == nullptr ? 0 : t.staging - NextHalf();
    mine.chunkBytes[t.slot] = t.chunkBytes;
    mine.address[t.slot] = t.cross ? reinterpret_cast<uintptr_t>(t.op.buf) : 0;
  }
  mine.messages.store(t.message, std::memory_order_release);
  Ring(peer);
  t.stage = Transfer::kAnnounced;
}

void ProcessCommunicator::ReceiveStaged(Transfer& t) {
  // The sender's record is its own bytes in shared memory: read once, checked, then used.
  const int peer = t.op.peer;
  const uint64_t offset = t.theirs->stagingOffset[t.slot];
  const uint64_t chunkBytes = t.theirs->chunkBytes[t.slot];
  const uint64_t half = segment_.HalfBytes();
  if (chunkBytes == 0 || offset > half || chunkBytes > (half - offset) / 2) {
    Break(ERROR_COMM_FAIL, peer,
          Concat(Where(), "rank ", peer, " (", PidOf(peer), ") announced message ", t.message,
                 " in two chunks of ", chunkBytes, " bytes at offset ", offset, ", outside the ",
                 half, "-byte half of its slot (memory corruption?)"));
  }
  t.staging = segment_.Half(peer, t.theirs->stagingHalf[t.slot]) + offset;
  t.chunkBytes = chunkBytes;
}

bool ProcessCommunicator::Ready(const Transfer& t) const {
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

bool ProcessCommunicator::Advance(Transfer& t, const std::vector<Transfer>& group,
                                  std::string& mismatch) {
  const int peer = t.op.peer;
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
        mismatch = t.send ? SendRecvMismatchMessage("lccl", rank_, count, t.op.dtype, peer,
                                                    theirCount, theirType)
                          : SendRecvMismatchMessage("lccl", peer, theirCount, theirType, rank_,
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
        CopyCrossMemory(CrossMemoryDirection::kRead, peer, static_cast<uint8_t*>(t.op.buf),
                        t.theirs->address[t.slot], t.bytes);
        t.mine->chunks.store(++t.index, std::memory_order_release);
        Ring(peer);
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
    Ring(peer);
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
