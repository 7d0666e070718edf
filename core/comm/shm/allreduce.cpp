#include "core/comm/shm/allreduce.h"

#include <algorithm>
#include <cstring>

#include "core/comm/shm/algorithm_table.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {
namespace {

/// Elements of `e` bytes per cache line (at least one): slices start on cache lines.
size_t LineElements(size_t e) { return std::max<size_t>(1, 64 / e); }

/// Rank r's part of `count` elements cut into `ranks` cache-line-aligned slices: the one it
/// reduces in "cma" and "heap".
struct Slice {
  size_t first;
  size_t length;
};
Slice AlignedSlice(size_t count, int ranks, int r, size_t e) {
  const size_t align = LineElements(e);
  const size_t per = CeilDiv(CeilDiv(count, ranks), align) * align;
  const size_t first = std::min(count, r * per);
  return {first, std::min(count, first + per) - first};
}

}  // namespace

void AllReduceAlgorithms::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                    ReduceOp op) {
  t_.CheckReducible(dtype);
  const size_t e = t_.ElementBytes(dtype);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (t_.Size() == 1) {
    if (src != dst && count != 0) std::memmove(dst, src, count * e);
    return;
  }
  const Algo forced = t_.Forced(Collective::kAllReduce);
  Algo algo = forced;
  if (algo == kAlgoAuto) {
    algo = SelectAllReduce(t_.Policy(), t_.CrossMemory(), t_.Size(), count * e, e, t_.HalfBytes());
  }
  // Chosen automatically, an algorithm continues with "heap" when its first round finds every
  // rank's buffers in its heap; forced, it runs as it is.
  const bool mayTakeHeap = forced == kAlgoAuto;
  switch (algo) {
    case kAlgoOneShot:
      return OneShot(src, dst, count, dtype, op, mayTakeHeap);
    case kAlgoCrossMemory:
      if (!t_.CrossMemory()) FailForced(t_.Where(), Collective::kAllReduce, algo, kNoCrossMemory);
      return CrossMemory(src, dst, count, dtype, op, mayTakeHeap);
    case kAlgoHeap:
      return Heap(src, dst, count, dtype, op);
    default:
      return ReduceScatterAllGather(src, dst, count, dtype, op, mayTakeHeap);
  }
}

void AllReduceAlgorithms::OneShot(const uint8_t* in, uint8_t* out, size_t count, DataType dtype,
                                  ReduceOp op, bool mayTakeHeap) {
  const int rank = t_.Rank(), size = t_.Size();
  const size_t e = DataTypeSize(dtype);
  const size_t align = LineElements(e);
  size_t per =
      std::max<size_t>(1, OneShotRoundBytes(count * e, t_.Policy().chunkBytes, t_.HalfBytes()) / e);
  if (per > align) per -= per % align;
  const size_t rounds = std::max<size_t>(1, CeilDiv(count, per));
  // A large call of one round may find every buffer in the heaps (the heap algorithm, with its
  // first round), or read in place the inputs of the ranks whose buffers are there (they stage
  // nothing, and one more round keeps those inputs until every rank has read them). A call of
  // several rounds takes the heap algorithm after its first round, as rsag does.
  const bool heapCandidate = rounds == 1 && count * e >= kHeapOneShotMinBytes;
  const bool mayFindHeaps = heapCandidate || rounds > 1;
  const bool published = mayFindHeaps && PublishHeapBuffers(in, out, count * e);
  const bool inHeap = heapCandidate && published;
  // In place, the peers read this rank's input while it would write its result over it: the
  // result waits in this rank's half (it staged nothing there) until the round that keeps the
  // inputs in place is over.
  const bool deferOutput = inHeap && in == out;
  // A large output of several rounds is written with non-temporal stores (the policy's stream
  // threshold): it leaves the caches before anyone reads it, and ordinary stores would first read
  // every line of it. Not in place: there the output's lines are the input's, in the cache already.
  const bool stream = rounds > 1 && in != out && t_.StreamsOutput(count * e);
  srcs_.resize(size);
  bool readInPlace = false;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * per;
    const size_t n = Clip(static_cast<int64_t>(count), lo, per);
    if (!inHeap) CopyBytes(t_.NextHalf(), in + lo * e, n * e);
    t_.Round();
    if (k == 0 && mayFindHeaps && FindHeapBuffers(count * e) && mayTakeHeap) {
      return InHeaps(in, out, count, dtype, op);
    }
    if (n == 0) continue;
    for (int r = 0; r < size; ++r) {
      const uint8_t* heap = heapCandidate ? heapInput_[r] : nullptr;
      readInPlace = readInPlace || heap != nullptr;
      srcs_[r] = r == rank ? in + lo * e : heap != nullptr ? heap : t_.HalfOf(r);
    }
    if (stream) {
      ReduceArraysStreaming(dtype, op, srcs_.data(), size, out + lo * e, n);
    } else {
      ReduceArrays(dtype, op, srcs_.data(), size, deferOutput ? t_.NextHalf() : out + lo * e, n);
    }
  }
  if (!readInPlace) return;
  t_.Round();
  if (deferOutput) CopyBytes(out, t_.HalfOf(rank), count * e);
}

