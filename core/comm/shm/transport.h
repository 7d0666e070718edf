// Transport: what the collectives of the multi-process lccl engine are built from — the shared
// segment (process_segment.h) found through the rendezvous (process_rendezvous.h), its slots,
// synchronisation rounds and waits, the liveness of the peers, and access to the peers' buffers
// (their heaps in the segment, and their processes' memory by process_vm_readv/writev). Each
// collective's algorithms live in a file of their own (allreduce.h, gather.h, reduce_scatter.h,
// alltoallv.h, p2p.h) and use only this interface.
//
// Synchronisation is by *rounds*. Each rank counts the rounds it has published
// (RankControl::posted, 64-bit, so a stale value can never satisfy a later wait). In round n a rank
// writes its data into half n%2 of its slot, posts n, and waits until every rank has posted n;
// then it reads the other ranks' halves of round n, and posts n+1 only after it has finished
// reading. So by the time a rank has waited for round n+1, nobody reads round n's half any more,
// and round n+2 may overwrite it: one synchronisation per round, no separate "done" flag. A round
// also carries a scalar, a word of flags and a DirectTable per rank (PublishValue, PublishFlags,
// NextTable), written before the post and read after the wait.
//
// Agreement: CarryAgreement() writes this rank's signature record into its record for the next
// round, and the first Round() that follows checks every rank's record right after its wait,
// before anything is read from a peer or written to an output. A call then costs its data rounds
// alone; a separate exchange would add a whole round, most of the time of a small AllReduce.
//
// Failure: a wait that sleeps checks, every slice (20 ms), whether the rank it waits for has died
// (pidfd) and whether any rank has published an abort record; either ends the call with
// ERROR_PEER_LOST naming the dead rank, marks the transport broken, and every later call throws
// the same error at once. A wait that outlives COLLOPS_TIMEOUT fails with ERROR_TIMEOUT naming the
// ranks that did not arrive, or, when such a rank itself sleeps waiting for another, the rank at
// the end of that chain (EndOfWaits).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collops/comm_params.h"
#include "collops/signature.h"
#include "collops/status.h"
#include "collops/tensor.h"
#include "core/comm/shm/fork_guard.h"
#include "core/comm/shm/process_fd.h"
#include "core/comm/shm/process_heap.h"
#include "core/comm/shm/process_segment.h"
#include "core/comm/shm/shm_policy.h"
#include "core/comm/shm/wait_word.h"

namespace collops {
namespace shm {

/// RankControl::direct flags a rank publishes with a round: it published a DirectTable ...
constexpr int32_t kDirectTable = 1;
/// ... it sends some piece whole (piece_tables.h) ...
constexpr int32_t kDirectWhole = 2;
/// ... its input is in its heap ...
constexpr int32_t kDirectInput = 4;
/// ... something of its moves by process_vm_readv, from the address(es) in its at[] ...
constexpr int32_t kCrossMemory = 8;
/// ... (AllReduce) its input and output both lie in its heap: from[0] and to[0] are their
/// offsets, from[1] the call's bytes.
constexpr int32_t kHeapBuffers = 16;

/// Elements [lo, lo + per) of a count, clipped: how many of them exist.
inline size_t Clip(int64_t count, size_t lo, size_t per) {
  if (count <= static_cast<int64_t>(lo)) return 0;
  return std::min(per, static_cast<size_t>(count) - lo);
}
inline size_t CeilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

enum class CrossMemoryDirection { kRead, kWrite };

class Transport {
 public:
  /// Rendezvous with the other ranks of (job key, param.commDomain, param.rankSize), rank 0
  /// creating the segment with the policy of its environment (ChoosePolicy); blocks up to
  /// COLLOPS_TIMEOUT seconds. Throws Error (see Rendezvous()).
  explicit Transport(const CommParam& param);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int Rank() const { return rank_; }
  int Size() const { return size_; }
  /// Rank 0's policy, as this rank read it at creation: a rank that later writes over the header
  /// cannot make the ranks pick different algorithms for one call.
  const ShmPolicy& Policy() const { return policy_; }
  /// The algorithm COLLOPS_ALGO_<collective> forces (kAlgoAuto: none).
  Algo Forced(Collective collective) const { return Policy().Forced(collective); }

