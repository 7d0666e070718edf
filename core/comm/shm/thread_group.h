// ThreadGroup: the state shared by the ranks of one multi-thread lccl communicator (commMode 1),
// plus the process-global rendezvous that forms it.
//
// Ranks are threads of one process, so data never needs to pass through a shared buffer: before a
// collective each rank publishes its buffer pointers in its own cache-line-separated Slot, every
// rank meets at a Sync, each rank then reads what it needs straight out of the peers' buffers, and
// a final Sync keeps every peer's buffers alive and unchanged until all readers are done.
//
// Every wait is bounded by CommTimeoutSeconds(). A wait that gives up marks the group broken with
// an ERROR_TIMEOUT naming the ranks that had not arrived; from then on every call on every rank's
// handle throws that same error at once, and waiters already asleep are woken to throw it too.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/comm_params.h"
#include "collops/status.h"
#include "collops/tensor.h"
#include "core/comm/shm/rank_list.h"
#include "core/comm/shm/wait_word.h"

namespace collops {
namespace shm {

constexpr size_t kCacheLine = 64;

/// What one rank publishes for the collective it is in. Written only by its owner before the
/// collective's first Sync, read by peers only between that Sync and the last one.
struct alignas(kCacheLine) RankSlot {
  const void* in = nullptr;
  void* out = nullptr;
  const int64_t* sendCounts = nullptr;  ///< per-peer counts and displacements (V collectives)
  const int64_t* sdispls = nullptr;
  const int64_t* recvCounts = nullptr;
  /// The scalars every rank must agree on, published so that every rank can run the same check
  /// on the same data and fail identically (ERROR_RANK_MISMATCH) instead of over-reading.
  int64_t count = 0;
  DataType dtype = ACL_DT_UNDEFINED;
  int32_t op = 0;  ///< ReduceOp, or the root rank for Broadcast
  /// Sync points this rank has entered; tells a timed-out waiter who is missing.
  std::atomic<uint64_t> syncs{0};
  /// This rank sleeps here while it waits for one peer (Send/Recv), so wakes are targeted.
  WaitWord word;
  /// The CPU this rank last waited on: a waiter that finds another rank there yields instead of
  /// spinning (SpinThenYield).
  std::atomic<int32_t> cpu{-1};
  /// Run by this rank's waits after each sleep slice (Communicator::SetIdleHook). Only this
  /// rank's thread touches it.
  std::function<void()> idle;
  /// Where this rank is blocked, so that a peer that times out waiting for it can say why it did
  /// not come (ThreadGroup::Whereabouts): the Sync point or "Send"/"Recv" (a string that lives for
  /// the process), and the Send/Recv peer (-1 otherwise). Set by WaitingMark.
  std::atomic<const char*> waitingIn{nullptr};
  std::atomic<int32_t> waitingPeer{-1};
};

/// Marks `slot` as blocked in `what` (with `peer`, for a Send or Recv) for its lifetime.
class WaitingMark {
 public:
  WaitingMark(RankSlot& slot, const char* what, int peer = -1) : slot_(slot) {
    slot_.waitingPeer.store(peer, std::memory_order_relaxed);
    // Release: the reader (Whereabouts, acquire) then sees the text an InternedName was made of.
    slot_.waitingIn.store(what, std::memory_order_release);
  }
  ~WaitingMark() { slot_.waitingIn.store(nullptr, std::memory_order_relaxed); }
  WaitingMark(const WaitingMark&) = delete;
  WaitingMark& operator=(const WaitingMark&) = delete;

 private:
  RankSlot& slot_;
};

/// `name` in storage that lives as long as the process, for RankSlot::waitingIn.
const char* InternedName(const std::string& name);

/// One direction (src -> dst) of a point-to-point pair. The sender posts message k by filling the
/// message fields and raising `posted` to k; the receiver copies straight from `buf`, records its
/// verdict and raises `taken` to k, after which the sender may return and reuse `buf`.
struct alignas(kCacheLine) Channel {
  std::atomic<uint64_t> posted{0};
  std::atomic<uint64_t> taken{0};
  const void* buf = nullptr;  ///< valid while posted > taken
  size_t count = 0;
  DataType dtype = ACL_DT_UNDEFINED;
  size_t recvCount = 0;  ///< what the receiver expected; valid once taken == posted
  DataType recvDtype = ACL_DT_UNDEFINED;
};

class ThreadGroup {
 public:
  ThreadGroup(std::string domain, int size);
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  const std::string& domain() const { return domain_; }
  int size() const { return size_; }
  /// "lccl thread group 'dom' (4 ranks)": the prefix of every message about this group.
  std::string Describe() const;

  RankSlot& slot(int rank) { return slots_[rank]; }
  Channel& channel(int src, int dst) { return channels_[src * size_ + dst]; }

