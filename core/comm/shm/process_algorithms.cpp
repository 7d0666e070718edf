// The collectives of ProcessCommunicator, built from rounds (see process_comm.h).
//
// Algorithms (docs/backends.md has the table and the measurements behind the size rule):
//  - AllReduce "oneshot": copy the input into the own half, one round, then every rank reduces
//    all R halves in rank order 0..R-1 into its output. One synchronisation; each rank reads
//    R times the data. Default up to SegmentHeader::oneShotMaxBytes where "cma" (below) does
//    not apply.
//  - AllReduce "rsag": per chunk, each rank copies the R-1 slices the others reduce into its half
//    (round A), reduces its own slice over all ranks into the next half (round B), then copies
//    every rank's reduced slice out. Each rank reads ~3x the data regardless of R, and the chunk
//    is still in cache between its copy in and its copy out.
//  - AllGather(V), Broadcast: staged through the sender's half, one round per half-full.
//  - ReduceScatterV, AllToAllV: the half is cut into R-1 regions of RegionBytes(), one per other
//    rank (a rank's own piece never goes through shared memory, so it gets no region: at R=2 the
//    one destination has the whole half, half as many rounds as R regions gave).
//  - AllReduce "heap": when every rank's input and output lie in its heap (AllocateShared), the
//    first round of rsag or cma (which publishes where they lie) is followed by thread mode's
//    algorithm: each rank reduces its own slice straight from the peers' inputs into its output,
//    one round, copies the peers' reduced slices straight from their outputs, one round. No
//    staging and no system call; R=2, 1 MiB: 60 us (thread mode 55), against 107-141 us by cma.
//  - Shared buffers (AllocateShared, process_heap.h): data whose buffer lies in its rank's heap
//    is not staged; peers read (or, for AllToAllV outputs, write) it in place after the first
//    round, which carries where it lies (RankControl::value or the DirectTable), and a later
//    round keeps it in place until they are done. One copy instead of two; a rank decides alone
//    what it stages and every peer learns that from the first round, so choosing the path costs
//    no round: the only one added is the one that keeps shared data in place, where it is used.
//  - process_vm_readv/writev ("cma"; only when the creation probe found that every rank may reach
//    every peer; SegmentHeader::crossMemoryMinBytes and crossMemoryMaxBytes bound the sizes):
//    AllToAllV: a piece whose sender's input is ordinary memory is read by its receiver straight
//    from the sender's process after the first round (which carries its address); the second
//    round keeps the input in place until then. AllGather(V), Broadcast: likewise for a whole
//    input, while every rank has a CPU of its own. AllReduce (where SegmentHeader::
//    allReduceCrossMemory says the kernel copy is cheap enough, cross_memory_policy.h): each rank
//    reads the peers' parts of its own slice, reduces them in rank order and writes the result
//    into every peer's output: two rounds whatever the size. Send/Recv (process_p2p.cpp): the
//    receiver reads the message.
// Reductions always fold the ranks in order 0..R-1 with ReduceArrays, so every rank computes
// bit-identical results.
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include "collops/reduce.h"
#include "core/comm/shm/process_comm.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {
namespace {

// `where` makes the message prefix only on failure: building it costs more than a small
// collective's data movement.
template <class Where>
size_t ElementBytes(DataType dtype, Where&& where) {
  const size_t bytes = DataTypeSize(dtype);
  if (bytes == 0)
    Fail(ERROR_INVALID_TENSOR_DTYPE, where(), "dtype ", DataTypeName(dtype), " has no size");
  return bytes;
}

template <class Where>
void CheckReducible(DataType dtype, Where&& where) {
  if (!IsReducibleDtype(dtype)) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, where(), "cannot reduce dtype ", DataTypeName(dtype));
  }
}

/// Elements [lo, lo + per) of a count, clipped: how many of them exist.
size_t Clip(int64_t count, size_t lo, size_t per) {
  if (count <= static_cast<int64_t>(lo)) return 0;
  return std::min(per, static_cast<size_t>(count) - lo);
}

size_t CeilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

/// Elements of `e` bytes per cache line (at least one): AllReduce's slices start on cache lines.
size_t LineElements(size_t e) { return std::max<size_t>(1, 64 / e); }

/// Rank r's part of `count` elements cut into `ranks` cache-line-aligned slices, the one it
/// reduces in AllReduce's cma and heap paths.
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

/// RankControl::direct flags: the rank published a DirectTable; it sends some piece whole.
constexpr int32_t kDirectTable = 1;
constexpr int32_t kDirectWhole = 2;
/// ... its input is in its heap.
constexpr int32_t kDirectInput = 4;
/// ... some AllToAllV piece of its moves by process_vm_readv, from the address in its at[].
constexpr int32_t kCrossMemory = 8;
/// ... (AllReduce) its input and output both lie in its heap: from[0] and to[0] are their
/// offsets, from[1] the call's bytes.
constexpr int32_t kHeapBuffers = 16;
/// One-shot AllReduce calls below this stage their input as always: their one round beats the
/// heap path's three.
constexpr size_t kHeapOneShotMinBytes = 64 << 10;
/// A piece from a sender whose input is in its heap is not staged at all from this size up: its
/// receiver (or the sender, when the output is shared too) copies it whole after the first round,
/// which then needs a second round before the buffers are released. Measured at R=2 (bound),
/// staged vs shared, medians of 3 alternating runs: AllToAllV 16 KiB (pieces of 5-11 KiB) 2.2 vs
/// 1.1 us, 64 KiB 7.2 vs 3.0 us; at R=4 on 2 cores 16-256 KiB within noise of each other.
constexpr int64_t kDirectWholeBytes = 8 << 10;

