// Checks of what another rank wrote into the shared segment, before it is used. A peer's records
// are its own bytes in memory this rank maps: a bug or a stray write in that process can put any
// value there, so every offset, length and rank number read from them is bounded here first, and
// a value outside the bounds ends the call with an error naming the peer, never an access outside
// the segment. Pure functions of the values read (once) from the segment: the fuzz harness
// (tests/fuzz/segment_records_fuzzer.cpp) drives them with arbitrary records.
#pragma once

#include <cstdint>

#include "core/comm/shm/process_segment.h"

namespace collops {
namespace shm {

/// A staged message's region as its sender announced it (PairSide): two chunk buffers of
/// `chunkBytes` from `offset` lie inside a slot half of `halfBytes`, and are not empty.
inline bool StagedRegionFits(uint64_t offset, uint64_t chunkBytes, uint64_t halfBytes) {
  return chunkBytes != 0 && offset <= halfBytes && chunkBytes <= (halfBytes - offset) / 2;
}

/// `bytes` from `offset` lie inside a heap of `heapBytes` (a DirectTable entry, a published
/// input).
inline bool HeapRangeFits(int64_t offset, uint64_t bytes, uint64_t heapBytes) {
  return offset >= 0 && static_cast<uint64_t>(offset) <= heapBytes &&
         bytes <= heapBytes - static_cast<uint64_t>(offset);
}

/// An abort record as a rank writes it: itself as the reporter and a rank, or -1, as the culprit.
inline bool AbortNamesRanks(const AbortRecord& abort, int rankSize) {
  return abort.reporter >= 0 && abort.reporter < rankSize && abort.culprit >= -1 &&
         abort.culprit < rankSize;
}

}  // namespace shm
}  // namespace collops
