// PeerInputs: a rank's whole input that its peers read in place after the first round of a call,
// instead of through the slots — from the rank's heap (AllocateShared), or from its process by
// process_vm_readv. AllGather(V), Broadcast and AllReduce "rsag" use it. A rank decides alone what
// it publishes; every peer learns it from the first round, so choosing costs no round: the only
// one added is the round that keeps the inputs in place until every peer has read them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

class PeerInputs {
 public:
  explicit PeerInputs(Transport& transport) : t_(transport) {}

  /// Publishes with the next round the heap offset of this rank's input [in, +bytes): -1 when
  /// it is not in the heap or smaller than `minBytes` (then it is staged). Returns whether it
  /// published one.
  bool PublishHeap(const void* in, size_t bytes, size_t minBytes) {
    const int64_t at =
        t_.HasHeaps() && bytes >= minBytes ? t_.Heap().OffsetOf(in, bytes) : int64_t{-1};
    t_.PublishValue(at);
    return at >= 0;
  }
  /// After that round: InHeap(r) is rank r's published input (bytesOf(r) bytes, checked against
  /// its heap), null where r published none or r is this rank. True when any rank, this one
  /// included, published one.
  template <class BytesOf>
  bool FindHeap(BytesOf&& bytesOf) {
    bool any = false;
    inHeap_.assign(t_.Size(), nullptr);
    for (int r = 0; r < t_.Size(); ++r) {
      const int64_t at = t_.ValueOf(r);
      if (at < 0) continue;
      any = true;
      uint8_t* input = t_.PeerHeap(r, at, bytesOf(r));
      if (r != t_.Rank()) inHeap_[r] = input;
    }
    return any;
  }
  /// After FindHeap: rank r's input in its heap, or null.
  const uint8_t* InHeap(int r) const { return inHeap_[r]; }
  /// After that round: whether rank r published its input's heap offset.
  bool PublishedHeap(int r) const { return t_.ValueOf(r) >= 0; }
  /// Forgets the inputs of an earlier call (for a call that publishes none).
  void Clear() { inHeap_.assign(t_.Size(), nullptr); }

  /// Publishes with the next round whether this rank's input `in` (null: none) moves by
  /// process_vm_readv, and then its address (DirectTable at[0]). The peers follow the flag, so
  /// every rank calls it in every such call, also with no input to offer: the flag's word is
  /// reused every other round, and a word left alone would still point the peers at the buffer
  /// of an earlier call. Returns whether it published one.
  bool PublishCross(const uint8_t* in) {
    if (!t_.CrossMemory()) return false;
    if (in != nullptr) t_.NextTable().at[0] = reinterpret_cast<uintptr_t>(in);
    t_.PublishFlags(in != nullptr ? kCrossMemory : 0);
    return in != nullptr;
  }
  /// After that round: whether `rank` published an input to read by process_vm_readv.
  bool Cross(int rank) const { return t_.CrossMemory() && (t_.FlagsOf(rank) & kCrossMemory) != 0; }
  /// Reads `bytes` of `rank`'s published input into `out`.
  void ReadCross(int rank, uint8_t* out, size_t bytes) {
    t_.CopyCrossMemory(CrossMemoryDirection::kRead, rank, out, t_.TableOf(rank).at[0], bytes);
  }

 private:
  Transport& t_;
  std::vector<const uint8_t*> inHeap_;  ///< by rank
};

}  // namespace shm
}  // namespace collops
