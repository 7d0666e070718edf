#include "core/comm/shm/alltoallv.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/comm/shm/algorithm_table.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {

void AllToAllAlgorithms::AllToAllV(const void* in, const int64_t* sendCounts,
                                   const int64_t* sdispls, void* out, const int64_t* recvCounts,
                                   const int64_t* rdispls, DataType dtype) {
  const size_t e = t_.ElementBytes(dtype);
  const int rank = t_.Rank(), size = t_.Size();
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  size_t outputBytes = 0;
  for (int r = 0; r < size; ++r) {
    outputBytes += static_cast<size_t>(std::max<int64_t>(recvCounts[r], 0)) * e;
  }
  const auto copyOwn = [&] {
    t_.CopyOut(dst + rdispls[rank] * e, src + sdispls[rank] * e,
               static_cast<size_t>(std::max<int64_t>(sendCounts[rank], 0)) * e, outputBytes);
  };
  if (size == 1) return copyOwn();
  const Algo forced = t_.Forced(Collective::kAllToAll);
  if (forced == kAlgoHeap && !t_.HasHeaps()) {
    FailForced(t_.Where(), Collective::kAllToAll, forced, kNoHeaps);
  }
  if (forced == kAlgoCrossMemory && !t_.CrossMemory()) {
    FailForced(t_.Where(), Collective::kAllToAll, forced, kNoCrossMemory);
  }
  // The first round carries the heap tables. A sender whose input is in its heap stages nothing
  // of a large piece (SendsWhole); every other piece has its first region staged as usual, so a
  // call that fits one round costs no more. Once the tables are known, the rest of every direct
  // piece moves with one copy, and the staged rounds that follow carry only the other pieces
  // (their largest, republished with round 2, sets how many). Round 2 is also what keeps every
  // input and output in place until all direct copies are done.
  const bool heaps = t_.HasHeaps() && (forced == kAlgoAuto || forced == kAlgoHeap);
  tables_.Clear();
  const int32_t flagsHere =
      heaps ? tables_.Publish(src, sendCounts, sdispls, dst, recvCounts, rdispls, e) : 0;
  // Large pieces from ordinary memory are not staged: their receivers read them with
  // process_vm_readv after the first round, and round 2 keeps the inputs in place until then.
  const bool cross = t_.CrossMemory() && (forced == kAlgoAuto || forced == kAlgoCrossMemory);
  const int64_t crossFrom = cross ? static_cast<int64_t>(CrossMemoryPieceFrom(t_.Policy(), forced))
                                  : std::numeric_limits<int64_t>::max();
  crossSend_.assign(size, false);
  crossRecv_.assign(size, false);
  if (cross) PublishCross(src, sendCounts, sdispls, e, flagsHere, crossFrom);
  if (!heaps && !cross) t_.PublishFlags(0);
  // Only the largest staged piece anywhere decides the number of rounds and no rank knows it
  // alone, so each publishes its own largest with the first round. A receiver cannot tell yet
  // whether a piece large enough for process_vm_readv moves that way, so it leaves it to the
  // sender, which counts every piece it stages.
  int64_t mostHere = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    if (!crossSend_[r]) mostHere = std::max(mostHere, sendCounts[r]);
    if (recvCounts[r] * static_cast<int64_t>(e) < crossFrom) {
      mostHere = std::max(mostHere, recvCounts[r]);
    }
  }
  const size_t per = t_.RegionBytes() / e;
  // At least `floor` rounds, and enough for the largest piece any rank published.
  const auto roundsFor = [&](size_t floor) {
    int64_t most = 0;
    for (int r = 0; r < size; ++r) most = std::max(most, t_.ValueOf(r));
    return std::max(floor, CeilDiv(static_cast<size_t>(most), per));
  };
  bool direct = false, anyCross = false;
  size_t rounds = 1;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * per;
    uint8_t* stage = t_.NextHalf();
    for (int r = 0; r < size; ++r) {
      if (r != rank && !(heaps && tables_.Peer(r).send) && !crossSend_[r]) {
        CopyBytes(stage + t_.RegionOffset(rank, r), src + (sdispls[r] + lo) * e,
                  Clip(sendCounts[r], lo, per) * e);
      }
    }
    if (k == 0) t_.PublishValue(mostHere);
    t_.Round();
    if (k == 0) {
      if (forced == kAlgoHeap) CheckEveryPieceDirect();
      copyOwn();  // after the first round: the agreement check precedes any output
      rounds = roundsFor(1);
      int32_t flags = 0;
      for (int r = 0; r < size && heaps; ++r) flags |= t_.FlagsOf(r);
      direct = (flags & kDirectTable) != 0 && (rounds > 1 || (flags & kDirectWhole) != 0);
      anyCross = cross && FindCross(recvCounts, e, crossFrom);
      if (direct) {
        tables_.Classify(sendCounts, recvCounts, e, per);
        // A piece that moves by process_vm_readv is neither pushed nor pulled between heaps.
        for (int r = 0; r < size; ++r) {
          DirectPeer& peer = tables_.Peer(r);
          if (crossSend_[r]) {
            peer.send = true;
            peer.pushTo = nullptr;
          }
          if (crossRecv_[r]) {
            peer.recv = true;
            peer.pullFrom = nullptr;
          }
        }
      }
      if (direct || anyCross) rounds = std::max<size_t>(rounds, 2);
      for (int r = 0; r < size; ++r) {
        if (crossRecv_[r]) {
          t_.CopyCrossMemory(CrossMemoryDirection::kRead, r, dst + rdispls[r] * e,
                             t_.TableOf(r).at[rank], static_cast<size_t>(recvCounts[r]) * e);
        }
      }
    } else if (k == 1 && direct) {
      rounds = roundsFor(2);
    }
    for (int r = 0; r < size; ++r) {
      const DirectPeer& peer = tables_.Peer(r);
      if (r != rank && !(direct && peer.recv && (k > 0 || peer.recvStart == 0)) && !crossRecv_[r]) {
        t_.CopyOut(dst + (rdispls[r] + lo) * e, t_.HalfOf(r) + t_.RegionOffset(r, rank),
                   Clip(recvCounts[r], lo, per) * e, outputBytes);
      }
    }
    if (k == 0 && direct) {
      int64_t stagedMost = 0;
      for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        const DirectPeer& peer = tables_.Peer(r);
        if (peer.pushTo != nullptr) {
          t_.CopyOut(peer.pushTo + peer.sendStart * e, src + (sdispls[r] + peer.sendStart) * e,
                     Clip(sendCounts[r], peer.sendStart, SIZE_MAX) * e, outputBytes);
        }
        if (peer.pullFrom != nullptr) {
          t_.CopyOut(dst + (rdispls[r] + peer.recvStart) * e, peer.pullFrom + peer.recvStart * e,
                     Clip(recvCounts[r], peer.recvStart, SIZE_MAX) * e, outputBytes);
        }
        if (!peer.send) stagedMost = std::max(stagedMost, sendCounts[r]);
        if (!peer.recv) stagedMost = std::max(stagedMost, recvCounts[r]);
      }
      t_.PublishValue(stagedMost);
    }
  }
}

