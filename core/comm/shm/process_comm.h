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
// Failure: a wait that sleeps checks, every slice (20 ms), whether the rank it waits for has died
// (pidfd) and whether any rank has published an abort record; either ends the call with
// ERROR_PEER_LOST naming the dead rank, marks the communicator broken, and every later call
// throws the same error at once. A wait that outlives COLLOPS_TIMEOUT fails with ERROR_TIMEOUT
// naming the ranks that did not arrive.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/status.h"
#include "core/comm/shm/process_fd.h"
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
  void Barrier() override;
  bool Broken() const override { return failureStatus_ != NO_ERROR; }

  /// The pid of every rank, by rank (tests and messages).
  const std::vector<pid_t>& Pids() const { return pids_; }

 private:
  // --- process_comm.cpp: round synchronisation and failure handling ---
  /// Starts a public call: rethrows the stored failure and sets the op name for messages.
  void Enter(const char* op);
  /// Half of `rank`'s slot that round `round` uses.
  uint8_t* HalfOf(int rank, uint64_t round) const { return segment_.Half(rank, round); }
  /// The half this rank fills for the round it is about to post.
  uint8_t* NextHalf() const { return segment_.Half(rank_, round_ + 1); }
  /// Publishes round_ + 1.
  void Post();
  /// Waits until every rank has posted round_.
  void WaitAll();
  /// Post() then WaitAll(): one synchronisation round.
  void Round() {
    Post();
    WaitAll();
  }
  /// Wraps a wait predicate so that every 16th failed check yields the CPU. On a busy host the
  /// rank we wait for is often runnable but queued behind us; a pure pause-spin keeps it off the
  /// core (measured at R=2: 4 KiB AllReduce 14 us -> 4.8 us, 64 KiB 23-33 us -> 14 us).
  template <class Ready>
  static auto YieldingEvery16(Ready& ready) {
    return [&ready, checks = 0]() mutable {
      if (ready()) return true;
      if ((++checks & 15) == 0) sched_yield();
      return false;
    };
  }
  /// Waits on `word` until ready(); `peer` is the rank whose progress it needs.
  template <class Ready>
  void Await(WaitWord& word, Ready&& ready, int peer) {
    if (ready()) return;
    deadline_ = Deadline::After(timeoutSeconds_);
    if (!word.Wait(YieldingEvery16(ready), deadline_, [&] { CheckPeer(peer); }, spinIterations_)) {
      Break(ERROR_TIMEOUT, peer,
            Concat(Where(), "rank ", peer, " (pid ", pids_[peer], ") did not arrive within ",
                   timeoutSeconds_, " s (COLLOPS_TIMEOUT)"));
    }
  }
  /// Throws (and breaks the communicator) when `peer` died or any rank published an abort.
  void CheckPeer(int peer);
  bool PeerDead(int peer) const;
  /// Records the failure, publishes it to the other ranks, throws it.
  [[noreturn]] void Break(Status status, int culprit, const std::string& message);
  /// "lccl AllReduce (rank 1 of 4): "
  std::string Where() const;

  // --- process_algorithms.cpp ---
  void AllReduceOneShot(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op);
  void AllReduceRsAg(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op);
  /// Every rank contributes myBytes (bytesOf[j] for rank j) and rank j's data lands at
  /// out + offsetOf[j]; rounds of at most one half each.
  void GatherRounds(const uint8_t* in, size_t myBytes, uint8_t* out,
                    const std::vector<size_t>& bytesOf, const std::vector<size_t>& offsetOf);
  /// Largest region per destination inside one half, a multiple of 64 bytes.
  size_t RegionBytes() const;

  int rank_ = 0;
  int size_ = 0;
  Segment segment_;
  UniqueFd claim_;
  std::vector<pid_t> pids_;
  std::vector<UniqueFd> pidfds_;
  uint64_t round_ = 0;
  std::vector<uint64_t> sendMessages_, recvMessages_, sendChunks_, recvChunks_;
  double timeoutSeconds_ = 300;
  int spinIterations_ = 4000;
  const char* op_ = "";
  Deadline deadline_ = Deadline::After(0);  ///< of the current wait: COLLOPS_TIMEOUT from its start
  Status failureStatus_ = NO_ERROR;
  std::string failureMessage_;
};

}  // namespace shm
}  // namespace collops