  // --- Calls ---

  /// Starts a public call: rethrows the stored failure, refuses a child of fork(), sets the op
  /// name for messages and throws when a peer published an abort.
  void Enter(const char* op);
  /// "lccl AllReduce (rank 1 of 4): "
  std::string Where() const;
  /// Bytes of one element of `dtype`; ERROR_INVALID_TENSOR_DTYPE for a type without a size.
  size_t ElementBytes(DataType dtype) const {
    const size_t bytes = DataTypeSize(dtype);
    if (bytes == 0) FailDtype(dtype, "has no size");
    return bytes;
  }
  /// ERROR_INVALID_TENSOR_DTYPE unless `dtype` can be reduced.
  void CheckReducible(DataType dtype) const;

  // --- Rounds ---

  /// Synchronisation rounds this rank has completed.
  uint64_t Rounds() const { return round_; }
  /// Post() then WaitAll(): one synchronisation round; the first of a call that CarryAgreement()
  /// preceded also checks the records. A rank that gave up on the transport publishes its abort
  /// record before it returns and frees the buffers the round was to keep in place, so a round
  /// that sees one fails: a late rank (stopped, swapped out) never completes a call with data its
  /// peers stopped guarding, even when they had posted the round before they gave up.
  void Round() {
    Post();
    WaitAll();
    ThrowIfAborted();
    if (agreementPending_) CheckCarriedAgreement();
  }
  /// The half of this rank's slot it fills for the round it is about to post.
  uint8_t* NextHalf() const { return segment_.Half(rank_, round_ + 1); }
  /// The half `rank` filled for the round just completed.
  uint8_t* HalfOf(int rank) const { return segment_.Half(rank, round_); }
  size_t HalfBytes() const { return segment_.HalfBytes(); }
  /// Largest region per destination inside one half (R-1 of them), a multiple of 64 bytes.
  size_t RegionBytes() const {
    return (segment_.HalfBytes() / std::max(1, size_ - 1)) & ~size_t{63};
  }
  /// Where the region for `destination` starts inside a half of `owner` (never owner itself).
  size_t RegionOffset(int owner, int destination) const {
    return static_cast<size_t>(destination < owner ? destination : destination - 1) * RegionBytes();
  }
  /// This rank's scalar, flags and DirectTable for the next round, and those `rank` published
  /// with the round just completed.
  void PublishValue(int64_t value) {
    segment_.Rank(rank_).value[(round_ + 1) & 1].store(value, std::memory_order_relaxed);
  }
  int64_t ValueOf(int rank) const {
    return segment_.Rank(rank).value[round_ & 1].load(std::memory_order_relaxed);
  }
  void PublishFlags(int32_t flags) {
    segment_.Rank(rank_).direct[(round_ + 1) & 1].store(flags, std::memory_order_relaxed);
  }
  int32_t FlagsOf(int rank) const {
    return segment_.Rank(rank).direct[round_ & 1].load(std::memory_order_relaxed);
  }
  /// Whether DirectTables exist (up to kMaxCarriedAgreementRanks ranks).
  bool HasTables() const { return segment_.HasDirectTables(); }
  DirectTable NextTable() const { return segment_.Direct(rank_, round_ + 1); }
  DirectTable TableOf(int rank) const { return segment_.Direct(rank, round_); }

  // --- Agreement ---

  /// Whether CarryAgreement() can carry records (R > 1 and at most kMaxCarriedAgreementRanks).
  bool CarriesAgreement() const { return size_ > 1 && segment_.CarriesAgreement(); }
  /// Writes `mine` into this rank's record for the next round, which the first Round() of the
  /// next call checks against every rank's; a rank that will not make the call (failedStatus)
  /// sends it with a round of its own.
  void CarryAgreement(const CallSignature& mine);

  // --- Peers' buffers ---

