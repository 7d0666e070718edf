// The shared-memory segment of one multi-process lccl communicator: layout, creation and mapping.
//
// Rank 0 creates, once every rank has arrived, an anonymous memfd (nothing appears in /dev/shm or
// /tmp, so nothing is left behind even after SIGKILL), allocates every page up front so running out
// of memory is an ERROR_OUT_OF_HOST_MEMORY at creation instead of a SIGBUS mid-collective, seals
// its size, and hands the descriptor to the other ranks over the rendezvous socket.
//
// Layout (offsets computed by SegmentLayout, every block aligned to kControlStride):
//   SegmentHeader                     magic, geometry, the algorithm policy, the abort record
//   RankControl[R]                    per rank: rounds posted + its WaitWord (own 128 bytes)
//   PairControl[R*R]                  per ordered (src, dst) pair: Send side, Recv side
//   record[R][2]                      per rank and round parity: the agreement record carried by
//                                     that round (up to kMaxCarriedAgreementRanks ranks)
//   direct[R][2]                      per rank and round parity: where the pieces of a
//                                     collective lie in, or go to, that rank's heap (DirectTable)
//   slot[R]                           slotBytes per rank, two halves used by alternate rounds
//   heap[R]                           heapBytes per rank (COLLOPS_SHM_HEAP_BYTES): buffers a
//                                     rank allocates with AllocateShared(), which its peers read
//                                     and write directly. Sparse: pages exist only while
//                                     allocated (process_heap.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/comm/shm/process_fd.h"
#include "core/comm/shm/shm_policy.h"
#include "core/comm/shm/wait_word.h"

namespace collops {
namespace shm {

/// Two cache lines: the adjacent-line prefetcher pulls lines in pairs, so one writer per 128 bytes
/// keeps ranks from invalidating each other's flags.
constexpr size_t kControlStride = 128;
constexpr uint64_t kSegmentMagic = 0x31706f6c6c6f63ULL;  // "collop1"
constexpr uint32_t kSegmentVersion = 14;
/// Up to this many ranks the agreement record (2 counts per rank) rides in the segment with the
/// first round of a collective; above it the records would outgrow the control area (R^2 counts),
/// and the check runs as its own exchange.
constexpr int kMaxCarriedAgreementRanks = 64;
/// COLLOPS_SHM_BYTES default: data slot bytes per rank.
constexpr uint64_t kDefaultSlotBytes = 4ULL << 20;
/// COLLOPS_SHM_HEAP_BYTES default: address space per rank for AllocateShared(). Costs no memory
/// until allocated.
constexpr uint64_t kDefaultHeapBytes = 1ULL << 30;
/// COLLOPS_SHM_HEAP_CACHE_BYTES default: freed heap bytes per rank that keep their pages.
constexpr uint64_t kDefaultHeapCacheBytes = 256ULL << 20;

struct alignas(kControlStride) RankControl {
  std::atomic<uint64_t> posted{0};  ///< rounds this rank has published (monotonic, never reused)
  std::atomic<int64_t> value[2]{};  ///< a per-round scalar, indexed by round parity
  /// Flags this rank publishes with rounds of that parity (transport.h: kDirectTable, ...).
  std::atomic<int32_t> direct[2]{};
  /// The CPU this rank last ran on (at its posts and while it waits): a waiter that finds its
  /// peer last ran on the waiter's own CPU yields it, since the peer cannot run while it spins.
  std::atomic<int32_t> cpu{-1};
  /// At creation: the address, in this rank's process, of its probe words (a word holding
  /// CrossMemoryProbe(pid), then one per rank for that rank to write), then whether this rank
  /// could read and write every peer's with process_vm_readv/writev.
  std::atomic<uint64_t> probeAddress{0};
  std::atomic<int32_t> probeReached{0};
  /// While this rank sleeps in a round of a collective: that round (0 otherwise). A rank waiting
  /// in a send or receive on a peer reads it to tell that the peer waits for it in a collective:
  /// a deadlock of calls issued in different orders (p2p.h).
  std::atomic<uint64_t> waitingRound{0};
  /// While this rank sleeps in a wait: the rank it waits for (-1 otherwise), and the
  /// MonotonicNanos() of its latest sleep slice. A rank that times out follows these from the
  /// rank it waited for to the rank the others wait on (Transport::EndOfWaits).
  std::atomic<int32_t> waitingFor{-1};
  std::atomic<int64_t> awakeAt{0};
  WaitWord word;  ///< notified after every post
  /// Rung by a peer after each of its point-to-point posts toward this rank: a group of sends and
  /// receives (Exchange) waits on it for whichever of its channels moves first.
  WaitWord bell;
};

/// Marks `control` as sleeping in collective round `round` for its lifetime.
class WaitingInRound {
 public:
  WaitingInRound(RankControl& control, uint64_t round) : control_(control) {
    control_.waitingRound.store(round, std::memory_order_release);
  }
  ~WaitingInRound() { control_.waitingRound.store(0, std::memory_order_release); }
  WaitingInRound(const WaitingInRound&) = delete;
  WaitingInRound& operator=(const WaitingInRound&) = delete;