/// AllReduce by process_vm_readv/writev: the part of its slice a rank moves per system call. The
/// parts of one step stay in the caches between the read, the reduction and the writes; measured
/// at R=2, 1 MiB: 96 us in one step, 89 us in 128 KiB parts, 94 us in 64 KiB ones.
constexpr size_t kCrossMemoryChunkBytes = 128 << 10;

bool SendsWhole(int64_t count, size_t e) {
  return count * static_cast<int64_t>(e) >= kDirectWholeBytes;
}

}  // namespace

void ProcessCommunicator::CopyOut(uint8_t* dst, const uint8_t* src, size_t bytes,
                                  size_t outputBytes) const {
  const uint64_t streamFrom = segment_.Header().streamOutputBytes;
  if (streamFrom != 0 && outputBytes >= streamFrom) {
    StreamBytes(dst, src, bytes);
  } else {
    CopyBytes(dst, src, bytes);
  }
}

size_t ProcessCommunicator::RegionBytes() const {
  return (segment_.HalfBytes() / std::max(1, size_ - 1)) & ~size_t{63};
}

size_t ProcessCommunicator::RegionOffset(int owner, int destination) const {
  return static_cast<size_t>(destination < owner ? destination : destination - 1) * RegionBytes();
}

void ProcessCommunicator::GatherRounds(const uint8_t* in, size_t myBytes, uint8_t* out,
                                       const std::vector<size_t>& bytesOf,
                                       const std::vector<size_t>& offsetOf) {
  size_t outputBytes = 0;
  for (const size_t b : bytesOf) outputBytes += b;
  const auto copyOwn = [&] {
    CopyOut(out + offsetOf[rank_], in, std::min(myBytes, bytesOf[rank_]), outputBytes);
  };
  if (size_ == 1) return copyOwn();
  // Shared buffers: a rank whose input is in its heap (and not small) stages nothing; the others
  // copy it straight from there after the first round, and a second round keeps it in place
  // until they have. An input of ordinary memory large enough for process_vm_readv is not staged
  // either: the others read it from this rank's process.
  const bool shared = PublishInput(in, myBytes, kDirectWholeBytes) >= 0;
  const bool crossHere = PublishCrossInput(segment_.Header().allGatherAlgo, shared ? nullptr : in,
                                           myBytes, outputBytes);
  const size_t half = segment_.HalfBytes();
  std::vector<bool> staged(size_, true);  // by rank: its input went through its slot
  size_t rounds = 1;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * half;
    if (!shared && !crossHere) {
      CopyBytes(NextHalf(), in + lo, Clip(static_cast<int64_t>(myBytes), lo, half));
    }
    Round();
    if (k == 0) {
      copyOwn();  // after the first round: the agreement check precedes any output
      const bool anyShared = FindSharedInputs([&](int r) { return bytesOf[r]; });
      bool anyCross = false;
      size_t most = 0;
      for (int r = 0; r < size_; ++r) {
        const bool cross = CrossInput(r);
        anyCross = anyCross || cross;
        staged[r] = !cross && peerInput_[r] == nullptr && !(r == rank_ && shared);
        if (staged[r]) most = std::max(most, bytesOf[r]);
        if (r == rank_) continue;
        if (peerInput_[r] != nullptr) {
          CopyOut(out + offsetOf[r], peerInput_[r], bytesOf[r], outputBytes);
        } else if (cross) {
          CopyCrossMemory(CrossMemoryDirection::kRead, r, out + offsetOf[r],
                          segment_.Direct(r, round_).at[0], bytesOf[r]);
        }
      }
      rounds = std::max<size_t>(anyShared || anyCross ? 2 : 1, CeilDiv(most, half));
    }
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || !staged[r]) continue;
      CopyOut(out + offsetOf[r] + lo, HalfOf(r, round_),
              Clip(static_cast<int64_t>(bytesOf[r]), lo, half), outputBytes);
    }
  }
}

bool ProcessCommunicator::PublishCrossInput(int32_t algo, const uint8_t* in, size_t bytes,
                                            size_t outputBytes) {
  if (!crossMemory_) return false;
  const uint64_t next = round_ + 1;
  // Staged, every rank copies each input twice in all (once in, once out); read by the others,
  // R-1 times in kernel copies, which cost more per byte. Only when every rank has a CPU of its
  // own do the receivers' reads overlap. Measured with 2 CPUs (us, medians, staged vs cma):
  // AllGather R=2 64 KiB 6.1-6.4 vs 3.4-3.6, 1 MiB 80 vs 40, 16 MiB 1860 vs 1370; Broadcast R=2
  // 1 MiB 115 vs 45-50; at R=3 and R=4 no better or worse (Broadcast R=4 4 MiB 794 vs 1186-1229).
  const SegmentHeader& header = segment_.Header();
  const bool cross =
      in != nullptr && algo != kAlgoStaged && bytes >= header.crossMemoryMinBytes &&
      (algo == kAlgoCrossMemory ||
       (!header.Oversubscribed() && size_ * outputBytes <= header.crossMemoryMaxBytes));
  if (cross) segment_.Direct(rank_, next).at[0] = reinterpret_cast<uintptr_t>(in);
  segment_.Rank(rank_).direct[next & 1].store(cross ? kCrossMemory : 0, std::memory_order_relaxed);
  return cross;
}

bool ProcessCommunicator::CrossInput(int rank) const {
  return crossMemory_ && (DirectFlags(rank) & kCrossMemory) != 0;
}

void ProcessCommunicator::AllGatherBytes(const void* in, void* out, size_t bytes) {
  Enter("AllGatherBytes");
  std::vector<size_t> bytesOf(size_, bytes), offsetOf(size_);
  for (int r = 0; r < size_; ++r) offsetOf[r] = r * bytes;
  GatherRounds(static_cast<const uint8_t*>(in), bytes, static_cast<uint8_t*>(out), bytesOf,
               offsetOf);
}

