// The Transport's failure handling: refusing calls after a failure or in a child of fork(),
// noticing dead peers and published aborts, and publishing this rank's own failure.
#include "core/comm/shm/peer_checks.h"
#include "core/comm/shm/process_rendezvous.h"
#include "core/comm/shm/rank_list.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {
namespace {

/// A rank sleeping in a wait marks every slice (20 ms); one whose latest mark is older than this
/// does not run its wait (it was stopped while sleeping in it) and ends a chain of waits.
constexpr int64_t kAwakeNanos = 1'000'000'000;

}  // namespace

void Transport::RefuseForkedChild(const char* op) const {
  Fail(ERROR_COMM_FAIL, "lccl ", op, " (rank ", rank_, " of ", size_,
       "): this communicator belongs to pid ", creatorPid_,
       ", which created it; a child of fork() cannot use it (create a new one in the child)");
}

void Transport::Enter(const char* op) {
  if (failureStatus_ != NO_ERROR) throw Error(failureStatus_, failureMessage_);
  // The peers know this rank by its creator's pid, whose memory they read and write: a forked
  // child's calls would move the parent's data or fail on addresses it does not have.
  if (InForkedChild()) RefuseForkedChild(op);
  op_ = op;
  // A peer that gave up on this communicator (its timeout, a lost rank) published an abort record:
  // without this check a rank arriving late would complete a call its peers already failed,
  // using what they posted before giving up, and the ranks would disagree on its outcome.
  ThrowIfAborted();
}

bool Transport::PeerDead(int peer) const { return ProcessExited(pidfds_[peer], pids_[peer]); }

void Transport::CheckCallOrder(int peer) {
  const uint64_t theirs = segment_.Rank(peer).waitingRound.load(std::memory_order_acquire);
  if (theirs == 0 || theirs <= round_) return;
  // The peer sleeps in a collective until this rank posts its round, and this rank waits in a
  // send or receive for the peer: neither can move again.
  Break(ERROR_RANK_MISMATCH, peer,
        Concat(Where(), "rank ", peer, " (", PidOf(peer),
               ") waits for this rank in a collective while this rank waits in ", op_,
               " with it: the ranks made their calls in different orders", kCallOrderRule));
}

void Transport::CheckPeer(int peer) {
  ThrowIfAborted();
  if (PeerDead(peer)) {
    Break(ERROR_PEER_LOST, peer, Concat(Where(), "rank ", peer, " (", PidOf(peer), ") died"));
  }
}

int Transport::EndOfWaits(int peer) const {
  const int64_t now = MonotonicNanos();
  int at = peer;
  // Values a peer wrote: a rank out of range ends the chain, and it has at most size_ links.
  for (int links = 0; links < size_; ++links) {
    const RankControl& control = segment_.Rank(at);
    const int next = control.waitingFor.load(std::memory_order_acquire);
    const int64_t awake = control.awakeAt.load(std::memory_order_relaxed);
    if (next < 0 || next >= size_ || next == at || awake > now || awake <= now - kAwakeNanos) {
      return at;
    }
    if (next == rank_) return peer;
    at = next;
  }
  return peer;
}

void Transport::BreakOnTimeout(const std::vector<int>& late) {
  // The waits of the ranks waiting on one stopped rank began within a few ms of each other and
  // end so too: a rank that timed out first published its abort record (naming the stopped
  // rank) before it left its wait, so a rank whose chain ends at a rank that left reports that.
  ThrowIfAborted();
  std::vector<int> ends;
  std::string through;
  for (int j : late) {
    const int end = EndOfWaits(j);
    if (std::find(ends.begin(), ends.end(), end) == ends.end()) ends.push_back(end);
    if (end != j && through.size() < 1024) {
      through += Concat(through.empty() ? "; this rank waits for rank " : ", and for rank ", j,
                        ", which waits for rank ", end);
    }
  }
  ThrowIfAborted();
  const std::string missing =
      ListRanks(ends, [this](int j) { return Concat(j, " (", PidOf(j), ")"); });
  Break(ERROR_TIMEOUT, ends.empty() ? -1 : ends.front(),
        Concat(Where(), "rank", ends.size() == 1 ? " " : "s ", missing, " did not arrive within ",
               timeoutSeconds_, " s (", timeoutSource_, ")", through));
}