 private:
  RankControl& control_;
};

/// Marks `control` as sleeping in a wait for rank `peer` for its lifetime.
class WaitingFor {
 public:
  WaitingFor(RankControl& control, int peer) : control_(control) {
    control_.awakeAt.store(MonotonicNanos(), std::memory_order_relaxed);
    control_.waitingFor.store(peer, std::memory_order_release);
  }
  ~WaitingFor() { control_.waitingFor.store(-1, std::memory_order_release); }
  WaitingFor(const WaitingFor&) = delete;
  WaitingFor& operator=(const WaitingFor&) = delete;

 private:
  RankControl& control_;
};

/// What a rank that finds calls issued in different orders adds to its message.
constexpr const char* kCallOrderRule =
    " (every rank must make the same collective calls in the same order, and post each send "
    "and receive where its peer can meet it)";

/// One side of a point-to-point channel; written only by its owner. The announcement of message
/// m lives in entry m%2: a side can run at most one message ahead of the other side's reading
/// (it must have seen the other's announcement of m before it announces m+1), so two entries
/// never let a later message overwrite one that is still being read. Changes ring the other
/// side's RankControl::bell.
struct alignas(kControlStride) PairSide {
  std::atomic<uint64_t> messages{0};  ///< messages announced on this channel
  std::atomic<uint64_t> chunks{0};    ///< sender: chunks written; receiver: chunks consumed
  int64_t count[2] = {0, 0};          ///< elements of message m, at m%2
  int32_t dtype[2] = {-1, -1};        ///< its DataType
  uint32_t stagingHalf[2] = {0, 0};   ///< sender: which half of its slot holds the chunks
  /// Sender: where in that half its region for this message starts, and the bytes of each of
  /// the region's two chunk buffers (a group of sends splits the half among its destinations).
  uint64_t stagingOffset[2] = {0, 0};
  uint64_t chunkBytes[2] = {0, 0};
  /// Sender: where message m lies in its process, when its receiver reads it whole with
  /// process_vm_readv instead (then the one "chunk" is the whole message).
  uint64_t address[2] = {0, 0};
};

struct PairControl {
  PairSide send;
  PairSide recv;
};

struct alignas(kControlStride) SegmentHeader {
  uint64_t magic = 0;
  uint32_t version = 0;
  int32_t rankSize = 0;
  uint64_t slotBytes = 0;
  uint64_t totalBytes = 0;
  uint64_t heapBytes = 0;  ///< per rank; 0: no heap
  /// Rank 0's thresholds and forced algorithms (shm_policy.h), the same for every rank.
  ShmPolicy policy;
  /// First fatal failure seen by any rank, packed by PackAbort so readers see it whole; 0 = none.
  alignas(kControlStride) std::atomic<uint64_t> abort{0};
};

/// Abort record: the rank that failed, the rank that noticed, and the Status it raised.
struct AbortRecord {
  int culprit = -1;
  int reporter = -1;
  int32_t status = 0;
};
inline uint64_t PackAbort(const AbortRecord& r) {
  return (static_cast<uint64_t>(r.culprit + 1) & 0xfffff) |
         ((static_cast<uint64_t>(r.reporter + 1) & 0xfffff) << 20) |
         (static_cast<uint64_t>(static_cast<uint32_t>(r.status)) << 40);
}
inline AbortRecord UnpackAbort(uint64_t word) {
  AbortRecord r;
  r.culprit = static_cast<int>(word & 0xfffff) - 1;
  r.reporter = static_cast<int>((word >> 20) & 0xfffff) - 1;
  r.status = static_cast<int32_t>(word >> 40);
  return r;
}

/// Offsets of every block for a given rank count and slot size.
struct SegmentLayout {
  int rankSize = 0;
  uint64_t slotBytes = 0;
  uint64_t rankOffset = 0;
  uint64_t pairOffset = 0;
  uint64_t recordOffset = 0;
  uint64_t recordStride = 0;  ///< bytes per (rank, parity) record; 0: records are not carried
  uint64_t directOffset = 0;
  uint64_t directStride = 0;  ///< bytes per (rank, parity) DirectTable; 0: none (R > 64)
  uint64_t slotOffset = 0;
  uint64_t heapBytes = 0;
  uint64_t heapOffset = 0;
  uint64_t totalBytes = 0;

