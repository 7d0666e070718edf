#include "core/comm/shm/shm_policy.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>

#include "collops/environment.h"
#include "collops/status.h"
#include "core/comm/shm/algorithm_table.h"
#include "core/comm/shm/cpu_binding.h"
#include "core/comm/shm/cross_memory_policy.h"
#include "core/comm/shm/wait_word.h"

namespace collops {
namespace shm {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/// The L2 cache of the CPU this rank runs on, in bytes; 0 when the C library cannot tell.
uint64_t L2CacheBytes() {
  const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? static_cast<uint64_t>(bytes) : 0;
}

}  // namespace

uint64_t ChunkBytesFor(uint64_t l2Bytes, bool oversubscribed) {
  if (oversubscribed || l2Bytes == 0) return kChunkBytes;
  return std::clamp(l2Bytes, kMinChunkBytes, kChunkBytes);
}

uint64_t OneShotRoundBytes(uint64_t bytes, uint64_t chunkBytes, uint64_t halfBytes) {
  const uint64_t round = bytes <= kOneShotWholeMaxBytes ? halfBytes : chunkBytes / 2;
  return std::max<uint64_t>(64, std::min(round, halfBytes));
}

ShmPolicy ChoosePolicy(int rankSize) {
  ShmPolicy policy;
  for (int c = 0; c < kCollectives; ++c) {
    policy.forced[c] = ForcedFromEnv(static_cast<Collective>(c));
  }
  policy.rankSize = rankSize;
  policy.cpus = CpusAvailable();
  const bool oversubscribed = policy.Oversubscribed();
  policy.oneShotMaxBytes = oversubscribed ? kOversubscribedOneShotMaxBytes : kOneShotMaxBytes;
  if (rankSize == 2 && !oversubscribed) {
    policy.largeOneShotFromBytes = kTwoRankOneShotFromBytes;
    policy.largeOneShotToBytes = std::numeric_limits<uint64_t>::max();
  }
  policy.chunkBytes =
      KnobInteger("COLLOPS_SHM_CHUNK_BYTES", ChunkBytesFor(L2CacheBytes(), oversubscribed));
  policy.streamOutputBytes = KnobInteger("COLLOPS_SHM_STREAM_BYTES", kStreamOutputBytes);
  const WaitBudget budget = WaitBudget::Default(oversubscribed);
  policy.spinNanos =
      static_cast<int64_t>(KnobInteger("COLLOPS_SHM_SPIN_US", budget.spinNanos / 1000)) * 1000;
  policy.yieldNanos =
      static_cast<int64_t>(KnobInteger("COLLOPS_SHM_YIELD_US", budget.yieldNanos / 1000)) * 1000;
  policy.bindCpus = static_cast<int32_t>(KnobInteger("COLLOPS_SHM_BIND", 0));
  std::optional<uint64_t> crossMemoryMinBytes;
  if (KnobValue("COLLOPS_SHM_CMA_BYTES") != nullptr) {
    crossMemoryMinBytes = KnobInteger("COLLOPS_SHM_CMA_BYTES", 0);
  }
  const CrossMemoryPolicy crossMemory = ChooseCrossMemoryPolicy(
      crossMemoryMinBytes, oversubscribed, L2CacheBytes(), KernelCopyCostRatio);
  policy.crossMemoryMinBytes = crossMemory.minBytes;
  policy.crossMemoryPieceMinBytes = crossMemory.pieceMinBytes;
  policy.allReduceCrossMemory = crossMemory.allReduce ? 1 : 0;
  policy.crossMemoryMaxBytes = kCrossMemoryMaxBytes;
  return policy;
}

Algo SelectAllReduce(const ShmPolicy& policy, bool crossMemory, int ranks, uint64_t bytes,
                     uint64_t elementBytes, uint64_t halfBytes) {
  // With more ranks than CPUs the 2(R-1) system calls per slice part run in turn with everyone
  // else's: "cma" then needs twice the slice, and not more than two ranks per CPU.
  const bool oversubscribed = policy.Oversubscribed();
  const uint64_t sliceFrom = policy.crossMemoryMinBytes * (oversubscribed ? 2 : 1);
  const uint64_t count = bytes / elementBytes;
  const bool cross = crossMemory && policy.allReduceCrossMemory != 0 &&
                     CeilDiv(count, ranks) * elementBytes >= sliceFrom &&
                     ranks * bytes <= policy.crossMemoryMaxBytes &&
                     (!oversubscribed || ranks <= 2 * policy.cpus);
  // One-shot only while it takes one round, except beyond kOneShotWholeMaxBytes, where it goes in
  // rounds of half an rsag chunk anyway (OneShotRoundBytes).
  const bool oneRound = bytes <= halfBytes;
  const bool oneShot =
      (bytes <= policy.oneShotMaxBytes && oneRound) ||
      (bytes > policy.largeOneShotFromBytes && bytes <= policy.largeOneShotToBytes &&
       (oneRound || bytes > kOneShotWholeMaxBytes));
  return cross ? kAlgoCrossMemory : oneShot ? kAlgoOneShot : kAlgoReduceScatterAllGather;
}

Algo SelectQuantAllReduce(const ShmPolicy& policy, int ranks, uint64_t count, uint64_t outBytes) {
  const bool oneShot =
      (ranks == 2 && !policy.Oversubscribed()) || count * outBytes <= policy.oneShotMaxBytes;
  return oneShot ? kAlgoOneShot : kAlgoReduceScatterAllGather;
}

bool CrossMemoryInput(const ShmPolicy& policy, Algo forced, int ranks, uint64_t bytes,
                      uint64_t outputBytes) {
  // Staged, every rank copies each input twice in all (once in, once out); read by the others,
  // R-1 times in kernel copies, which cost more per byte: only when every rank has a CPU of its
  // own do the receivers' reads overlap.
  if (forced != kAlgoAuto && forced != kAlgoCrossMemory) return false;
  return bytes >= CrossMemoryPieceFrom(policy, forced) &&
         (forced == kAlgoCrossMemory ||
          (!policy.Oversubscribed() && ranks * outputBytes <= policy.crossMemoryMaxBytes));
}

uint64_t CrossMemoryPieceFrom(const ShmPolicy& policy, Algo forced) {
  return forced == kAlgoCrossMemory ? policy.crossMemoryMinBytes : policy.crossMemoryPieceMinBytes;
}

bool CrossMemoryMessage(const ShmPolicy& policy, Algo forced, uint64_t bytes, bool groupReceives) {
  if (forced != kAlgoAuto && forced != kAlgoCrossMemory) return false;
  return bytes != 0 && bytes >= policy.crossMemoryMinBytes &&
         (forced == kAlgoCrossMemory || policy.Oversubscribed() || groupReceives ||
          bytes <= policy.crossMemoryMaxBytes);
}

}  // namespace shm
}  // namespace collops
