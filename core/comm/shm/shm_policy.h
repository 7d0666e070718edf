// Every size rule of the lccl engines in one place: the thresholds, the policy that rank 0 derives
// from them, its environment and the machine (written into the segment, so that every rank runs
// the same protocol), and the selectors that pick a collective's algorithm from it. The algorithms
// themselves are listed in algorithm_table.h; docs/performance.md has the measurements behind the
// numbers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace collops {
namespace shm {

// --- Thresholds ---

/// AllReduce "oneshot" up to this many bytes: its one round beats rsag's two, whose second round
/// costs more than the redundant reduction saves.
constexpr uint64_t kOneShotMaxBytes = 64 << 10;
/// ... with more ranks than CPUs, where everyone's reduction of everything runs in turn.
constexpr uint64_t kOversubscribedOneShotMaxBytes = 8 << 10;
/// Two ranks with a CPU each: "oneshot" at every size above kTwoRankOneShotFromBytes too. Each
/// rank stages its input and reduces it with its peer's straight into its output: two passes over
/// the payload where rsag makes three (stage, reduce into the slot, copy out), and the peer's
/// staged chunk is the only data that crosses between the cores. Beyond OneShotWholeMaxBytes it
/// goes in rounds of OneShotRoundBytes, so that a round's own input, its staged copy and the
/// peer's stay in the L2 cache.
constexpr uint64_t kTwoRankOneShotFromBytes = kOneShotMaxBytes;
/// A "oneshot" AllReduce up to this many bytes stages its input whole, in one round (when it fits
/// a half): at R = 2 that one round beats two chunked ones up to here. Larger calls go in rounds
/// of OneShotRoundBytes.
constexpr uint64_t kOneShotWholeMaxBytes = 896 << 10;
/// AllReduce "rsag" chunk (COLLOPS_SHM_CHUNK_BYTES; capped at half a slot; ChunkBytesFor; also the
/// output of one quantised "oneshot" round): as few rounds as the buffer allows, since on a busy
/// host every round costs a scheduling delay...
constexpr uint64_t kChunkBytes = 2 << 20;
/// ... but with a CPU per rank not more than one core's L2 cache, and not less than this: with a
/// chunk larger than the L2, every rank's step (the slices it stages for the others, the slice it
/// reduces, the reduced slices it copies out) spills the L2 and runs measurably slower than with
/// chunks that fit (docs/performance.md); smaller chunks than this only add rounds.
constexpr uint64_t kMinChunkBytes = 1 << 20;
/// Outputs from this size up are written with non-temporal stores (COLLOPS_SHM_STREAM_BYTES;
/// process_copy.h says why); smaller ones still fit the caches (a 4 MiB AllReduce output read
/// back by the next call is faster with ordinary stores).
constexpr uint64_t kStreamOutputBytes = 8 << 20;
/// Pieces from this size up move by process_vm_readv/writev ("cma") where that is allowed and
/// pays (COLLOPS_SHM_CMA_BYTES); below it the system call's fixed cost outweighs the copy saved.
constexpr uint64_t kCrossMemoryMinBytes = 16 << 10;
/// AllReduce, AllGather(V) and Broadcast use "cma" only while R times their output stays within
/// this: beyond, the buffers no longer fit the caches and the staged copies, whose copies out
/// stream past them, are faster.
constexpr uint64_t kCrossMemoryMaxBytes = 32 << 20;
/// With more ranks than CPUs, "cma" only where the kernel copy costs less than this many user
/// copies: every copy then takes CPU time from another rank, so the total work decides.
constexpr double kOversubscribedMaxKernelCopyCost = 2.0;
/// AllReduce's automatic rule takes "cma" only where the kernel copy costs at most this many user
/// copies: it moves every slice with two kernel copies where "rsag" makes three user copies.
constexpr double kAllReduceMaxKernelCopyCost = 2.2;
/// With a CPU per rank, AllGather(V) and Broadcast inputs and AllToAllV pieces smaller than one
/// core's L2 cache take "cma" automatically only where the kernel copy costs at most this many
/// user copies. The staged copies of such a piece stay in the cache, and a dearer kernel copy
/// loses to them; from the L2 cache's size up the staged copies leave it, and "cma" is taken
/// whatever the kernel copy costs (docs/performance.md, "Single copy").
constexpr double kInCacheMaxKernelCopyCost = 3.5;
/// AllReduce "cma": the part of its slice a rank moves per system call; the parts of one step stay
/// in the caches between the read, the reduction and the writes.
constexpr size_t kCrossMemoryChunkBytes = 128 << 10;
/// A one-round "oneshot" AllReduce below this size stages its input whatever the buffers: its one
/// round beats the heap algorithm's three.
constexpr size_t kHeapOneShotMinBytes = 64 << 10;
/// A piece (an AllToAllV or ReduceScatterV piece, an AllGather or Broadcast input) from a heap
/// input is not staged at all from this size up: it is read in place after the first round, which
/// then needs a second round that keeps it there. Below it the extra round costs more.
constexpr int64_t kDirectWholeBytes = 8 << 10;
/// A wait with a CPU per rank (COLLOPS_SHM_SPIN_US, COLLOPS_SHM_YIELD_US) first spins this long
/// without a system call, then yields the CPU between checks this much longer, then sleeps on a
/// futex: a sleeper costs every round a wake-up, a long spin costs nothing while each rank has a
/// CPU of its own.
constexpr int64_t kSpinNanos = 50'000;
constexpr int64_t kYieldNanos = 1'000'000;
/// With more ranks than CPUs a wait yields at once and sleeps soon: on a busy host every yielding
/// waiter still holds a share of the CPU the rank everyone waits for needs.
constexpr int64_t kOversubscribedYieldNanos = 100'000;
/// Thread mode (commMode 1): an out-of-place AllReduce up to this size is reduced whole on every
/// rank ("oneshot"): the redundant arithmetic is cheaper than the third Sync slicing needs.
constexpr size_t kThreadOneShotMaxBytes = 32 << 10;

// --- The policy of one process communicator ---

/// The collectives of the process engine, each with its own COLLOPS_ALGO_<NAME> knob.
enum class Collective : int32_t {
  kAllReduce,
  kAllGather,  ///< AllGatherBytes, AllGatherV
  kBroadcast,
  kReduceScatter,  ///< ReduceScatterV
  kAllToAll,       ///< AllToAllV
  kSendRecv,       ///< Send, Recv, Exchange
  kBarrier,
  kQuantAllReduce,  ///< AllReduceQuantised
};
constexpr int kCollectives = 8;

/// The algorithms of the process engine (algorithm_table.h describes each); kAlgoAuto: chosen per
/// call by the selectors below.
enum Algo : int32_t {
  kAlgoAuto = 0,
  kAlgoOneShot = 1,
  kAlgoReduceScatterAllGather = 2,
  kAlgoCrossMemory = 3,  ///< "cma": process_vm_readv/writev
  kAlgoStaged = 4,       ///< through the slots only
  kAlgoHeap = 5,         ///< peers' buffers in their heaps, read or written in place
  kAlgoRound = 6,        ///< Barrier's one round
};

/// Decided by rank 0 from its environment and machine (ChoosePolicy) and shared through the
/// segment header, so ranks can never run different protocols because their environments differ.
struct ShmPolicy {
  int32_t forced[kCollectives] = {};  ///< COLLOPS_ALGO_<collective>; kAlgoAuto when not forced
  uint64_t oneShotMaxBytes = 0;       ///< AllReduce: "oneshot" up to this many bytes
  /// ... and in (largeOneShotFromBytes, largeOneShotToBytes] too (0, 0: never).
  uint64_t largeOneShotFromBytes = 0;
  uint64_t largeOneShotToBytes = 0;
  uint64_t chunkBytes = 0;  ///< AllReduce "rsag" chunk per pair of rounds
  /// Outputs of at least this many bytes are written with non-temporal stores; 0 = never.
  uint64_t streamOutputBytes = 0;
  int64_t spinNanos = 0;   ///< a wait first spins this long without giving up the CPU,
  int64_t yieldNanos = 0;  ///< then yields the CPU between checks this long, then sleeps
  int32_t bindCpus = 0;    ///< 1: rank r pins itself to the r-th CPU it may run on
  int32_t cpus = 0;        ///< CPUs rank 0 may run on
  int32_t rankSize = 0;
  /// Pieces of at least this many bytes may move by process_vm_readv/writev when every rank may
  /// reach its peers' memory; 0 = never. Forced "cma" and Send/Recv messages use this one.
  uint64_t crossMemoryMinBytes = 0;
  /// The automatic rules of AllGather(V), Broadcast and AllToAllV take "cma" from this many bytes
  /// per input or piece: crossMemoryMinBytes, or one core's L2 cache where the kernel copy costs
  /// more than kInCacheMaxKernelCopyCost user copies.
  uint64_t crossMemoryPieceMinBytes = 0;
  /// 1: AllReduce's automatic rule may take "cma" (the kernel copy is cheap enough here).
  int32_t allReduceCrossMemory = 0;
  /// AllReduce, AllGather(V) and Broadcast take "cma" automatically only while R times their
  /// output bytes stay within this.
  uint64_t crossMemoryMaxBytes = 0;