  /// `heapBytes` is ignored (no heap) above kMaxCarriedAgreementRanks ranks, where the direct
  /// tables (R^2 offsets) would outgrow the control area.
  static SegmentLayout For(int rankSize, uint64_t slotBytes, uint64_t heapBytes = 0);
  /// Bytes that exist from creation on: everything before the heaps.
  uint64_t FixedBytes() const { return heapOffset; }
};

/// Where a rank's pieces of one collective lie in its heap, published with the first round of
/// the call: from[j] is the heap offset of the piece this rank sends to rank j (its input is in
/// its heap), to[j] the heap offset where the piece from rank j lands (its output is in its
/// heap); -1 where not; at[] addresses in this rank's process that peers reach by
/// process_vm_readv/writev: in an AllToAllV at[j] is the piece for rank j, in an AllReduce at[0]
/// is the input and at[1] the output. Followed in memory by from[R], to[R] and at[R].
struct DirectTable {
  int64_t* from;
  int64_t* to;
  uint64_t* at;
};

/// COLLOPS_SHM_BYTES rounded to the page size and raised to the minimum `rankSize` needs;
/// kDefaultSlotBytes when unset. Throws ERROR_INVALID_PARAM for a value that is not a size.
uint64_t SlotBytesFromEnv(int rankSize);
/// COLLOPS_SHM_HEAP_BYTES rounded up to the page size (0: no heap); kDefaultHeapBytes when unset.
/// Throws ERROR_INVALID_PARAM for a value that is not a size.
uint64_t HeapBytesFromEnv();
/// COLLOPS_SHM_HEAP_CACHE_BYTES (0: every free gives its pages back); kDefaultHeapCacheBytes
/// when unset. This rank's own policy: ranks need not agree. Throws ERROR_INVALID_PARAM for a
/// value that is not a size.
uint64_t HeapCacheBytesFromEnv();

/// The memory this host has for new allocations (MemAvailable of /proc/meminfo), in bytes; 0 when
/// it does not say.
uint64_t AvailableHostMemory();
/// Throws ERROR_OUT_OF_HOST_MEMORY, naming COLLOPS_SHM_BYTES and the rank count, when the bytes
/// `layout` allocates at creation (FixedBytes) exceed `availableBytes` (0: unknown, no check). A
/// segment the host cannot hold would wake the OOM killer, which may kill any process of the
/// host, instead of failing here.
void CheckSegmentFits(const SegmentLayout& layout, uint64_t availableBytes);

/// A mapping of the segment in this process. Unmapped on destruction; the memory itself lives
/// until the last rank unmaps it.
class Segment {
 public:
  /// Rank 0: creates, sizes, pre-allocates, seals and maps the memory and initialises the header
  /// and control blocks. `fd` receives the descriptor to pass to the other ranks.
  static Segment Create(const SegmentLayout& layout, UniqueFd* fd);
  /// Other ranks: maps the descriptor received from rank 0 and checks the header against
  /// `rankSize`.
  static Segment Attach(int fd, int rankSize);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  SegmentHeader& Header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  RankControl& Rank(int rank) const {
    return reinterpret_cast<RankControl*>(base_ + layout_.rankOffset)[rank];
  }
  PairControl& Pair(int src, int dst) const {
    return reinterpret_cast<PairControl*>(base_ + layout_.pairOffset)[src * layout_.rankSize + dst];
  }
  /// Whether the agreement record can ride with a round (Record() exists).
  bool CarriesAgreement() const { return layout_.recordStride != 0; }
  /// The record `rank` publishes with rounds of parity `parity`: the round number (uint64_t),
  /// then the signature.h wire record.
  uint8_t* Record(int rank, uint64_t parity) const {
    return base_ + layout_.recordOffset + (2 * rank + (parity & 1)) * layout_.recordStride;
  }
  /// Bytes from one rank's record to the next rank's of the same parity.
  uint64_t RecordRankStride() const { return 2 * layout_.recordStride; }
  /// Whether ranks have heaps (Heap() exists).
  bool HasHeaps() const { return layout_.heapBytes != 0; }
  /// Whether Direct() exists: up to kMaxCarriedAgreementRanks ranks.
  bool HasDirectTables() const { return layout_.directStride != 0; }
  uint8_t* Heap(int rank) const { return base_ + layout_.heapOffset + rank * layout_.heapBytes; }
  uint64_t HeapBytes() const { return layout_.heapBytes; }
  /// The table `rank` publishes with rounds of parity `parity`.
  DirectTable Direct(int rank, uint64_t parity) const {
    auto* at = reinterpret_cast<int64_t*>(base_ + layout_.directOffset +
                                          (2 * rank + (parity & 1)) * layout_.directStride);
    return {at, at + layout_.rankSize, reinterpret_cast<uint64_t*>(at + 2 * layout_.rankSize)};
  }
  /// Half `parity` (0 or 1) of `rank`'s data slot.
  uint8_t* Half(int rank, uint64_t parity) const {
    return base_ + layout_.slotOffset + rank * layout_.slotBytes + (parity & 1) * HalfBytes();
  }
  uint64_t HalfBytes() const { return layout_.slotBytes / 2; }
  const SegmentLayout& Layout() const { return layout_; }

 private:
  /// Maps all `bytes`; faults in the first `populate` of them now.
  static uint8_t* Map(int fd, uint64_t bytes, uint64_t populate);

  uint8_t* base_ = nullptr;
  SegmentLayout layout_;
};

}  // namespace shm
}  // namespace collops
