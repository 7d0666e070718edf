// PieceTables: where the pieces of a ReduceScatterV or AllToAllV lie in the ranks' heaps. Each rank
// publishes with the first round of the call its DirectTable (from[j]: heap offset of its piece
// for rank j in its input; to[j]: heap offset where rank j's piece lands in its output; -1 where
// not in the heap). A piece is *direct* when its receiver's output or its sender's input lies in
// that rank's heap: then its sender writes it into the receiver's heap (pushTo) or its receiver
// reads it from the sender's heap (pullFrom), one copy instead of two through the slots. A sender
// whose input is in its heap does not stage a piece of kDirectWholeBytes or more at all (it moves
// whole); of the other direct pieces the first round stages the first region as usual.
#pragma once

#include <cstdint>
#include <vector>

#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

/// How the pieces between this rank and one peer move in the call in progress.
struct DirectPeer {
  bool send = false;                  ///< the piece this rank sends to the peer is direct
  bool recv = false;                  ///< the piece the peer sends to this rank is direct
  size_t sendStart = 0;               ///< elements of the sent piece that were staged
  size_t recvStart = 0;               ///< elements of the received piece that were staged
  uint8_t* pushTo = nullptr;          ///< this rank writes its piece for the peer here
  const uint8_t* pullFrom = nullptr;  ///< this rank reads the peer's piece for it here
};

class PieceTables {
 public:
  explicit PieceTables(Transport& transport) : t_(transport) {}

  /// Publishes this rank's DirectTable for the next round (`out` null: no output, and then
  /// recvCounts and rdispls are not read) and its kDirect* flags, and marks in Peer() the pieces
  /// it sends whole. Needs heaps. Returns the flags.
  int32_t Publish(const uint8_t* in, const int64_t* sendCounts, const int64_t* sdispls,
                  uint8_t* out, const int64_t* recvCounts, const int64_t* rdispls, size_t e);
  /// AllToAllV, after the round that carried the tables: completes Peer() for every peer; `per`
  /// elements of a piece that is not whole went through that round's slots.
  void Classify(const int64_t* sendCounts, const int64_t* recvCounts, size_t e, size_t per);
  /// ReduceScatterV, after that round: PeerInput(r) = rank r's piece for this rank in r's heap
  /// where r sent it whole, else null. True when any rank published a table.
  bool FindPiecesForMe(const int64_t* sendCounts, size_t recvCount, size_t e);
  /// ReduceScatterV: the rounds the staged pieces need (sendCounts is the same on every rank).
  size_t StagedRounds(const int64_t* sendCounts, size_t e, size_t per) const;

  DirectPeer& Peer(int rank) { return direct_[rank]; }
  const uint8_t* PeerInput(int rank) const { return peerInput_[rank]; }
  /// Forgets an earlier call's pieces.
  void Clear() {
    direct_.assign(t_.Size(), DirectPeer{});
    peerInput_.assign(t_.Size(), nullptr);
  }

 private:
  Transport& t_;
  std::vector<DirectPeer> direct_;         ///< by peer rank
  std::vector<const uint8_t*> peerInput_;  ///< by peer rank (FindPiecesForMe)
};

}  // namespace shm
}  // namespace collops