void ProcessCommunicator::AllGatherV(const void* in, size_t sendCount, void* out,
                                     const int64_t* recvCounts, const int64_t* rdispls,
                                     DataType dtype) {
  Enter("AllGatherV");
  auto where = [this] { return Where(); };
  const size_t e = ElementBytes(dtype, where);
  std::vector<size_t> bytesOf(size_), offsetOf(size_);
  for (int r = 0; r < size_; ++r) {
    bytesOf[r] = static_cast<size_t>(std::max<int64_t>(recvCounts[r], 0)) * e;
    offsetOf[r] = static_cast<size_t>(rdispls[r]) * e;
  }
  GatherRounds(static_cast<const uint8_t*>(in), sendCount * e, static_cast<uint8_t*>(out), bytesOf,
               offsetOf);
}

void ProcessCommunicator::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  Enter("Broadcast");
  auto where = [this] { return Where(); };
  if (root < 0 || root >= size_) {
    Fail(ERROR_INVALID_PARAM, Where(), "root ", root, " is not a rank of ", size_);
  }
  const size_t bytes = count * ElementBytes(dtype, where);
  if (size_ == 1) return;
  auto* data = static_cast<uint8_t*>(buf);
  // Shared buffers: a root whose buffer is in its heap stages nothing; the others copy it from
  // there after the first round, and a second round keeps it in place until they have. Only the
  // root publishes its buffer. A large buffer of ordinary memory is not staged either: the others
  // read it from the root's process.
  const bool rootShared =
      PublishInput(rank_ == root ? data : nullptr, bytes, kDirectWholeBytes) >= 0;
  const bool rootCross = PublishCrossInput(
      segment_.Header().broadcastAlgo, rank_ == root && !rootShared ? data : nullptr, bytes, bytes);
  const size_t half = segment_.HalfBytes();
  size_t rounds = 1;
  bool direct = false;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * half;
    const size_t n = Clip(static_cast<int64_t>(bytes), lo, half);
    if (rank_ == root && !rootShared && !rootCross) CopyBytes(NextHalf(), data + lo, n);
    Round();
    if (k == 0) {
      const bool shared = FindSharedInputs([&](int) { return bytes; });
      const bool cross = CrossInput(root);
      direct = shared || cross;
      rounds = direct ? 2 : std::max<size_t>(1, CeilDiv(bytes, half));
      if (shared && rank_ != root) CopyOut(data, peerInput_[root], bytes, bytes);
      if (cross && rank_ != root) {
        CopyCrossMemory(CrossMemoryDirection::kRead, root, data,
                        segment_.Direct(root, round_).at[0], bytes);
      }
    }
    if (!direct && rank_ != root) CopyOut(data + lo, HalfOf(root, round_), n, bytes);
  }
}

void ProcessCommunicator::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                    ReduceOp op) {
  Enter("AllReduce");
  auto where = [this] { return Where(); };
  CheckReducible(dtype, where);
  const size_t e = ElementBytes(dtype, where);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (size_ == 1) {
    if (src != dst && count != 0) std::memmove(dst, src, count * e);
    return;
  }
  // Every input of the rule is the same on every rank (the counts and dtype by the agreement
  // check, the rest from the segment), so all ranks take the same path.
  const SegmentHeader& header = segment_.Header();
  int32_t algo = header.allReduceAlgo;
  if (algo == kAlgoAuto) {
    // With more ranks than CPUs the 2(R-1) system calls per slice part run in turn with everyone
    // else's: cma pays only for twice the slice, and not at all past two ranks per CPU (us, 2
    // CPUs, rsag vs cma: R=3 64 KiB 14.7-15.9 vs 17.6-24.5, 128 KiB 32.8-36.6 vs 25.9-26.5; R=4
    // 64 KiB 18.6-24.7 vs 26.6-27.7, 128 KiB 39-51 vs 36.5-38; R=7 128 KiB 73-75 vs 106-108,
    // 1 MiB 696-720 vs 815-860).
    const bool oversubscribed = header.Oversubscribed();
    const uint64_t sliceFrom = header.crossMemoryMinBytes * (oversubscribed ? 2 : 1);
    const bool cross = crossMemory_ && header.allReduceCrossMemory != 0 &&
                       CeilDiv(count, size_) * e >= sliceFrom &&
                       size_ * count * e <= header.crossMemoryMaxBytes &&
                       (!oversubscribed || size_ <= 2 * header.cpus);
    // One-shot only while it takes one round: past a half, rsag's chunks are as large.
    const uint64_t bytes = count * e, half = segment_.HalfBytes();
    const bool oneShot = bytes <= std::min<uint64_t>(header.oneShotMaxBytes, half) ||
                         (bytes > header.largeOneShotFromBytes &&
                          bytes <= std::min<uint64_t>(header.largeOneShotToBytes, half));
    algo = cross ? kAlgoCrossMemory : oneShot ? kAlgoOneShot : kAlgoReduceScatterAllGather;
  }
  if (algo == kAlgoCrossMemory && !crossMemory_) algo = kAlgoReduceScatterAllGather;
  if (algo == kAlgoOneShot) {
    AllReduceOneShot(src, dst, count, dtype, op);
  } else if (algo == kAlgoCrossMemory) {
    AllReduceCrossMemory(src, dst, count, dtype, op);
  } else {
    AllReduceRsAg(src, dst, count, dtype, op);
  }
}

