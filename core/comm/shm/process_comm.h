// ProcessCommunicator: backend "lccl", commMode 0 — ranks are separate processes of one host that
// share a memfd segment (process_segment.h) found through an abstract-socket rendezvous
// (process_rendezvous.h). Internal header; users reach it through CreateCommunicator().
//
// Synchronisation is by *rounds*. Each rank counts the rounds it has published
// (RankControl::posted, 64-bit, so a stale value can never satisfy a later wait). In round n a rank
// writes its data into half n%2 of its slot, posts n, and waits until every rank has posted n;
// then it reads the other ranks' halves of round n, and posts n+1 only after it has finished
// reading. So by the time a rank has waited for round n+1, nobody reads round n's half any more,
// and round n+2 may overwrite it: one synchronisation per round, no separate "done" flag.
//
// Agreement: Agree() writes this rank's signature record into its record for the next round, and
// the first Round() of the primitive that follows checks every rank's record right after its
// wait, before anything is read from a peer or written to an output. A call then costs the data
// rounds alone, where an AllGatherBytes exchange would add a whole round (at 4 KiB, most of the
// time of an AllReduce).
//
// Failure: a wait that sleeps checks, every slice (20 ms), whether the rank it waits for has died
// (pidfd) and whether any rank has published an abort record; either ends the call with
// ERROR_PEER_LOST naming the dead rank, marks the communicator broken, and every later call
// throws the same error at once. A wait that outlives COLLOPS_TIMEOUT fails with ERROR_TIMEOUT
// naming the ranks that did not arrive.
#pragma once

#include <sched.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/signature.h"
#include "collops/status.h"
#include "core/comm/shm/fork_guard.h"
#include "core/comm/shm/process_fd.h"
#include "core/comm/shm/process_heap.h"
#include "core/comm/shm/process_segment.h"
#include "core/comm/shm/wait_word.h"

namespace collops {
namespace shm {

class ProcessCommunicator final : public Communicator {
 public:
  /// Rendezvous with the other ranks of (job key, param.commDomain, param.rankSize); blocks up to
  /// COLLOPS_TIMEOUT seconds. Throws Error (see Rendezvous()).
  explicit ProcessCommunicator(const CommParam& param);
  ~ProcessCommunicator() override;

  std::string BackendName() const override { return "lccl"; }
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }

  void AllGatherBytes(const void* in, void* out, size_t bytes) override;
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype) override;
  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op) override;
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override;
  void Broadcast(void* buf, size_t count, DataType dtype, int root) override;
  void Send(const void* buf, size_t count, DataType dtype, int peer) override;
  void Recv(void* buf, size_t count, DataType dtype, int peer) override;
  void Exchange(const std::vector<PointToPoint>& ops) override;
  void Barrier() override;
  void Agree(const CallSignature& mine) override;
  bool Broken() const override { return failureStatus_ != NO_ERROR; }
  /// From this rank's heap in the segment (process_heap.h); nullptr when COLLOPS_SHM_HEAP_BYTES
  /// is 0, R > 64, or the heap has no room. In a child of fork(): ERROR_COMM_FAIL, as Enter().
  void* AllocateShared(size_t bytes) override;
  /// In a child of fork(): does nothing (the pages are the parent's; process_heap.h).
  bool FreeShared(void* p) override { return heap_.Free(p); }
  void SetIdleHook(std::function<void()> hook) override { idleHook_ = std::move(hook); }
  void Abort(Status status, const std::string& why) override;

  /// The pid of every rank, by rank (tests and messages).
  const std::vector<pid_t>& Pids() const { return pids_; }
  /// "pid N" for messages; a rank in a pid namespace this one cannot see has no number here.
  std::string PidOf(int rank) const {
    return pids_[rank] > 0 ? Concat("pid ", pids_[rank])
                           : "in a pid namespace this rank cannot see";
  }
  /// Whether large pieces may move by process_vm_readv/writev (ProbeCrossMemory).
  bool CrossMemory() const { return crossMemory_; }
  /// Synchronisation rounds this rank has completed (tests count the rounds a call costs).
  uint64_t Rounds() const { return round_; }
  /// Bytes of this rank's heap handed out by AllocateShared (tests).
  uint64_t SharedBytes() const { return heap_.AllocatedBytes(); }
  /// The shared segment (tests write into it as a peer that scribbles on it would).
  const Segment& SharedSegment() const { return segment_; }

 private:
  // --- process_comm.cpp: round synchronisation and failure handling ---
  /// Starts a public call: rethrows the stored failure and sets the op name for messages.
  void Enter(const char* op);
  /// Whether this process is a child of fork() of the one that created the communicator.
  bool InForkedChild() const { return forkGeneration_ != ForkGeneration(); }
  /// ERROR_COMM_FAIL for a call `op` in a child of fork(), naming the creator.
  [[noreturn]] void RefuseForkedChild(const char* op) const;
  /// Half of `rank`'s slot that round `round` uses.
  uint8_t* HalfOf(int rank, uint64_t round) const { return segment_.Half(rank, round); }
  /// The half this rank fills for the round it is about to post.
  uint8_t* NextHalf() const { return segment_.Half(rank_, round_ + 1); }
  /// Publishes round_ + 1.
  void Post();
  /// Waits until every rank has posted round_.
  void WaitAll();
  /// Post() then WaitAll(): one synchronisation round; the first of a call that Agree() preceded
  /// also checks the records.
  void Round() {
    Post();
    WaitAll();
    if (agreementPending_) CheckCarriedAgreement();
  }
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
  /// Waits on `word` until ready(); `peer` is the rank whose progress it needs (named if the wait
  /// times out); checkPeers() runs between sleeps and throws when a rank it needs is gone.
  template <class Ready, class CheckPeers>
  void Await(WaitWord& word, Ready&& ready, int peer, CheckPeers&& checkPeers) {
    if (Spin(ready, peer)) return;
    deadline_ = Deadline::After(timeoutSeconds_);
    if (!word.Wait(ready, deadline_, [&] { AfterSlice(checkPeers); })) {
      Break(ERROR_TIMEOUT, peer,
            Concat(Where(), "rank ", peer, " (", PidOf(peer), ") did not arrive within ",
                   timeoutSeconds_, " s (", timeoutSource_, ")"));
    }
  }
  /// What a wait does after each sleep slice: checkPeers(), then the idle hook.
  template <class CheckPeers>
  void AfterSlice(CheckPeers&& checkPeers) {
    checkPeers();
    if (idleHook_) idleHook_();
  }
  /// Throws (and breaks the communicator) when `peer` died or any rank published an abort.
  void CheckPeer(int peer);
  /// Throws (and breaks the communicator) when any rank published an abort.
  void ThrowIfAborted();
  /// In a send or receive with `peer`: throws ERROR_RANK_MISMATCH (and breaks the communicator)
  /// when the peer sleeps in a collective waiting for this rank's round.
  void CheckCallOrder(int peer);
  bool PeerDead(int peer) const;
  /// Records the failure, publishes it to the other ranks, throws it.
  [[noreturn]] void Break(Status status, int culprit, const std::string& message);
  /// Break without the throw: records the failure and tells the peers (the abort record names
  /// `culprit`, this rank reporting).
  void MarkBroken(Status status, int culprit, const std::string& message);
  /// "lccl AllReduce (rank 1 of 4): "
  std::string Where() const;

  /// At creation (two rounds): whether every rank can read and write its peers' memory with
  /// process_vm_readv/writev and the policy allows it (SegmentHeader::crossMemoryMinBytes).
  bool ProbeCrossMemory();

  // --- process_p2p.cpp ---
  struct Transfer;
  /// Runs `ops` as one group (Send and Recv are groups of one); `op` names the call.
  void RunGroup(const char* op, const std::vector<PointToPoint>& ops);
  /// Announces transfer t on its channel.
  void Announce(Transfer& t);
  /// Takes every step of t that needs no waiting; true when it took any. A mismatch with the
  /// peer's announcement ends t and, when it is the group's first, is described in `mismatch`.
  bool Advance(Transfer& t, const std::vector<Transfer>& group, std::string& mismatch);
  /// A staged receive: where t's chunks lie in the sender's slot, as its announcement says;
  /// breaks the communicator (ERROR_COMM_FAIL naming the sender) when that is outside the slot.
  void ReceiveStaged(Transfer& t);
  /// Whether t's peer has done what t waits for (its next step would not wait).
  bool Ready(const Transfer& t) const;
  void Ring(int peer) { segment_.Rank(peer).bell.Notify(); }

  // --- process_algorithms.cpp ---
  void AllReduceOneShot(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op);
  void AllReduceRsAg(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op);
  void AllReduceCrossMemory(const uint8_t* in, uint8_t* out, size_t count, DataType dtype,
                            ReduceOp op);
  /// AllReduce, with the first round of rsag, cma or a large one-shot: publishes whether this
  /// rank's input and output of `bytes` both lie in its heap (kHeapBuffers, DirectTable from[0],
  /// to[0], from[1]); returns that.
  bool PublishHeapBuffers(const uint8_t* in, const uint8_t* out, size_t bytes);
  /// After that round: heapInput_[r] and heapOutput_[r] are rank r's published buffers (null
  /// where it published none); true when every rank published both for a call of `bytes`. Every
  /// rank reads the same tables, so all take the same path.
  bool FindHeapBuffers(size_t bytes);
  /// AllReduce "heap": the rest of the call after that round (two more rounds).
  void AllReduceInHeaps(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op);
  /// Every rank contributes myBytes (bytesOf[j] for rank j) and rank j's data lands at
  /// out + offsetOf[j]; rounds of at most one half each.
  void GatherRounds(const uint8_t* in, size_t myBytes, uint8_t* out,
                    const std::vector<size_t>& bytesOf, const std::vector<size_t>& offsetOf);
  /// Copies part of a call's output out of the segment; with non-temporal stores when the whole
  /// output of the call (`outputBytes`) reaches SegmentHeader::streamOutputBytes.
  void CopyOut(uint8_t* dst, const uint8_t* src, size_t bytes, size_t outputBytes) const;
  /// Largest region per destination inside one half (R-1 of them), a multiple of 64 bytes.
  size_t RegionBytes() const;
  /// Where the region for `destination` starts inside a half of `owner` (never owner itself).
  size_t RegionOffset(int owner, int destination) const;
  /// Pieces that move directly between heaps (process_algorithms.cpp): publishes this rank's
  /// DirectTable for the next round (from[j]: heap offset of the piece for rank j in `in`; to[j]:
  /// heap offset where rank j's piece lands in `out`, -1 throughout when `out` is null, and then
  /// recvCounts and rdispls are not read) and its kDirect* flags, and marks in direct_ the pieces
  /// it sends whole (not staged at all). Needs a heap.
  int32_t PublishDirect(const uint8_t* in, const int64_t* sendCounts, const int64_t* sdispls,
                        uint8_t* out, const int64_t* recvCounts, const int64_t* rdispls, size_t e);
  /// ReduceScatterV, after the round that carried the tables: peerInput_[r] = rank r's piece for
  /// this rank in r's heap where r sent it whole, else null. True when any rank published a table.
  bool FindSharedPieces(const int64_t* sendCounts, size_t recvCount, size_t e);
  /// ReduceScatterV: the rounds the staged pieces need (FindSharedPieces' round).
  size_t StagedRounds(const int64_t* sendCounts, size_t e, size_t per) const;
  /// After the round that carried the tables: completes direct_ for every peer; `per` elements
  /// of a piece that is not whole went through that round's slots.
  void ClassifyDirect(const int64_t* sendCounts, const int64_t* recvCounts, size_t e, size_t per);

  /// Which AllToAllV pieces of this call move by process_vm_readv: publishes, with the next
  /// round, the address of every piece this rank sends that way (kCrossMemory flag, DirectTable
  /// at[]) and sets crossSend_. `flags` are this rank's kDirect* flags for that round.
  void PublishCrossMemory(const uint8_t* in, const int64_t* sendCounts, const int64_t* sdispls,
                          size_t e, int32_t flags);
  /// After that round: crossRecv_[j] for the pieces this rank reads from rank j's memory.
  bool FindCrossMemory(const int64_t* recvCounts, size_t e);
  enum class CrossMemoryDirection { kRead, kWrite };
  /// Copies `bytes` between `local` and `address` in rank `owner`'s process: reads them into
  /// `local` (process_vm_readv) or writes them from there (process_vm_writev). When the kernel
  /// refuses, breaks the communicator: with the failure another rank published, or
  /// ERROR_PEER_LOST when the owner is gone, else ERROR_COMM_FAIL.
  void CopyCrossMemory(CrossMemoryDirection direction, int owner, uint8_t* local, uint64_t address,
                       size_t bytes);

  /// GatherRounds, Broadcast: publishes with the next round whether this rank's input `in`
  /// (null: none) of `bytes`, for a call of `outputBytes` per rank, moves by process_vm_readv,
  /// and then its address (DirectTable at[0]); `algo` is the op's COLLOPS_ALGO_* choice. Returns
  /// that. Its receivers follow the flag, so every rank calls it in every such call, also with no
  /// input to offer: the flag's slot is reused every other round, and a slot left alone would
  /// still point the peers at the buffer of an earlier call.
  bool PublishCrossInput(int32_t algo, const uint8_t* in, size_t bytes, size_t outputBytes);
  /// After that round: whether `rank` flagged kCrossMemory (any op that moves something of its
  /// by process_vm_readv).
  bool CrossInput(int rank) const;

  /// Send/Recv/Exchange: whether a message of `bytes` this rank sends moves by process_vm_readv
  /// (the receiver follows the sender's announcement). Beyond crossMemoryMaxBytes only when
  /// oversubscribed or when the sender's group also receives: a lone send with a CPU each is
  /// faster staged, since the sender's copy in overlaps the receiver's copy out, which wins on
  /// buffers past the caches (R=2, 64 MiB: 19.6 ms staged vs 23 ms read; 32 MiB 9.1 vs 8.0 ms;
  /// R=4 on 2 CPUs 64 MiB 35-36 vs 28 ms); when both ranks send and receive at once, each CPU
  /// has its own receive to do and staging only doubles the copies (R=2 sendrecv 64 MiB: 19.2 ms
  /// staged vs 10.7-11.0 ms read, OpenMPI 10.8 ms).
  bool CrossMessage(size_t bytes, bool groupReceives) const {
    const SegmentHeader& header = segment_.Header();
    return crossMemory_ && bytes != 0 && bytes >= header.crossMemoryMinBytes &&
           (header.Oversubscribed() || groupReceives || bytes <= header.crossMemoryMaxBytes);
  }

  /// The kDirect* flags `rank` published with the round just completed.
  int32_t DirectFlags(int rank) const {
    return segment_.Rank(rank).direct[round_ & 1].load(std::memory_order_relaxed);
  }
  /// `bytes` at `offset` in `owner`'s heap, as `owner` published it with the round just
  /// completed; breaks the communicator (ERROR_COMM_FAIL) when the range is not inside that heap.
  uint8_t* PeerHeap(int owner, int64_t offset, uint64_t bytes);
  /// Publishes with the next round the heap offset of this rank's input [in, +bytes): -1 when
  /// it is not in the heap or smaller than `minBytes` (then it is staged). Returns it.
  int64_t PublishInput(const void* in, size_t bytes, size_t minBytes);
  /// After that round: peerInput_[r] = rank r's published input (bytesOf(r) bytes, checked
  /// against its heap), null where r published none. True when any rank, this one included,
  /// published one.
  template <class BytesOf>
  bool FindSharedInputs(BytesOf&& bytesOf);

  int rank_ = 0;
  int size_ = 0;
  Segment segment_;
  UniqueFd memory_;  ///< the segment's memfd: the heap allocates and frees pages through it
  SharedHeap heap_;
  /// How the pieces between this rank and one peer move in the call in progress. A piece is
  /// direct when its receiver's output or its sender's input lies in that rank's heap; then its
  /// sender writes it into the receiver's heap (pushTo) or its receiver reads it from the
  /// sender's heap (pullFrom), one copy instead of two through the slots.
  struct DirectPeer {
    bool send = false;                  ///< the piece this rank sends to the peer is direct
    bool recv = false;                  ///< the piece the peer sends to this rank is direct
    size_t sendStart = 0;               ///< elements of the sent piece that were staged
    size_t recvStart = 0;               ///< elements of the received piece that were staged
    uint8_t* pushTo = nullptr;          ///< this rank writes its piece for the peer here
    const uint8_t* pullFrom = nullptr;  ///< this rank reads the peer's piece for it here
  };
  std::vector<DirectPeer> direct_;         ///< by peer rank (ClassifyDirect)
  std::vector<const uint8_t*> peerInput_;  ///< by peer rank (FindSharedInputs)
  std::vector<const uint8_t*> heapInput_;  ///< by rank, AllReduce buffers (FindHeapBuffers)
  std::vector<uint8_t*> heapOutput_;
  bool crossMemory_ = false;          ///< ProbeCrossMemory's verdict
  std::vector<uint64_t> probeWords_;  ///< what the peers read and write at creation
  /// By peer: this AllToAllV's piece for it, and from it, moves by process_vm_readv. Never set
  /// without crossMemory_ (PublishCrossMemory, FindCrossMemory).
  std::vector<bool> crossSend_, crossRecv_;
  UniqueFd claim_;  ///< released in children of fork() (fork_guard.h)
  const uint64_t forkGeneration_ = ForkGeneration();  ///< of the process that created it
  const pid_t creatorPid_ = getpid();
  std::vector<pid_t> pids_;
  std::vector<UniqueFd> pidfds_;
  uint64_t round_ = 0;
  std::vector<uint64_t> sendMessages_, recvMessages_, sendChunks_, recvChunks_;
  double timeoutSeconds_ = 300;
  const char* timeoutSource_ = "COLLOPS_TIMEOUT";  ///< where timeoutSeconds_ came from
  WaitBudget budget_;                              ///< SegmentHeader::spinNanos and yieldNanos
  std::function<void()> idleHook_;                 ///< SetIdleHook's
  const char* op_ = "";
  bool agreementPending_ = false;  ///< Agree() wrote a record that the next Round() carries
  CallSignature agreement_;        ///< its names, for the messages
  Deadline deadline_ = Deadline::After(0);  ///< of the current wait: COLLOPS_TIMEOUT from its start
  Status failureStatus_ = NO_ERROR;
  std::string failureMessage_;
};

}  // namespace shm
}  // namespace collops
