#include "core/comm/shm/gather.h"

#include <algorithm>

#include "core/comm/shm/algorithm_table.h"
#include "core/comm/shm/process_copy.h"

namespace collops {
namespace shm {

Algo GatherAlgorithms::ForcedAlgo(Collective collective) const {
  const Algo forced = t_.Forced(collective);
  if (forced == kAlgoCrossMemory && !t_.CrossMemory()) {
    FailForced(t_.Where(), collective, forced, kNoCrossMemory);
  }
  if (forced == kAlgoHeap && !t_.HasHeaps()) FailForced(t_.Where(), collective, forced, kNoHeaps);
  return forced;
}

void GatherAlgorithms::AllGatherBytes(const void* in, void* out, size_t bytes) {
  const int size = t_.Size();
  std::vector<size_t> bytesOf(size, bytes), offsetOf(size);
  for (int r = 0; r < size; ++r) offsetOf[r] = r * bytes;
  Gather(static_cast<const uint8_t*>(in), bytes, static_cast<uint8_t*>(out), bytesOf, offsetOf);
}

void GatherAlgorithms::AllGatherV(const void* in, size_t sendCount, void* out,
                                  const int64_t* recvCounts, const int64_t* rdispls,
                                  DataType dtype) {
  const size_t e = t_.ElementBytes(dtype);
  const int size = t_.Size();
  std::vector<size_t> bytesOf(size), offsetOf(size);
  for (int r = 0; r < size; ++r) {
    bytesOf[r] = static_cast<size_t>(std::max<int64_t>(recvCounts[r], 0)) * e;
    offsetOf[r] = static_cast<size_t>(rdispls[r]) * e;
  }
  Gather(static_cast<const uint8_t*>(in), sendCount * e, static_cast<uint8_t*>(out), bytesOf,
         offsetOf);
}

void GatherAlgorithms::Gather(const uint8_t* in, size_t myBytes, uint8_t* out,
                              const std::vector<size_t>& bytesOf,
                              const std::vector<size_t>& offsetOf) {
  const int rank = t_.Rank(), size = t_.Size();
  size_t outputBytes = 0;
  for (const size_t b : bytesOf) outputBytes += b;
  const auto copyOwn = [&] {
    t_.CopyOut(out + offsetOf[rank], in, std::min(myBytes, bytesOf[rank]), outputBytes);
  };
  if (size == 1) return copyOwn();
  const Algo forced = ForcedAlgo(Collective::kAllGather);
  // A rank whose input is in its heap (and not small) stages nothing; the others copy it straight
  // from there after the first round, and a second round keeps it in place until they have. An
  // input of ordinary memory large enough for process_vm_readv is not staged either: the others
  // read it from this rank's process.
  const bool heap = forced == kAlgoAuto || forced == kAlgoHeap;
  const bool shared = heap && inputs_.PublishHeap(in, myBytes, kDirectWholeBytes);
  const bool crossHere = inputs_.PublishCross(
      !shared && CrossMemoryInput(t_.Policy(), forced, size, myBytes, outputBytes) ? in : nullptr);
  if (!heap) t_.PublishValue(-1);
  const size_t half = t_.HalfBytes();
  staged_.assign(size, true);
  size_t rounds = 1;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * half;
    if (!shared && !crossHere) {
      CopyBytes(t_.NextHalf(), in + lo, Clip(static_cast<int64_t>(myBytes), lo, half));
    }
    t_.Round();
    if (k == 0) {
      if (forced == kAlgoHeap) {
        for (int r = 0; r < size; ++r) {
          if (static_cast<int64_t>(bytesOf[r]) >= kDirectWholeBytes && !inputs_.PublishedHeap(r)) {
            FailForced(t_.Where(), Collective::kAllGather, forced,
                       Concat("rank ", r, "'s input does not lie in its heap (AllocateShared)"));
          }
        }
      }
      copyOwn();  // after the first round: the agreement check precedes any output
      const bool anyShared = inputs_.FindHeap([&](int r) { return bytesOf[r]; });
      bool anyCross = false;
      size_t most = 0;
      for (int r = 0; r < size; ++r) {
        const bool cross = inputs_.Cross(r);
        anyCross = anyCross || cross;
        staged_[r] = !cross && inputs_.InHeap(r) == nullptr && !(r == rank && shared);
        if (staged_[r]) most = std::max(most, bytesOf[r]);
        if (r == rank) continue;
        if (inputs_.InHeap(r) != nullptr) {
          t_.CopyOut(out + offsetOf[r], inputs_.InHeap(r), bytesOf[r], outputBytes);
        } else if (cross) {
          inputs_.ReadCross(r, out + offsetOf[r], bytesOf[r]);
        }
      }
      rounds = std::max<size_t>(anyShared || anyCross ? 2 : 1, CeilDiv(most, half));
    }
    for (int r = 0; r < size; ++r) {
      if (r == rank || !staged_[r]) continue;
      t_.CopyOut(out + offsetOf[r] + lo, t_.HalfOf(r),
                 Clip(static_cast<int64_t>(bytesOf[r]), lo, half), outputBytes);
    }
  }
}

void GatherAlgorithms::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  const int rank = t_.Rank(), size = t_.Size();
  if (root < 0 || root >= size) {
    Fail(ERROR_INVALID_PARAM, t_.Where(), "root ", root, " is not a rank of ", size);
  }
  const size_t bytes = count * t_.ElementBytes(dtype);
  if (size == 1) return;
  const Algo forced = ForcedAlgo(Collective::kBroadcast);
  auto* data = static_cast<uint8_t*>(buf);
  // A root whose buffer is in its heap stages nothing; the others copy it from there after the
  // first round, and a second round keeps it in place until they have. Only the root publishes
  // its buffer. A large buffer of ordinary memory is not staged either: the others read it from
  // the root's process.
  const bool heap = forced == kAlgoAuto || forced == kAlgoHeap;
  const bool rootShared =
      heap && inputs_.PublishHeap(rank == root ? data : nullptr, bytes, kDirectWholeBytes);
  if (!heap) t_.PublishValue(-1);
  const bool rootCross = inputs_.PublishCross(
      rank == root && !rootShared && CrossMemoryInput(t_.Policy(), forced, size, bytes, bytes)
          ? data
          : nullptr);
  const size_t half = t_.HalfBytes();
  size_t rounds = 1;
  bool direct = false;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t lo = k * half;
    const size_t n = Clip(static_cast<int64_t>(bytes), lo, half);
    if (rank == root && !rootShared && !rootCross) CopyBytes(t_.NextHalf(), data + lo, n);
    t_.Round();
    if (k == 0) {
      if (forced == kAlgoHeap && static_cast<int64_t>(bytes) >= kDirectWholeBytes &&
          !inputs_.PublishedHeap(root)) {
        FailForced(t_.Where(), Collective::kBroadcast, forced,
                   Concat("the root's (rank ", root,
                          ") buffer does not lie in its heap "
                          "(AllocateShared)"));
      }
      const bool shared = inputs_.FindHeap([&](int) { return bytes; });
      const bool cross = inputs_.Cross(root);
      direct = shared || cross;
      rounds = direct ? 2 : std::max<size_t>(1, CeilDiv(bytes, half));
      if (shared && rank != root) t_.CopyOut(data, inputs_.InHeap(root), bytes, bytes);
      if (cross && rank != root) inputs_.ReadCross(root, data, bytes);
    }
    if (!direct && rank != root) t_.CopyOut(data + lo, t_.HalfOf(root), n, bytes);
  }
}

}  // namespace shm
}  // namespace collops