void ProcessCommunicator::AllReduceOneShot(const uint8_t* in, uint8_t* out, size_t count,
                                           DataType dtype, ReduceOp op) {
  const size_t e = DataTypeSize(dtype);
  const size_t per = segment_.HalfBytes() / e;
  const size_t rounds = std::max<size_t>(1, CeilDiv(count, per));
  // A large call of one round may find every buffer in the heaps (the heap path, with its first
  // round), or read in place the inputs of the ranks whose buffers are there (they stage nothing,
  // and one more round keeps those inputs until every rank has read them).
  const bool heapCandidate = rounds == 1 && count * e >= kHeapOneShotMinBytes;
  const bool inHeap = heapCandidate && PublishHeapBuffers(in, out, count * e);
  std::vector<const void*> srcs(size_);
  bool readInPlace = false;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * per;
    const size_t n = Clip(static_cast<int64_t>(count), lo, per);
    if (!inHeap) CopyBytes(NextHalf(), in + lo * e, n * e);
    Round();
    if (heapCandidate && FindHeapBuffers(count * e))
      return AllReduceInHeaps(in, out, count, dtype, op);
    if (n == 0) continue;
    for (int r = 0; r < size_; ++r) {
      const uint8_t* heap = heapCandidate ? heapInput_[r] : nullptr;
      readInPlace = readInPlace || heap != nullptr;
      srcs[r] = r == rank_ ? in + lo * e : heap != nullptr ? heap : HalfOf(r, round_);
    }
    ReduceArrays(dtype, op, srcs.data(), size_, out + lo * e, n);
  }
  if (readInPlace) Round();
}

void ProcessCommunicator::AllReduceRsAg(const uint8_t* in, uint8_t* out, size_t count,
                                        DataType dtype, ReduceOp op) {
  const size_t e = DataTypeSize(dtype);
  const size_t align = LineElements(e);
  const size_t chunkBytes = std::min<size_t>(segment_.Header().chunkBytes, segment_.HalfBytes());
  size_t fullSlice = chunkBytes / size_ / e / align * align;
  if (fullSlice == 0) fullSlice = align;
  const size_t fullChunk = fullSlice * size_;
  // Shared buffers: a rank whose input lies in its heap stages nothing in round A; the others
  // read its slices there. Each rank publishes its input's heap offset with the first round.
  const int64_t inAt = PublishInput(in, count * e, 0);
  PublishHeapBuffers(in, out, count * e);
  std::vector<const void*> srcs(size_);
  size_t lo = 0;
  do {
    const size_t n = std::min(fullChunk, count - lo);
    const size_t slice = n == fullChunk ? fullSlice : CeilDiv(CeilDiv(n, size_), align) * align;
    auto begin = [&](int r) { return std::min(n, r * slice); };
    auto end = [&](int r) { return std::min(n, (r + 1) * slice); };
    // Round A: publish the slices the other ranks reduce.
    uint8_t* stage = NextHalf();
    for (int r = 0; r < size_ && inAt < 0; ++r) {
      if (r != rank_)
        CopyBytes(stage + begin(r) * e, in + (lo + begin(r)) * e, (end(r) - begin(r)) * e);
    }
    Round();
    if (lo == 0 && FindHeapBuffers(count * e)) return AllReduceInHeaps(in, out, count, dtype, op);
    if (lo == 0) FindSharedInputs([&](int) { return count * e; });
    // Reduce the own slice over all ranks into the half of round B.
    const size_t mine = end(rank_) - begin(rank_);
    if (mine != 0) {
      for (int r = 0; r < size_; ++r) {
        const size_t at = (lo + begin(rank_)) * e;
        srcs[r] = r == rank_                 ? in + at
                  : peerInput_[r] != nullptr ? peerInput_[r] + at
                                             : HalfOf(r, round_) + begin(rank_) * e;
      }
      ReduceArrays(dtype, op, srcs.data(), size_, NextHalf() + begin(rank_) * e, mine);
    }
    // Round B also keeps every shared input in place until no rank reads it any more.
    Round();
    // All-gather the reduced slices.
    for (int r = 0; r < size_; ++r) {
      CopyOut(out + (lo + begin(r)) * e, HalfOf(r, round_) + begin(r) * e, (end(r) - begin(r)) * e,
              count * e);
    }
    lo += n;
  } while (lo < count);
}

void ProcessCommunicator::AllReduceCrossMemory(const uint8_t* in, uint8_t* out, size_t count,
                                               DataType dtype, ReduceOp op) {
  const size_t e = DataTypeSize(dtype);
  const size_t align = LineElements(e);
  const Slice mine = AlignedSlice(count, size_, rank_, e);
  const size_t first = mine.first, last = mine.first + mine.length;
  // The first round carries every rank's input and output address (and the agreement check),
  // and its byte count: the writes below land in the peers' outputs, so a raw call (no agreement
  // check) whose counts differ across ranks must fail here, not write past a peer's buffer. The
  // count is mixed with the round, so a value left from an earlier round never matches.
  const uint64_t bytes = count * e;
  const auto callKey = [&](uint64_t round) {
    return static_cast<int64_t>((bytes * 0x9E3779B97F4A7C15ULL) ^ round);
  };
  const DirectTable table = segment_.Direct(rank_, round_ + 1);
  table.at[0] = reinterpret_cast<uintptr_t>(in);
  table.at[1] = reinterpret_cast<uintptr_t>(out);
  segment_.Rank(rank_).value[(round_ + 1) & 1].store(callKey(round_ + 1),
                                                     std::memory_order_relaxed);
  PublishHeapBuffers(in, out, bytes);
  Round();
  for (int r = 0; r < size_; ++r) {
    if (segment_.Rank(r).value[round_ & 1].load(std::memory_order_relaxed) != callKey(round_)) {
      Fail(ERROR_RANK_MISMATCH, Where(), "rank ", r, " (", PidOf(r), ") is not in an AllReduce of ",
           bytes,
           " bytes by process_vm_writev like this rank "
           "(different counts or dtypes across ranks); no data moved");
    }
  }
  if (FindHeapBuffers(bytes)) return AllReduceInHeaps(in, out, count, dtype, op);
  // Each rank reduces its own slice: it reads the peers' parts of it into its next half (free:
  // every peer has finished reading the half of two rounds ago), folds them in rank order into
  // its output and writes the result into every peer's output. Only the owner of a slice reads
  // it from the inputs or writes it to the outputs, so in-place calls (in == out) are safe, and
  // no round is needed until the end, which keeps every buffer in place until all are done.
  const size_t chunkBytes = std::min(kCrossMemoryChunkBytes, segment_.HalfBytes() / (size_ - 1));
  size_t chunk = std::max<size_t>(1, chunkBytes / e);
  if (chunk > align) chunk -= chunk % align;
  uint8_t* const scratch = NextHalf();
  std::vector<const void*> srcs(size_);
  for (size_t lo = first; lo < last; lo += chunk) {
    const size_t n = std::min(chunk, last - lo);
    // The first peer's part is read straight into the output, which the reduction then
    // overwrites in place (ReduceArrays allows dst to be one of the sources): one buffer less in
    // the caches (R=2 1 MiB 83-85 -> 72-74 us, 4 MiB 425-445 -> 406-424 us). Not when in place:
    // there the output is this rank's own part.
    bool intoOutput = in != out;
    uint8_t* part = scratch;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        srcs[r] = in + lo * e;
        continue;
      }
      uint8_t* to = intoOutput ? out + lo * e : part;
      CopyCrossMemory(CrossMemoryDirection::kRead, r, to, segment_.Direct(r, round_).at[0] + lo * e,
                      n * e);
      srcs[r] = to;
      if (!intoOutput) part += chunk * e;
      intoOutput = false;
    }
    ReduceArrays(dtype, op, srcs.data(), size_, out + lo * e, n);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      CopyCrossMemory(CrossMemoryDirection::kWrite, r, out + lo * e,
                      segment_.Direct(r, round_).at[1] + lo * e, n * e);
    }
  }
  Round();
}