void AllReduceAlgorithms::ReduceScatterAllGather(const uint8_t* in, uint8_t* out, size_t count,
                                                 DataType dtype, ReduceOp op, bool mayTakeHeap) {
  const int rank = t_.Rank(), size = t_.Size();
  const size_t e = DataTypeSize(dtype);
  const size_t align = LineElements(e);
  const size_t chunkBytes = std::min<size_t>(t_.Policy().chunkBytes, t_.HalfBytes());
  size_t fullSlice = chunkBytes / size / e / align * align;
  if (fullSlice == 0) fullSlice = align;
  const size_t fullChunk = fullSlice * size;
  const size_t chunks = CeilDiv(count, fullChunk);
  // Rank r's slice of chunk k: elements [first, first + length) of the call. In a half, slice r
  // of every chunk sits at r * fullSlice, so the slices a rank stages for chunk k (the others'
  // places) and its reduced slice of chunk k - 1 (its own place) share a half without overlap.
  const auto sliceOf = [&](size_t k, int r) {
    const size_t lo = k * fullChunk;
    const size_t n = std::min(fullChunk, count - lo);
    const size_t slice = n == fullChunk ? fullSlice : CeilDiv(CeilDiv(n, size), align) * align;
    const size_t first = std::min(n, r * slice);
    return Slice{lo + first, std::min(n, (r + 1) * slice) - first};
  };
  const auto place = [&](int r) { return r * fullSlice * e; };
  // A rank whose input lies in its heap stages nothing; the others read its slices there. Each
  // rank publishes its input's heap offset with the first round.
  const bool inputInHeap = inputs_.PublishHeap(in, count * e, 0);
  PublishHeapBuffers(in, out, count * e);
  srcs_.resize(size);
  // Round k publishes chunk k's staged slices and the reduced own slice of chunk k - 1, so a call
  // of K chunks takes K + 1 rounds. Between rounds k and k + 1 a rank writes only the half it
  // publishes with round k + 1 and reads only the halves of round k (and the inputs in heaps,
  // which the next round keeps in place): chunk k's slices there to reduce, chunk k - 1's
  // reduced slices to copy out.
  for (size_t k = 0; k <= chunks; ++k) {
    uint8_t* const next = t_.NextHalf();
    if (k >= 1) {
      const Slice mine = sliceOf(k - 1, rank);
      if (mine.length != 0) {
        for (int r = 0; r < size; ++r) {
          srcs_[r] = r == rank                      ? in + mine.first * e
                     : inputs_.InHeap(r) != nullptr ? inputs_.InHeap(r) + mine.first * e
                                                    : t_.HalfOf(r) + place(rank);
        }
        ReduceArrays(dtype, op, srcs_.data(), size, next + place(rank), mine.length);
      }
    }
    for (int r = 0; r < size && k < chunks && !inputInHeap; ++r) {
      if (r == rank) continue;
      const Slice theirs = sliceOf(k, r);
      CopyBytes(next + place(r), in + theirs.first * e, theirs.length * e);
    }
    t_.Round();
    if (k == 0) {
      if (FindHeapBuffers(count * e) && mayTakeHeap) return InHeaps(in, out, count, dtype, op);
      inputs_.FindHeap([&](int) { return count * e; });
    }
    if (k >= 1) {
      for (int r = 0; r < size; ++r) {
        const Slice reduced = sliceOf(k - 1, r);
        t_.CopyOut(out + reduced.first * e, t_.HalfOf(r) + place(r), reduced.length * e, count * e);
      }
    }
  }
}