  /// This rank's heap (AllocateShared).
  SharedHeap& Heap() { return heap_; }
  const SharedHeap& Heap() const { return heap_; }
  bool HasHeaps() const { return segment_.HasHeaps(); }
  /// `bytes` at `offset` in `owner`'s heap, as `owner` published it; breaks the transport
  /// (ERROR_COMM_FAIL) when the range is not inside that heap.
  uint8_t* PeerHeap(int owner, int64_t offset, uint64_t bytes);
  /// Whether pieces may move by process_vm_readv/writev (the creation probe's verdict).
  bool CrossMemory() const { return crossMemory_; }
  /// Copies `bytes` between `local` and `address` in rank `owner`'s process: reads them into
  /// `local` (process_vm_readv) or writes them from there (process_vm_writev). When the kernel
  /// refuses, breaks the transport: with the failure another rank published, or ERROR_PEER_LOST
  /// when the owner is gone, else ERROR_COMM_FAIL.
  void CopyCrossMemory(CrossMemoryDirection direction, int owner, uint8_t* local, uint64_t address,
                       size_t bytes);
  /// Whether a call whose whole output is `outputBytes` writes it with non-temporal stores: it
  /// reaches the policy's streamOutputBytes (0: never).
  bool StreamsOutput(size_t outputBytes) const;
  /// Copies part of a call's output out of the segment or a peer's buffer; with non-temporal
  /// stores when the whole output of the call (`outputBytes`) StreamsOutput.
  void CopyOut(uint8_t* dst, const uint8_t* src, size_t bytes, size_t outputBytes) const;
  /// From this rank's heap; nullptr when there is none or it has no room. In a child of fork():
  /// ERROR_COMM_FAIL, as Enter().
  void* AllocateShared(size_t bytes);

  // --- Point-to-point channels and their waits ---

  PairControl& Pair(int src, int dst) const { return segment_.Pair(src, dst); }
  /// The half of `rank`'s slot with parity `parity`.
  uint8_t* Half(int rank, uint64_t parity) const { return segment_.Half(rank, parity); }
  /// Rings `peer`'s bell after a post toward it.
  void Ring(int peer) { segment_.Rank(peer).bell.Notify(); }
  /// Sleeps on this rank's bell until ready(); `peer` is the rank whose progress it needs (named
  /// if the wait times out); checkPeers() runs between sleeps and throws when a rank it needs is
  /// gone.
  template <class Ready, class CheckPeers>
  void AwaitBell(Ready&& ready, int peer, CheckPeers&& checkPeers) {
    if (Spin(ready, peer)) return;
    deadline_ = Deadline::After(timeoutSeconds_);
    const WaitingFor mark(segment_.Rank(rank_), peer);
    if (!segment_.Rank(rank_).bell.Wait(ready, deadline_, [&] { AfterSlice(checkPeers); })) {
      BreakOnTimeout({peer});
    }
  }

  // --- Liveness and failure ---

  /// Throws (and breaks the transport) when `peer` died or any rank published an abort.
  void CheckPeer(int peer);
  /// Throws (and breaks the transport) when any rank published an abort.
  void ThrowIfAborted();
  /// In a send or receive with `peer`: throws ERROR_RANK_MISMATCH (and breaks the transport)
  /// when the peer sleeps in a collective waiting for this rank's round.
  void CheckCallOrder(int peer);
  /// The rank at the end of the waits that start at `peer`: while `peer` sleeps in a wait of its
  /// own (RankControl::waitingFor, its latest slice recent), the rank it waits for, and so on; a
  /// rank that waits for nobody (it runs elsewhere, or it stopped) ends the chain. When one rank
  /// stopped, every survivor waits on it directly or through other survivors, and the survivor
  /// whose wait times out first must name it, not the survivor it happened to wait for. A chain
  /// that comes back to this rank or loops (calls made in different orders) gives `peer`.
  int EndOfWaits(int peer) const;
  /// Breaks with ERROR_TIMEOUT: this rank waited COLLOPS_TIMEOUT for the ranks `late`; names the
  /// ranks at the end of their waits (EndOfWaits), and through whom this rank waits for them.
  /// When another rank timed out first, its abort record is the error (ThrowIfAborted).
  [[noreturn]] void BreakOnTimeout(const std::vector<int>& late);
  /// Records the failure, publishes it to the other ranks, throws it.
  [[noreturn]] void Break(Status status, int culprit, const std::string& message);
  /// Stops the transport after a failure outside it; the peers' waits end with `status`.
  void Abort(Status status, const std::string& why);
  bool Broken() const { return failureStatus_ != NO_ERROR; }
  void SetIdleHook(std::function<void()> hook) { idleHook_ = std::move(hook); }

