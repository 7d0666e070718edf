// Send/Recv of ProcessCommunicator: a channel per ordered (src, dst) pair (PairControl).
//
// Both sides first announce (count, dtype) of message m on their own side of the channel and wait
// for the other's announcement of m; if they differ, both throw the same ERROR_RANK_MISMATCH and
// the channel stays consistent (no data moved). Data then flows through the sender's slot half
// that the *next* collective round will use — nobody reads it now, and the next round is written
// only after this Send returned — split in two sub-buffers so the sender fills one while the
// receiver drains the other. A message of at least SegmentHeader::crossMemoryMinBytes, where the
// creation probe found process_vm_readv allowed, is not staged: the sender announces its address
// with (count, dtype), and the receiver reads it whole straight into its buffer, one copy instead
// of two (both sides derive the choice from the count and dtype they just checked are equal).
// Send returns once the receiver has copied everything (synchronous send, like MPI_Ssend).
#include <algorithm>
#include <cstring>

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

void ProcessCommunicator::Send(const void* buf, size_t count, DataType dtype, int peer) {
  Enter("Send");
  const size_t e =
      PeerElementBytes(peer, rank_, size_, dtype, [this] { return Where(); }, "destination");
  PairControl& pair = segment_.Pair(rank_, peer);
  PairSide& mine = pair.send;
  PairSide& theirs = pair.recv;
  const uint64_t message = ++sendMessages_[peer];
  const int slot = static_cast<int>(message & 1);
  mine.count[slot] = static_cast<int64_t>(count);
  mine.dtype[slot] = dtype;
  mine.stagingHalf[slot] = static_cast<uint32_t>((round_ + 1) & 1);
  const size_t bytes = count * e;
  const bool cross = CrossMessage(bytes);
  mine.address[slot] = cross ? reinterpret_cast<uintptr_t>(buf) : 0;
  mine.messages.store(message, std::memory_order_release);
  mine.word.Notify();
  Await(
      theirs.word, [&] { return theirs.messages.load(std::memory_order_acquire) >= message; },
      peer);
  if (theirs.count[slot] != static_cast<int64_t>(count) || theirs.dtype[slot] != dtype) {
    Fail(ERROR_RANK_MISMATCH,
         SendRecvMismatchMessage("lccl", rank_, static_cast<int64_t>(count), dtype, peer,
                                 theirs.count[slot], theirs.dtype[slot]));
  }
  const size_t sub = segment_.HalfBytes() / 2;
  uint8_t* staging = segment_.Half(rank_, mine.stagingHalf[slot]);
  const auto* data = static_cast<const uint8_t*>(buf);
  uint64_t index = sendChunks_[peer];
  if (cross) ++index;  // the receiver reads it all, then counts one chunk
  for (size_t lo = 0; lo < bytes && !cross; lo += sub) {
    ++index;
    // The sub-buffer of chunk index-2 must have been drained.
    Await(
        theirs.word, [&] { return theirs.chunks.load(std::memory_order_acquire) + 2 >= index; },
        peer);
    CopyBytes(staging + (index & 1) * sub, data + lo, std::min(sub, bytes - lo));
    mine.chunks.store(index, std::memory_order_release);
    mine.word.Notify();
  }
  Await(theirs.word, [&] { return theirs.chunks.load(std::memory_order_acquire) >= index; }, peer);
  sendChunks_[peer] = index;
}

void ProcessCommunicator::Recv(void* buf, size_t count, DataType dtype, int peer) {
  Enter("Recv");
  const size_t e =
      PeerElementBytes(peer, rank_, size_, dtype, [this] { return Where(); }, "source");
  PairControl& pair = segment_.Pair(peer, rank_);
  PairSide& mine = pair.recv;
  PairSide& theirs = pair.send;
  const uint64_t message = ++recvMessages_[peer];
  const int slot = static_cast<int>(message & 1);
  mine.count[slot] = static_cast<int64_t>(count);
  mine.dtype[slot] = dtype;
  mine.messages.store(message, std::memory_order_release);
  mine.word.Notify();
  Await(
      theirs.word, [&] { return theirs.messages.load(std::memory_order_acquire) >= message; },
      peer);
  if (theirs.count[slot] != static_cast<int64_t>(count) || theirs.dtype[slot] != dtype) {
    Fail(ERROR_RANK_MISMATCH,
         SendRecvMismatchMessage("lccl", peer, theirs.count[slot], theirs.dtype[slot], rank_,
                                 static_cast<int64_t>(count), dtype));
  }
  const size_t sub = segment_.HalfBytes() / 2;
  const uint8_t* staging = segment_.Half(peer, theirs.stagingHalf[slot]);
  auto* data = static_cast<uint8_t*>(buf);
  const size_t bytes = count * e;
  uint64_t index = recvChunks_[peer];
  if (CrossMessage(bytes)) {
    CopyCrossMemory(CrossMemoryDirection::kRead, peer, data, theirs.address[slot], bytes);
    mine.chunks.store(++index, std::memory_order_release);
    mine.word.Notify();
    recvChunks_[peer] = index;
    return;
  }
  for (size_t lo = 0; lo < bytes; lo += sub) {
    ++index;
    Await(
        theirs.word, [&] { return theirs.chunks.load(std::memory_order_acquire) >= index; }, peer);
    CopyBytes(data + lo, staging + (index & 1) * sub, std::min(sub, bytes - lo));
    mine.chunks.store(index, std::memory_order_release);
    mine.word.Notify();
  }
  recvChunks_[peer] = index;
}

}  // namespace shm
}  // namespace collops