void AllReduceAlgorithms::CrossMemory(const uint8_t* in, uint8_t* out, size_t count, DataType dtype,
                                      ReduceOp op, bool mayTakeHeap) {
  const int rank = t_.Rank(), size = t_.Size();
  const size_t e = DataTypeSize(dtype);
  const size_t align = LineElements(e);
  const Slice mine = AlignedSlice(count, size, rank, e);
  const size_t first = mine.first, last = mine.first + mine.length;
  // The first round carries every rank's input and output address (and the agreement check),
  // and its byte count: the writes below land in the peers' outputs, so a raw call (no agreement
  // check) whose counts differ across ranks must fail here, not write past a peer's buffer. The
  // count is mixed with the round, so a value left from an earlier round never matches.
  const uint64_t bytes = count * e;
  const auto callKey = [&](uint64_t round) {
    return static_cast<int64_t>((bytes * 0x9E3779B97F4A7C15ULL) ^ round);
  };
  const DirectTable table = t_.NextTable();
  table.at[0] = reinterpret_cast<uintptr_t>(in);
  table.at[1] = reinterpret_cast<uintptr_t>(out);
  t_.PublishValue(callKey(t_.Rounds() + 1));
  PublishHeapBuffers(in, out, bytes);
  t_.Round();
  for (int r = 0; r < size; ++r) {
    if (t_.ValueOf(r) != callKey(t_.Rounds())) {
      Fail(ERROR_RANK_MISMATCH, t_.Where(), "rank ", r, " (", t_.PidOf(r),
           ") is not in an AllReduce of ", bytes,
           " bytes by process_vm_writev like this rank "
           "(different counts or dtypes across ranks); no data moved");
    }
  }
  if (FindHeapBuffers(bytes) && mayTakeHeap) return InHeaps(in, out, count, dtype, op);
  // Each rank reduces its own slice: it reads the peers' parts of it into its next half (free:
  // every peer has finished reading the half of two rounds ago), folds them in rank order into
  // its output and writes the result into every peer's output. Only the owner of a slice reads
  // it from the inputs or writes it to the outputs, so in-place calls (in == out) are safe, and
  // no round is needed until the end, which keeps every buffer in place until all are done.
  const size_t chunkBytes = std::min(kCrossMemoryChunkBytes, t_.HalfBytes() / (size - 1));
  size_t chunk = std::max<size_t>(1, chunkBytes / e);
  if (chunk > align) chunk -= chunk % align;
  uint8_t* const scratch = t_.NextHalf();
  srcs_.resize(size);
  for (size_t lo = first; lo < last; lo += chunk) {
    const size_t n = std::min(chunk, last - lo);
    // The first peer's part is read straight into the output, which the reduction then
    // overwrites in place (ReduceArrays allows dst to be one of the sources): one buffer less in
    // the caches. Not when in place: there the output is this rank's own part.
    bool intoOutput = in != out;
    uint8_t* part = scratch;
    for (int r = 0; r < size; ++r) {
      if (r == rank) {
        srcs_[r] = in + lo * e;
        continue;
      }
      uint8_t* to = intoOutput ? out + lo * e : part;
      t_.CopyCrossMemory(CrossMemoryDirection::kRead, r, to, t_.TableOf(r).at[0] + lo * e, n * e);
      srcs_[r] = to;
      if (!intoOutput) part += chunk * e;
      intoOutput = false;
    }
    ReduceArrays(dtype, op, srcs_.data(), size, out + lo * e, n);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      t_.CopyCrossMemory(CrossMemoryDirection::kWrite, r, out + lo * e,
                         t_.TableOf(r).at[1] + lo * e, n * e);
    }
  }
  t_.Round();
}