  /// Blocks until every rank has entered this sync point (the k-th Sync of each rank). `what`
  /// names the call for the timeout message and must live as long as the process (a literal or
  /// InternedName). Throws the broken error, or ERROR_TIMEOUT.
  void Sync(int rank, const char* what);
  /// "; rank 0 is waiting in Send to rank 1" for each of `ranks` blocked in a call of this group,
  /// "" for the others: appended to a timeout message, it tells calls issued in different orders
  /// apart from a rank that is busy elsewhere.
  std::string Whereabouts(const std::vector<int>& ranks) const;

  bool Broken() const { return broken_.load(std::memory_order_acquire); }
  /// Throws the error that broke the group, if any.
  void ThrowIfBroken() const;
  /// Marks the group broken with (status, message) unless it already is, and wakes every waiter.
  void Break(Status status, const std::string& message);
  /// Break, then throws the error that broke the group (the first one wins).
  [[noreturn]] void BreakAndThrow(Status status, const std::string& message);
  /// For a rank that failed while its peers may still read its buffers: takes part in the next
  /// Sync, whose opening breaks the group with (status, message) unless it broke already, then
  /// throws. Every rank leaves that Sync with the error, and this rank's caller gets control back
  /// (and may free its buffers) only after every peer has left the phase that reads them.
  [[noreturn]] void SyncThenBreak(int rank, const char* what, Status status,
                                  const std::string& message);

  /// Waits, as rank `rank`, on `word` until ready() or the group breaks: spins, then yields
  /// (WaitBudget::Default), then sleeps. Returns 0 once ready(), or the timeout in seconds
  /// (COLLOPS_TIMEOUT, read now) when it passed first, for the caller's message. Throws the broken
  /// error when the group breaks while waiting.
  template <class Ready>
  double WaitFor(WaitWord& word, Ready&& ready, int rank) {
    if (ready()) return 0;  // the common case pays for neither the clock nor getenv
    auto done = [&] { return ready() || Broken(); };
    bool ok = SpinThenYield(done, budget_, [&](int cpu) {
      slots_[rank].cpu.store(cpu, std::memory_order_relaxed);
      for (int r = 0; r < size_; ++r) {
        if (r != rank && slots_[r].cpu.load(std::memory_order_relaxed) == cpu) return true;
      }
      return false;
    });
    double timeout = 0;
    if (!ok) {
      timeout = CommTimeoutSeconds();
      const std::function<void()>& idle = slots_[rank].idle;
      ok = word.Wait(done, Deadline::After(timeout), [&] {
        if (idle) idle();
      });
    }
    ThrowIfBroken();
    return ok ? 0 : timeout;
  }

  /// Joins (or starts forming) the group for `param` and blocks until all its ranks have joined.
  /// rankSize above kMaxLcclRanks is ERROR_INVALID_PARAM before anything is allocated. A second
  /// thread claiming a rank of a forming group gets ERROR_INVALID_PARAM, and the ranks already
  /// waiting in that group ERROR_RANK_MISMATCH at once (the group cannot form as meant).
  static std::shared_ptr<ThreadGroup> Join(const CommParam& param);

 private:
  void WakeAll();

  const std::string domain_;
  const int size_;
  /// Spinning only helps while the awaited peer can run on another CPU: with more ranks than
  /// usable CPUs a spinner mostly delays the very peer it waits for, so it yields at once.
  const WaitBudget budget_;
  std::vector<RankSlot> slots_;
  std::vector<Channel> channels_;

  // Sync: `arrivals_` counts every rank's entries into every sync point; the rank that makes it
  // k * size_ opens sync point k by raising `generation_` to k. Both are monotonic, so no sense
  // reversal is needed, and they sit on separate lines so spinning readers of `generation_` do not
  // fight the arrivals' read-modify-writes.
  alignas(kCacheLine) std::atomic<uint64_t> arrivals_{0};
  alignas(kCacheLine) std::atomic<uint64_t> generation_{0};
  WaitWord syncWord_;

  // Rendezvous state; `claimed_` is guarded by the registry's mutex.
  alignas(kCacheLine) std::atomic<int> joined_{0};
  std::vector<bool> claimed_;
  WaitWord joinWord_;

  std::atomic<bool> broken_{false};
  mutable std::mutex brokenMutex_;
  Status brokenStatus_ = NO_ERROR;
  std::string brokenMessage_;
  /// SyncThenBreak's error, applied by the Sync's last arriver before it opens the sync point.
  std::atomic<bool> pendingBreak_{false};
  Status pendingStatus_ = NO_ERROR;  ///< guarded by brokenMutex_
  std::string pendingMessage_;       ///< guarded by brokenMutex_
};

/// "5 s", "0.5 s".
std::string FormatSeconds(double seconds);

}  // namespace shm
}  // namespace collops
