#include "core/comm/shm/piece_tables.h"

#include <algorithm>

namespace collops {
namespace shm {

int32_t PieceTables::Publish(const uint8_t* in, const int64_t* sendCounts, const int64_t* sdispls,
                             uint8_t* out, const int64_t* recvCounts, const int64_t* rdispls,
                             size_t e) {
  const int rank = t_.Rank(), size = t_.Size();
  size_t inExtent = 0, outExtent = 0;
  bool displaced = true;  // negative displacements never reach here (operations check them)
  for (int r = 0; r < size; ++r) {
    displaced = displaced && sdispls[r] >= 0;
    inExtent = std::max(inExtent,
                        static_cast<size_t>(sdispls[r] + std::max<int64_t>(sendCounts[r], 0)) * e);
    if (out == nullptr) continue;
    displaced = displaced && rdispls[r] >= 0;
    outExtent = std::max(outExtent,
                         static_cast<size_t>(rdispls[r] + std::max<int64_t>(recvCounts[r], 0)) * e);
  }
  const int64_t inAt = displaced ? t_.Heap().OffsetOf(in, inExtent) : -1;
  const int64_t outAt = displaced && out != nullptr ? t_.Heap().OffsetOf(out, outExtent) : -1;
  int32_t flags = 0;
  direct_.resize(size);
  for (int r = 0; r < size; ++r) {
    direct_[r] = DirectPeer{};
    if (r != rank && inAt >= 0 && SendsWhole(sendCounts[r], e)) {
      direct_[r].send = true;
      flags |= kDirectWhole;
    }
  }
  if (inAt >= 0) flags |= kDirectInput;
  if (inAt >= 0 || outAt >= 0) {
    flags |= kDirectTable;
    const DirectTable table = t_.NextTable();
    for (int r = 0; r < size; ++r) {
      table.from[r] = inAt >= 0 ? inAt + sdispls[r] * static_cast<int64_t>(e) : -1;
      table.to[r] = outAt >= 0 ? outAt + rdispls[r] * static_cast<int64_t>(e) : -1;
    }
  }
  t_.PublishFlags(flags);
  return flags;
}

void PieceTables::Classify(const int64_t* sendCounts, const int64_t* recvCounts, size_t e,
                           size_t per) {
  const int rank = t_.Rank();
  // A table entry of `owner` for a piece of `bytes`: its address, or null when it has none.
  auto entry = [&](int owner, bool to, int peer, int64_t bytes) -> uint8_t* {
    if ((t_.FlagsOf(owner) & kDirectTable) == 0) return nullptr;
    const DirectTable table = t_.TableOf(owner);
    const int64_t offset = to ? table.to[peer] : table.from[peer];
    if (offset < 0) return nullptr;
    return t_.PeerHeap(owner, offset, static_cast<uint64_t>(std::max<int64_t>(bytes, 0)));
  };
  for (int j = 0; j < t_.Size(); ++j) {
    if (j == rank) continue;
    DirectPeer& peer = direct_[j];
    const int64_t sendBytes = sendCounts[j] * static_cast<int64_t>(e);
    const int64_t recvBytes = recvCounts[j] * static_cast<int64_t>(e);
    // Writing into the receiver's heap wins over reading from the sender's: both sides read the
    // same tables, so they agree on who copies. A whole piece (Publish) was not staged.
    peer.pushTo = entry(j, /*to=*/true, rank, sendBytes);
    if (!peer.send) {
      peer.send = peer.pushTo != nullptr || entry(rank, /*to=*/false, j, sendBytes) != nullptr;
      peer.sendStart = per;
    }
    const uint8_t* from = entry(j, /*to=*/false, rank, recvBytes);
    const bool pushed = entry(rank, /*to=*/true, j, recvBytes) != nullptr;
    peer.recv = pushed || from != nullptr;
    peer.recvStart = from != nullptr && SendsWhole(recvCounts[j], e) ? 0 : per;
    if (!pushed) peer.pullFrom = from;
  }
}

bool PieceTables::FindPiecesForMe(const int64_t* sendCounts, size_t recvCount, size_t e) {
  const int rank = t_.Rank();
  bool any = false;
  peerInput_.assign(t_.Size(), nullptr);
  for (int r = 0; r < t_.Size(); ++r) {
    if ((t_.FlagsOf(r) & kDirectTable) == 0) continue;
    any = true;
    if (r == rank || !SendsWhole(sendCounts[rank], e)) continue;
    peerInput_[r] = t_.PeerHeap(r, t_.TableOf(r).from[rank], recvCount * e);
  }
  return any;
}

size_t PieceTables::StagedRounds(const int64_t* sendCounts, size_t e, size_t per) const {
  // The piece from s to r was staged unless s published a table and the piece is whole.
  const int size = t_.Size();
  size_t rounds = 1;
  for (int r = 0; r < size; ++r) {
    bool staged = false;
    for (int s = 0; s < size && !staged; ++s) {
      const bool table = (t_.FlagsOf(s) & kDirectTable) != 0;
      staged = s != r && !(table && SendsWhole(sendCounts[r], e));
    }
    if (staged) rounds = std::max(rounds, CeilDiv(static_cast<size_t>(sendCounts[r]), per));
  }
  return rounds;
}

}  // namespace shm
}  // namespace collops