void AllReduceAlgorithms::Heap(const uint8_t* in, uint8_t* out, size_t count, DataType dtype,
                               ReduceOp op) {
  if (!t_.HasHeaps()) FailForced(t_.Where(), Collective::kAllReduce, kAlgoHeap, kNoHeaps);
  const size_t bytes = count * DataTypeSize(dtype);
  PublishHeapBuffers(in, out, bytes);
  t_.Round();
  int missing = -1;
  if (!FindHeapBuffers(bytes, &missing)) {
    FailForced(t_.Where(), Collective::kAllReduce, kAlgoHeap,
               missing >= 0 ? Concat("rank ", missing,
                                     "'s input and output do not both lie in its heap "
                                     "(AllocateShared)")
                            : std::string("the ranks published different sizes"));
  }
  InHeaps(in, out, count, dtype, op);
}

bool AllReduceAlgorithms::PublishHeapBuffers(const uint8_t* in, const uint8_t* out, size_t bytes) {
  const int64_t inAt = t_.HasHeaps() ? t_.Heap().OffsetOf(in, bytes) : int64_t{-1};
  const int64_t outAt = inAt >= 0 ? t_.Heap().OffsetOf(out, bytes) : int64_t{-1};
  const bool both = inAt >= 0 && outAt >= 0;
  if (both) {
    const DirectTable table = t_.NextTable();
    table.from[0] = inAt;
    table.to[0] = outAt;
    table.from[1] = static_cast<int64_t>(bytes);
  }
  t_.PublishFlags(both ? kHeapBuffers : 0);
  return both;
}

bool AllReduceAlgorithms::FindHeapBuffers(size_t bytes, int* missing) {
  const int size = t_.Size();
  heapInput_.assign(size, nullptr);
  heapOutput_.assign(size, nullptr);
  bool all = true;
  for (int r = 0; r < size; ++r) {
    if ((t_.FlagsOf(r) & kHeapBuffers) == 0) {
      if (all && missing != nullptr) *missing = r;
      all = false;
      continue;
    }
    const DirectTable table = t_.TableOf(r);
    all = all && table.from[1] == static_cast<int64_t>(bytes);
    heapInput_[r] = t_.PeerHeap(r, table.from[0], bytes);
    heapOutput_[r] = t_.PeerHeap(r, table.to[0], bytes);
  }
  return all;
}

void AllReduceAlgorithms::InHeaps(const uint8_t* in, uint8_t* out, size_t count, DataType dtype,
                                  ReduceOp op) {
  const int rank = t_.Rank(), size = t_.Size();
  const size_t e = DataTypeSize(dtype);
  // In place, this rank writes only its own slice, and the peers read only theirs of its input.
  const Slice mine = AlignedSlice(count, size, rank, e);
  srcs_.resize(size);
  for (int r = 0; r < size; ++r) srcs_[r] = (r == rank ? in : heapInput_[r]) + mine.first * e;
  if (mine.length != 0) {
    ReduceArrays(dtype, op, srcs_.data(), size, out + mine.first * e, mine.length);
  }
  t_.Round();  // every slice is reduced; no rank reads an input any more
  for (int step = 1; step < size; ++step) {
    const int r = (rank + step) % size;
    const Slice theirs = AlignedSlice(count, size, r, e);
    t_.CopyOut(out + theirs.first * e, heapOutput_[r] + theirs.first * e, theirs.length * e,
               count * e);
  }
  t_.Round();  // keeps every output in place until the peers have copied from it
}

}  // namespace shm
}  // namespace collops