bool ProcessCommunicator::PublishHeapBuffers(const uint8_t* in, const uint8_t* out, size_t bytes) {
  const int64_t inAt = segment_.HasHeaps() ? heap_.OffsetOf(in, bytes) : int64_t{-1};
  const int64_t outAt = inAt >= 0 ? heap_.OffsetOf(out, bytes) : int64_t{-1};
  const bool both = inAt >= 0 && outAt >= 0;
  if (both) {
    const DirectTable table = segment_.Direct(rank_, round_ + 1);
    table.from[0] = inAt;
    table.to[0] = outAt;
    table.from[1] = static_cast<int64_t>(bytes);
  }
  segment_.Rank(rank_).direct[(round_ + 1) & 1].store(both ? kHeapBuffers : 0,
                                                      std::memory_order_relaxed);
  return both;
}

bool ProcessCommunicator::FindHeapBuffers(size_t bytes) {
  heapInput_.assign(size_, nullptr);
  heapOutput_.assign(size_, nullptr);
  bool all = true;
  for (int r = 0; r < size_; ++r) {
    if ((DirectFlags(r) & kHeapBuffers) == 0) {
      all = false;
      continue;
    }
    const DirectTable table = segment_.Direct(r, round_);
    all = all && table.from[1] == static_cast<int64_t>(bytes);
    heapInput_[r] = PeerHeap(r, table.from[0], bytes);
    heapOutput_[r] = PeerHeap(r, table.to[0], bytes);
  }
  return all;
}

void ProcessCommunicator::AllReduceInHeaps(const uint8_t* in, uint8_t* out, size_t count,
                                           DataType dtype, ReduceOp op) {
  const size_t e = DataTypeSize(dtype);
  // In place, this rank writes only its own slice, and the peers read only theirs of its input.
  const Slice mine = AlignedSlice(count, size_, rank_, e);
  std::vector<const void*> srcs(size_);
  for (int r = 0; r < size_; ++r) srcs[r] = (r == rank_ ? in : heapInput_[r]) + mine.first * e;
  if (mine.length != 0) {
    ReduceArrays(dtype, op, srcs.data(), size_, out + mine.first * e, mine.length);
  }
  Round();  // every slice is reduced; no rank reads an input any more
  for (int step = 1; step < size_; ++step) {
    const int r = (rank_ + step) % size_;
    const Slice theirs = AlignedSlice(count, size_, r, e);
    CopyOut(out + theirs.first * e, heapOutput_[r] + theirs.first * e, theirs.length * e,
            count * e);
  }
  Round();  // keeps every output in place until the peers have copied from it
}

uint8_t* ProcessCommunicator::PeerHeap(int owner, int64_t offset, uint64_t bytes) {
  const uint64_t heapBytes = segment_.HasHeaps() ? segment_.HeapBytes() : 0;
  if (offset < 0 || static_cast<uint64_t>(offset) > heapBytes || bytes > heapBytes - offset) {
    Break(ERROR_COMM_FAIL, owner,
          Concat(Where(), "rank ", owner, " published heap range [", offset, ", +", bytes,
                 ") outside its ", heapBytes, "-byte heap (memory corruption?)"));
  }
  return segment_.Heap(owner) + offset;
}

int64_t ProcessCommunicator::PublishInput(const void* in, size_t bytes, size_t minBytes) {
  const int64_t at =
      segment_.HasHeaps() && bytes >= minBytes ? heap_.OffsetOf(in, bytes) : int64_t{-1};
  segment_.Rank(rank_).value[(round_ + 1) & 1].store(at, std::memory_order_relaxed);
  return at;
}

template <class BytesOf>
bool ProcessCommunicator::FindSharedInputs(BytesOf&& bytesOf) {
  bool any = false;
  peerInput_.assign(size_, nullptr);
  for (int r = 0; r < size_; ++r) {
    const int64_t at = segment_.Rank(r).value[round_ & 1].load(std::memory_order_relaxed);
    if (at < 0) continue;
    any = true;
    uint8_t* input = PeerHeap(r, at, bytesOf(r));
    if (r != rank_) peerInput_[r] = input;
  }
  return any;
}

