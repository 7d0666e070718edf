#include "core/comm/shm/reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include "core/comm/shm/algorithm_table.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {

void ReduceScatterAlgorithms::ReduceScatterV(const void* in, const int64_t* sendCounts,
                                             const int64_t* sdispls, void* out, size_t recvCount,
                                             DataType dtype, ReduceOp op) {
  t_.CheckReducible(dtype);
  const size_t e = t_.ElementBytes(dtype);
  const int rank = t_.Rank(), size = t_.Size();
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (size == 1) {
    if (recvCount != 0) std::memmove(dst, src + sdispls[0] * e, recvCount * e);
    return;
  }
  const Algo forced = t_.Forced(Collective::kReduceScatter);
  if (forced == kAlgoHeap && !t_.HasHeaps()) {
    FailForced(t_.Where(), Collective::kReduceScatter, forced, kNoHeaps);
  }
  const size_t per = t_.RegionBytes() / e;
  const int64_t most = *std::max_element(sendCounts, sendCounts + size);
  size_t rounds =
      std::max<size_t>(1, CeilDiv(static_cast<size_t>(std::max<int64_t>(most, 0)), per));
  // A rank whose input is in its heap publishes its DirectTable and stages none of its pieces of
  // kDirectWholeBytes or more; their receivers reduce them in place. sendCounts is the same
  // vector on every rank (the agreement check sees to that), so after the first round all agree
  // on which pieces were staged, how many rounds those need, and that one more round keeps the
  // shared inputs in place until every reduction reading them is done.
  const bool heaps = t_.HasHeaps() && forced != kAlgoStaged;
  tables_.Clear();
  if (heaps) tables_.Publish(src, sendCounts, sdispls, nullptr, nullptr, nullptr, e);
  bool shared = false;      // some rank published a table
  bool allInPlace = false;  // every peer's piece for this rank is read in place
  srcs_.resize(size);
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * per;
    uint8_t* stage = t_.NextHalf();
    for (int r = 0; r < size; ++r) {
      if (r != rank && !(heaps && tables_.Peer(r).send)) {
        CopyBytes(stage + t_.RegionOffset(rank, r), src + (sdispls[r] + lo) * e,
                  Clip(sendCounts[r], lo, per) * e);
      }
    }
    t_.Round();
    if (k == 0 && forced == kAlgoHeap) {
      for (int r = 0; r < size; ++r) {
        if ((t_.FlagsOf(r) & kDirectInput) == 0) {
          FailForced(t_.Where(), Collective::kReduceScatter, forced,
                     Concat("rank ", r, "'s input does not lie in its heap (AllocateShared)"));
        }
      }
    }
    if (k == 0 && heaps) {
      shared = tables_.FindPiecesForMe(sendCounts, recvCount, e);
      if (shared) rounds = tables_.StagedRounds(sendCounts, e, per);
      allInPlace = shared;
      for (int r = 0; r < size; ++r) allInPlace = allInPlace && (r == rank || tables_.PeerInput(r));
    }
    // With every piece in place the whole reduction runs now; else chunk by chunk.
    const size_t n =
        allInPlace ? (k == 0 ? recvCount : 0) : Clip(static_cast<int64_t>(recvCount), lo, per);
    if (n == 0) continue;
    for (int r = 0; r < size; ++r) {
      srcs_[r] = r == rank                         ? src + (sdispls[rank] + lo) * e
                 : tables_.PeerInput(r) != nullptr ? tables_.PeerInput(r) + lo * e
                                                   : t_.HalfOf(r) + t_.RegionOffset(r, rank);
    }
    ReduceArrays(dtype, op, srcs_.data(), size, dst + lo * e, n);
  }
  if (shared) t_.Round();
}

}  // namespace shm
}  // namespace collops