  /// More ranks than CPUs to run them (rank 0's view).
  bool Oversubscribed() const { return rankSize > cpus; }
  Algo Forced(Collective c) const { return static_cast<Algo>(forced[static_cast<int>(c)]); }
};

/// The "rsag" chunk when COLLOPS_SHM_CHUNK_BYTES is unset: one core's L2 cache (`l2Bytes`; 0 when
/// unknown) within [kMinChunkBytes, kChunkBytes] when every rank has a CPU of its own, else
/// kChunkBytes (there each extra round costs a scheduling delay).
uint64_t ChunkBytesFor(uint64_t l2Bytes, bool oversubscribed);
/// The bytes a "oneshot" AllReduce of `bytes` stages per round, with halves of `halfBytes`: a
/// whole half up to kOneShotWholeMaxBytes, beyond it half an rsag chunk (`chunkBytes`, one core's
/// L2 cache with a CPU per rank), so that a round's own input, the copy it stages and the peer's
/// staged copy stay in the L2. Never more than a half, never less than 64 (a cache line).
uint64_t OneShotRoundBytes(uint64_t bytes, uint64_t chunkBytes, uint64_t halfBytes);

/// Rank 0: the policy for `rankSize` ranks from its environment (COLLOPS_ALGO_*, COLLOPS_SHM_*)
/// and this machine (CPUs, the cost of the kernel copy). Throws ERROR_INVALID_PARAM naming the
/// variable for a bad value.
ShmPolicy ChoosePolicy(int rankSize);

// --- Selectors: which algorithm the automatic rule picks ---

/// AllReduce of `bytes` on `ranks` ranks with slots of `halfBytes` per round: kAlgoOneShot,
/// kAlgoReduceScatterAllGather or kAlgoCrossMemory (`crossMemory`: the creation probe allowed
/// process_vm_readv/writev). The heap algorithm is chosen after the first round of the one picked
/// here, when every rank's buffers turn out to lie in its heap (allreduce.cpp).
Algo SelectAllReduce(const ShmPolicy& policy, bool crossMemory, int ranks, uint64_t bytes,
                     uint64_t elementBytes, uint64_t halfBytes);
/// Quantised AllReduce of `count` int8 elements into `outBytes`-byte outputs on `ranks` ranks:
/// kAlgoOneShot or kAlgoReduceScatterAllGather.
Algo SelectQuantAllReduce(const ShmPolicy& policy, int ranks, uint64_t count, uint64_t outBytes);
/// The smallest AllGather(V) or Broadcast input or AllToAllV piece that moves by "cma" when that
/// collective's algorithm is `forced` (kAlgoAuto or kAlgoCrossMemory) and cma is allowed at all.
uint64_t CrossMemoryPieceFrom(const ShmPolicy& policy, Algo forced);
/// AllGather(V) and Broadcast: whether one rank's input of `bytes` (not in its heap), in a call
/// whose output is `outputBytes` per rank, is read by the peers with process_vm_readv.
bool CrossMemoryInput(const ShmPolicy& policy, Algo forced, int ranks, uint64_t bytes,
                      uint64_t outputBytes);
/// Send/Recv/Exchange: whether a message of `bytes` moves by process_vm_readv (the receiver
/// reads it). Beyond crossMemoryMaxBytes only when oversubscribed or when the sender's group
/// also receives (`groupReceives`): a lone send with a CPU each is faster staged, since the
/// sender's copy in overlaps the receiver's copy out; with both directions at once each CPU has
/// a receive of its own and staging only doubles the copies.
bool CrossMemoryMessage(const ShmPolicy& policy, Algo forced, uint64_t bytes, bool groupReceives);
/// A piece of `count` elements of `elementBytes` from a heap input moves whole (is not staged).
inline bool SendsWhole(int64_t count, size_t elementBytes) {
  return count * static_cast<int64_t>(elementBytes) >= kDirectWholeBytes;
}

}  // namespace shm
}  // namespace collops