  /// The shared segment (tests write into it as a peer that scribbles on it would).
  const Segment& SharedSegment() const { return segment_; }
  /// The pid of every rank, by rank.
  const std::vector<pid_t>& Pids() const { return pids_; }
  /// "pid N" for messages; a rank in a pid namespace this one cannot see has no number here.
  std::string PidOf(int rank) const {
    return pids_[rank] > 0 ? Concat("pid ", pids_[rank])
                           : "in a pid namespace this rank cannot see";
  }

 private:
  /// Whether this process is a child of fork() of the one that created the transport.
  bool InForkedChild() const { return forkGeneration_ != ForkGeneration(); }
  /// ERROR_COMM_FAIL for a call `op` in a child of fork(), naming the creator.
  [[noreturn]] void RefuseForkedChild(const char* op) const;
  [[noreturn]] void FailDtype(DataType dtype, const char* what) const;
  /// Publishes round_ + 1.
  void Post();
  /// Waits until every rank has posted round_.
  void WaitAll();
  /// Checks the agreement records every rank published with the round just completed.
  void CheckCarriedAgreement();
  /// SpinThenYield for the wait budget, with `peer` as the rank whose CPU it must not hold.
  template <class Ready>
  bool Spin(Ready& ready, int peer) const {
    const std::atomic<int32_t>& peerCpu = segment_.Rank(peer).cpu;
    std::atomic<int32_t>& myCpu = segment_.Rank(rank_).cpu;
    return SpinThenYield(ready, budget_, [&](int cpu) {
      myCpu.store(cpu, std::memory_order_relaxed);
      return peerCpu.load(std::memory_order_relaxed) == cpu;
    });
  }
  /// What a wait does after each sleep slice: checkPeers(), then the idle hook.
  template <class CheckPeers>
  void AfterSlice(CheckPeers&& checkPeers) {
    segment_.Rank(rank_).awakeAt.store(MonotonicNanos(), std::memory_order_relaxed);
    checkPeers();
    if (idleHook_) idleHook_();
  }
  bool PeerDead(int peer) const;
  /// Break without the throw: records the failure and tells the peers (the abort record names
  /// `culprit`, this rank reporting).
  void MarkBroken(Status status, int culprit, const std::string& message);
  /// At creation (two rounds): whether every rank can read and write its peers' memory with
  /// process_vm_readv/writev and the policy allows it (ShmPolicy::crossMemoryMinBytes).
  bool ProbeCrossMemory();

  int rank_ = 0;
  int size_ = 0;
  Segment segment_;
  ShmPolicy policy_;  ///< Policy()
  UniqueFd memory_;   ///< the segment's memfd: the heap allocates and frees pages through it
  SharedHeap heap_;
  bool crossMemory_ = false;          ///< ProbeCrossMemory's verdict
  std::vector<uint64_t> probeWords_;  ///< what the peers read and write at creation
  UniqueFd claim_;                    ///< released in children of fork() (fork_guard.h)
  const uint64_t forkGeneration_ = ForkGeneration();  ///< of the process that created it
  const pid_t creatorPid_ = getpid();
  std::vector<pid_t> pids_;
  std::vector<UniqueFd> pidfds_;
  uint64_t round_ = 0;
  double timeoutSeconds_ = 300;
  const char* timeoutSource_ = "COLLOPS_TIMEOUT";  ///< where timeoutSeconds_ came from
  WaitBudget budget_;                              ///< ShmPolicy::spinNanos and yieldNanos
  std::function<void()> idleHook_;                 ///< SetIdleHook's
  const char* op_ = "";
  bool agreementPending_ = false;  ///< CarryAgreement() wrote a record the next Round() carries
  CallSignature agreement_;        ///< its names, for the messages
  Deadline deadline_ = Deadline::After(0);  ///< of the current wait: COLLOPS_TIMEOUT from its start
  Status failureStatus_ = NO_ERROR;
  std::string failureMessage_;
};

}  // namespace shm
}  // namespace collops