void AllToAllAlgorithms::PublishCross(const uint8_t* in, const int64_t* sendCounts,
                                      const int64_t* sdispls, size_t e, int32_t flags,
                                      int64_t from) {
  // Pieces of a heap input already move with one copy (PieceTables).
  if ((flags & kDirectInput) == 0) {
    const DirectTable table = t_.NextTable();
    for (int r = 0; r < t_.Size(); ++r) {
      if (r == t_.Rank() || sendCounts[r] * static_cast<int64_t>(e) < from) continue;
      crossSend_[r] = true;
      table.at[r] = reinterpret_cast<uintptr_t>(in + sdispls[r] * e);
      flags |= kCrossMemory;
    }
  }
  t_.PublishFlags(flags);
}

bool AllToAllAlgorithms::FindCross(const int64_t* recvCounts, size_t e, int64_t from) {
  // The sender's rule seen from the receiver: the counts agree (the first round checked them),
  // and the sender's flag says its input is not in its heap.
  bool any = false;
  for (int r = 0; r < t_.Size(); ++r) {
    const bool flagged = (t_.FlagsOf(r) & kCrossMemory) != 0;
    any = any || flagged;
    crossRecv_[r] = r != t_.Rank() && flagged && recvCounts[r] * static_cast<int64_t>(e) >= from;
  }
  return any;
}

void AllToAllAlgorithms::CheckEveryPieceDirect() const {
  const int size = t_.Size();
  for (int s = 0; s < size; ++s) {
    const bool input = (t_.FlagsOf(s) & kDirectInput) != 0;
    for (int r = 0; r < size && !input; ++r) {
      if (r == s) continue;
      const bool output = (t_.FlagsOf(r) & kDirectTable) != 0 && t_.TableOf(r).to[s] >= 0;
      if (!output) {
        FailForced(t_.Where(), Collective::kAllToAll, kAlgoHeap,
                   Concat("neither rank ", s, "'s input nor rank ", r,
                          "'s output lies in its heap (AllocateShared)"));
      }
    }
  }
}

}  // namespace shm
}  // namespace collops