void Transport::ThrowIfAborted() {
  const uint64_t word = segment_.Header().abort.load(std::memory_order_acquire);
  if (word != 0) {
    const AbortRecord abort = UnpackAbort(word);
    if (!AbortNamesRanks(abort, size_)) {
      // Every rank writes itself as the reporter and a rank (or -1) as the culprit: anything
      // else was written over, and names no rank to look up.
      Break(ERROR_COMM_FAIL, -1,
            Concat(Where(), "the segment's abort record (culprit ", abort.culprit, ", reporter ",
                   abort.reporter, ") names no rank of ", size_,
                   ": a process wrote over the shared memory (memory corruption?)"));
    }
    const int culprit = abort.culprit >= 0 ? abort.culprit : 0;
    const Status status = abort.status == ERROR_TIMEOUT ? ERROR_TIMEOUT : ERROR_PEER_LOST;
    if (abort.status == ERROR_RANK_MISMATCH) {  // CheckCallOrder() on the reporter
      Break(ERROR_RANK_MISMATCH, culprit,
            Concat(Where(), "rank ", abort.reporter, " (", PidOf(abort.reporter),
                   ") waits in a send or receive with rank ", culprit, " while rank ", culprit,
                   " waits for it in a collective: the ranks made their calls in different orders",
                   kCallOrderRule));
    }
    if (abort.reporter == culprit) {  // Abort(): alive, but it failed outside this communicator
      Break(status, culprit,
            Concat(Where(), "rank ", culprit, " (", PidOf(culprit),
                   ") stopped this communicator after a failure outside it (", StatusName(status),
                   ", e.g. a lost peer on another host); that rank's error says which"));
    }
    if (culprit == rank_) {  // this rank came too late for a peer that timed out
      Break(status, culprit,
            Concat(Where(), "rank ", abort.reporter, " (", PidOf(abort.reporter),
                   ") gave up waiting for this rank (", StatusName(status),
                   ") and stopped the communicator; this rank arrived after it had"));
    }
    Break(status, culprit,
          Concat(Where(), "rank ", culprit, " (", PidOf(culprit), ") ",
                 status == ERROR_TIMEOUT ? "stopped responding" : "died", " (detected by rank ",
                 abort.reporter, ")"));
  }
}

void Transport::Abort(Status status, const std::string& why) {
  // The abort record is in the segment: a child's would stop its parent's communicator.
  if (failureStatus_ != NO_ERROR || InForkedChild()) return;
  // This rank as its own culprit: how the peers tell an abort from a loss they detected.
  MarkBroken(status == ERROR_TIMEOUT ? ERROR_TIMEOUT : ERROR_PEER_LOST, rank_,
             Concat("lccl (rank ", rank_, " of ", size_, "): aborted: ", why));
}

void Transport::Break(Status status, int culprit, const std::string& message) {
  MarkBroken(status, culprit, message);
  throw Error(status, message);
}

void Transport::MarkBroken(Status status, int culprit, const std::string& message) {
  failureStatus_ = status;
  failureMessage_ = message;
  // A broken communicator never rendezvous again: free its rank's name now, so the replacement
  // the pool creates while still holding this one can claim it.
  StopReleasingInForkedChildren(claim_.Get());
  claim_.Reset();
  // Tell ranks waiting on someone else that this communicator is over; the first record wins.
  uint64_t expected = 0;
  segment_.Header().abort.compare_exchange_strong(expected, PackAbort({culprit, rank_, status}),
                                                  std::memory_order_acq_rel);
  for (int r = 0; r < size_; ++r) {
    segment_.Rank(r).word.Notify();
    segment_.Rank(r).bell.Notify();
  }
}

}  // namespace shm
}  // namespace collops