void ProcessCommunicator::ReduceScatterV(const void* in, const int64_t* sendCounts,
                                         const int64_t* sdispls, void* out, size_t recvCount,
                                         DataType dtype, ReduceOp op) {
  Enter("ReduceScatterV");
  auto where = [this] { return Where(); };
  CheckReducible(dtype, where);
  const size_t e = ElementBytes(dtype, where);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (size_ == 1) {
    if (recvCount != 0) std::memmove(dst, src + sdispls[0] * e, recvCount * e);
    return;
  }
  const size_t per = RegionBytes() / e;
  const int64_t most = *std::max_element(sendCounts, sendCounts + size_);
  size_t rounds =
      std::max<size_t>(1, CeilDiv(static_cast<size_t>(std::max<int64_t>(most, 0)), per));
  // Shared buffers: a rank whose input is in its heap publishes its DirectTable and stages none of
  // its pieces of kDirectWholeBytes or more; their receivers reduce them in place. sendCounts is
  // the same vector on every rank (the agreement check sees to that), so after the first round
  // all agree on which pieces were staged, how many rounds those need, and that one more round
  // keeps the shared inputs in place until every reduction reading them is done.
  const bool heaps = segment_.HasHeaps();
  if (heaps) PublishDirect(src, sendCounts, sdispls, nullptr, nullptr, nullptr, e);
  peerInput_.assign(size_, nullptr);
  bool shared = false;      // some rank published a table
  bool allInPlace = false;  // every peer's piece for this rank is read in place
  std::vector<const void*> srcs(size_);
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * per;
    uint8_t* stage = NextHalf();
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && !(heaps && direct_[r].send)) {
        CopyBytes(stage + RegionOffset(rank_, r), src + (sdispls[r] + lo) * e,
                  Clip(sendCounts[r], lo, per) * e);
      }
    }
    Round();
    if (k == 0 && heaps) {
      shared = FindSharedPieces(sendCounts, recvCount, e);
      if (shared) rounds = StagedRounds(sendCounts, e, per);
      allInPlace = shared;
      for (int r = 0; r < size_; ++r) allInPlace = allInPlace && (r == rank_ || peerInput_[r]);
    }
    // With every piece in place the whole reduction runs now; else chunk by chunk.
    const size_t n =
        allInPlace ? (k == 0 ? recvCount : 0) : Clip(static_cast<int64_t>(recvCount), lo, per);
    if (n == 0) continue;
    for (int r = 0; r < size_; ++r) {
      srcs[r] = r == rank_                 ? src + (sdispls[rank_] + lo) * e
                : peerInput_[r] != nullptr ? peerInput_[r] + lo * e
                                           : HalfOf(r, round_) + RegionOffset(r, rank_);
    }
    ReduceArrays(dtype, op, srcs.data(), size_, dst + lo * e, n);
  }
  if (shared) Round();
}

bool ProcessCommunicator::FindSharedPieces(const int64_t* sendCounts, size_t recvCount, size_t e) {
  bool any = false;
  peerInput_.assign(size_, nullptr);
  for (int r = 0; r < size_; ++r) {
    if ((DirectFlags(r) & kDirectTable) == 0) continue;
    any = true;
    if (r == rank_ || !SendsWhole(sendCounts[rank_], e)) continue;
    peerInput_[r] = PeerHeap(r, segment_.Direct(r, round_).from[rank_], recvCount * e);
  }
  return any;
}

size_t ProcessCommunicator::StagedRounds(const int64_t* sendCounts, size_t e, size_t per) const {
  // The piece from s to r was staged unless s published a table and the piece is whole.
  size_t rounds = 1;
  for (int r = 0; r < size_; ++r) {
    bool staged = false;
    for (int s = 0; s < size_ && !staged; ++s) {
      const bool table = (DirectFlags(s) & kDirectTable) != 0;
      staged = s != r && !(table && SendsWhole(sendCounts[r], e));
    }
    if (staged) rounds = std::max(rounds, CeilDiv(static_cast<size_t>(sendCounts[r]), per));
  }
  return rounds;
}

int32_t ProcessCommunicator::PublishDirect(const uint8_t* in, const int64_t* sendCounts,
                                           const int64_t* sdispls, uint8_t* out,
                                           const int64_t* recvCounts, const int64_t* rdispls,
                                           size_t e) {
  const uint64_t next = round_ + 1;
  size_t inExtent = 0, outExtent = 0;
  bool displaced = true;  // negative displacements never reach here (operations check them)
  for (int r = 0; r < size_; ++r) {
    displaced = displaced && sdispls[r] >= 0;
    inExtent = std::max(inExtent,
                        static_cast<size_t>(sdispls[r] + std::max<int64_t>(sendCounts[r], 0)) * e);
    if (out == nullptr) continue;
    displaced = displaced && rdispls[r] >= 0;
    outExtent = std::max(outExtent,
                         static_cast<size_t>(rdispls[r] + std::max<int64_t>(recvCounts[r], 0)) * e);
  }
  const int64_t inAt = displaced ? heap_.OffsetOf(in, inExtent) : -1;
  const int64_t outAt = displaced && out != nullptr ? heap_.OffsetOf(out, outExtent) : -1;
  int32_t flags = 0;
  for (int r = 0; r < size_; ++r) {
    direct_[r] = DirectPeer{};
    if (r != rank_ && inAt >= 0 && SendsWhole(sendCounts[r], e)) {
      direct_[r].send = true;
      flags |= kDirectWhole;
    }
  }
  if (inAt >= 0) flags |= kDirectInput;
  if (inAt >= 0 || outAt >= 0) {
    flags |= kDirectTable;
    const DirectTable table = segment_.Direct(rank_, next);
    for (int r = 0; r < size_; ++r) {
      table.from[r] = inAt >= 0 ? inAt + sdispls[r] * static_cast<int64_t>(e) : -1;
      table.to[r] = outAt >= 0 ? outAt + rdispls[r] * static_cast<int64_t>(e) : -1;
    }
  }
  segment_.Rank(rank_).direct[next & 1].store(flags, std::memory_order_relaxed);
  return flags;
}

void ProcessCommunicator::ClassifyDirect(const int64_t* sendCounts, const int64_t* recvCounts,
                                         size_t e, size_t per) {
  // A table entry of `owner` for a piece of `bytes`: its address, or null when it has none.
  auto entry = [&](int owner, bool to, int peer, int64_t bytes) -> uint8_t* {
    if ((DirectFlags(owner) & kDirectTable) == 0) return nullptr;
    const DirectTable table = segment_.Direct(owner, round_);
    const int64_t offset = to ? table.to[peer] : table.from[peer];
    if (offset < 0) return nullptr;
    return PeerHeap(owner, offset, static_cast<uint64_t>(std::max<int64_t>(bytes, 0)));
  };
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    DirectPeer& peer = direct_[j];
    const int64_t sendBytes = sendCounts[j] * static_cast<int64_t>(e);
    const int64_t recvBytes = recvCounts[j] * static_cast<int64_t>(e);
    // Writing into the receiver's heap wins over reading from the sender's: both sides read the
    // same tables, so they agree on who copies. A whole piece (PublishDirect) was not staged.
    peer.pushTo = entry(j, /*to=*/true, rank_, sendBytes);
    if (!peer.send) {
      peer.send = peer.pushTo != nullptr || entry(rank_, /*to=*/false, j, sendBytes) != nullptr;
      peer.sendStart = per;
    }
    const uint8_t* from = entry(j, /*to=*/false, rank_, recvBytes);
    const bool pushed = entry(rank_, /*to=*/true, j, recvBytes) != nullptr;
    peer.recv = pushed || from != nullptr;
    peer.recvStart = from != nullptr && SendsWhole(recvCounts[j], e) ? 0 : per;
    if (!pushed) peer.pullFrom = from;
  }
}

void ProcessCommunicator::AllToAllV(const void* in, const int64_t* sendCounts,
                                    const int64_t* sdispls, void* out, const int64_t* recvCounts,
                                    const int64_t* rdispls, DataType dtype) {
  Enter("AllToAllV");
  auto where = [this] { return Where(); };
  const size_t e = ElementBytes(dtype, where);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  size_t outputBytes = 0;
  for (int r = 0; r < size_; ++r) {
    outputBytes += static_cast<size_t>(std::max<int64_t>(recvCounts[r], 0)) * e;
  }
  const auto copyOwn = [&] {
    CopyOut(dst + rdispls[rank_] * e, src + sdispls[rank_] * e,
            static_cast<size_t>(std::max<int64_t>(sendCounts[rank_], 0)) * e, outputBytes);
  };
  if (size_ == 1) return copyOwn();
  // Shared buffers (docs/backends.md): the first round carries the heap tables. A sender whose
  // input is in its heap stages nothing of a large piece (SendsWhole); every other piece has its
  // first region staged as usual, so a call that fits one round costs no more. Once the tables
  // are known, the rest of every direct piece moves with one copy, and the staged rounds that
  // follow carry only the other pieces (their largest, republished with round 2, sets how many).
  // Round 2 is also what keeps every input and output in place until all direct copies are done.
  const bool heaps = segment_.HasHeaps();
  const int32_t flagsHere =
      heaps ? PublishDirect(src, sendCounts, sdispls, dst, recvCounts, rdispls, e) : 0;
  // process_vm_readv (docs/backends.md, "Single copy"): large pieces from ordinary memory are not
  // staged; their receivers read them after the first round, and round 2 keeps the inputs in
  // place until they have.
  if (crossMemory_) PublishCrossMemory(src, sendCounts, sdispls, e, flagsHere);
  // Only the largest staged piece anywhere decides the number of rounds and no rank knows it
  // alone, so each publishes its own largest with the first round. A receiver cannot tell yet
  // whether a piece large enough for process_vm_readv moves that way, so it leaves it to the
  // sender, which counts every piece it stages.
  const int64_t crossFrom = crossMemory_
                                ? static_cast<int64_t>(segment_.Header().crossMemoryMinBytes)
                                : std::numeric_limits<int64_t>::max();
  int64_t mostHere = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (!crossSend_[r]) mostHere = std::max(mostHere, sendCounts[r]);
    if (recvCounts[r] * static_cast<int64_t>(e) < crossFrom) {
      mostHere = std::max(mostHere, recvCounts[r]);
    }
  }
  const size_t per = RegionBytes() / e;
  // At least `floor` rounds, and enough for the largest piece any rank published.
  const auto roundsFor = [&](size_t floor) {
    int64_t most = 0;
    for (int r = 0; r < size_; ++r) {
      most = std::max(most, segment_.Rank(r).value[round_ & 1].load(std::memory_order_relaxed));
    }
    return std::max(floor, CeilDiv(static_cast<size_t>(most), per));
  };
  bool direct = false, cross = false;
  size_t rounds = 1;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * per;
    uint8_t* stage = NextHalf();
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && !(heaps && direct_[r].send) && !crossSend_[r]) {
        CopyBytes(stage + RegionOffset(rank_, r), src + (sdispls[r] + lo) * e,
                  Clip(sendCounts[r], lo, per) * e);
      }
    }
    if (k == 0) {
      segment_.Rank(rank_).value[(round_ + 1) & 1].store(mostHere, std::memory_order_relaxed);
    }
    Round();
    if (k == 0) {
      copyOwn();  // after the first round: the agreement check precedes any output
      rounds = roundsFor(1);
      int32_t flags = 0;
      for (int r = 0; r < size_ && heaps; ++r) flags |= DirectFlags(r);
      direct = (flags & kDirectTable) != 0 && (rounds > 1 || (flags & kDirectWhole) != 0);
      cross = crossMemory_ && FindCrossMemory(recvCounts, e);
      if (direct) {
        ClassifyDirect(sendCounts, recvCounts, e, per);
        // A piece that moves by process_vm_readv is neither pushed nor pulled between heaps.
        for (int r = 0; r < size_; ++r) {
          if (crossSend_[r]) {
            direct_[r].send = true;
            direct_[r].pushTo = nullptr;
          }
          if (crossRecv_[r]) {
            direct_[r].recv = true;
            direct_[r].pullFrom = nullptr;
          }
        }
      }
      if (direct || cross) rounds = std::max<size_t>(rounds, 2);
      for (int r = 0; r < size_; ++r) {
        if (crossRecv_[r]) {
          CopyCrossMemory(CrossMemoryDirection::kRead, r, dst + rdispls[r] * e,
                          segment_.Direct(r, round_).at[rank_],
                          static_cast<size_t>(recvCounts[r]) * e);
        }
      }
    } else if (k == 1 && direct) {
      rounds = roundsFor(2);
    }
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && !(direct && direct_[r].recv && (k > 0 || direct_[r].recvStart == 0)) &&
          !crossRecv_[r]) {
        CopyOut(dst + (rdispls[r] + lo) * e, HalfOf(r, round_) + RegionOffset(r, rank_),
                Clip(recvCounts[r], lo, per) * e, outputBytes);
      }
    }
    if (k == 0 && direct) {
      int64_t stagedMost = 0;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const DirectPeer& peer = direct_[r];
        if (peer.pushTo != nullptr) {
          CopyOut(peer.pushTo + peer.sendStart * e, src + (sdispls[r] + peer.sendStart) * e,
                  Clip(sendCounts[r], peer.sendStart, SIZE_MAX) * e, outputBytes);
        }
        if (peer.pullFrom != nullptr) {
          CopyOut(dst + (rdispls[r] + peer.recvStart) * e, peer.pullFrom + peer.recvStart * e,
                  Clip(recvCounts[r], peer.recvStart, SIZE_MAX) * e, outputBytes);
        }
        if (!peer.send) stagedMost = std::max(stagedMost, sendCounts[r]);
        if (!peer.recv) stagedMost = std::max(stagedMost, recvCounts[r]);
      }
      segment_.Rank(rank_).value[(round_ + 1) & 1].store(stagedMost, std::memory_order_relaxed);
    }
  }
}

void ProcessCommunicator::PublishCrossMemory(const uint8_t* in, const int64_t* sendCounts,
                                             const int64_t* sdispls, size_t e, int32_t flags) {
  const uint64_t next = round_ + 1;
  const int64_t from = static_cast<int64_t>(segment_.Header().crossMemoryMinBytes);
  crossSend_.assign(size_, false);
  // Pieces of a heap input already move with one copy (PublishDirect).
  if ((flags & kDirectInput) == 0) {
    const DirectTable table = segment_.Direct(rank_, next);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || sendCounts[r] * static_cast<int64_t>(e) < from) continue;
      crossSend_[r] = true;
      table.at[r] = reinterpret_cast<uintptr_t>(in + sdispls[r] * e);
      flags |= kCrossMemory;
    }
  }
  segment_.Rank(rank_).direct[next & 1].store(flags, std::memory_order_relaxed);
}

bool ProcessCommunicator::FindCrossMemory(const int64_t* recvCounts, size_t e) {
  // The sender's rule seen from the receiver: the counts agree (the first round checked them),
  // and the sender's flag says its input is not in its heap.
  const int64_t from = static_cast<int64_t>(segment_.Header().crossMemoryMinBytes);
  crossRecv_.assign(size_, false);
  bool any = false;
  for (int r = 0; r < size_; ++r) {
    const bool flagged = CrossInput(r);
    any = any || flagged;
    crossRecv_[r] = r != rank_ && flagged && recvCounts[r] * static_cast<int64_t>(e) >= from;
  }
  return any;
}

void ProcessCommunicator::CopyCrossMemory(CrossMemoryDirection direction, int owner, uint8_t* local,
                                          uint64_t address, size_t bytes) {
  const bool read = direction == CrossMemoryDirection::kRead;
  size_t done = 0;
  while (done < bytes) {
    iovec mine{local + done, bytes - done};
    iovec theirs{reinterpret_cast<void*>(static_cast<uintptr_t>(address + done)), bytes - done};
    const ssize_t n = read ? process_vm_readv(pids_[owner], &mine, 1, &theirs, 1, 0)
                           : process_vm_writev(pids_[owner], &mine, 1, &theirs, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = n == 0 ? EFAULT : errno;
    if (err == EINTR) continue;
    if (err == ESRCH) {
      // Exiting: its memory is gone before its pidfd reports the exit. An owner that leaves in
      // the middle of a call has broken the communicator first (a peer of its died): report that.
      CheckPeer(owner);
      Break(ERROR_PEER_LOST, owner, Concat(Where(), "rank ", owner, " (", PidOf(owner), ") died"));
    }
    // A rank that failed in this call (a peer of its died) publishes that before it returns and
    // may then free its buffers, and a dying owner's pages go before its exit shows: give either
    // 200 ms to show, and report the failure that started it, as any wait would.
    for (int i = 0; i < 20; ++i) {
      CheckPeer(owner);
      usleep(10'000);
    }
    Break(ERROR_COMM_FAIL, owner,
          Concat(Where(), read ? "process_vm_readv" : "process_vm_writev", " of ", bytes - done,
                 " bytes ", read ? "from" : "to", " rank ", owner, " (", PidOf(owner),
                 ") failed: ", std::strerror(err)));
  }
}

}  // namespace shm
}  // namespace collops
