// The communicator interface: the collective primitives that operations are built on.
//
// A Communicator is one rank's handle on a group of `Size()` ranks. Every method is blocking and
// synchronous on CPU: when it returns, the output buffers are final. Counts and displacements are
// in elements of `dtype`; count vectors have Size() entries. Methods report failure by throwing
// collops::Error (ERROR_TIMEOUT, ERROR_PEER_LOST, ERROR_RANK_MISMATCH, ERROR_COMM_FAIL, ...).
//
// A backend implements only what it can: every primitive's default throws
// ERROR_BACKEND_UNAVAILABLE with "backend <name> does not support <primitive>".
//
// Argument checking is the caller's job (operations validate counts against buffers before they
// call); backends may assume in-bounds arguments that every rank agrees on, because the caller
// has run the cross-rank agreement check (Agree(), signature.h) first.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collops/reduce.h"
#include "collops/status.h"
#include "collops/tensor.h"

namespace collops {

struct CallSignature;  // signature.h

/// One send or receive of a group run by Communicator::Exchange.
struct PointToPoint {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  void* buf = nullptr;  ///< read by a send, written by a receive
  size_t count = 0;
  DataType dtype = ACL_FLOAT;
  int peer = -1;

  static PointToPoint Send(const void* buf, size_t count, DataType dtype, int peer) {
    return {Kind::kSend, const_cast<void*>(buf), count, dtype, peer};
  }
  static PointToPoint Recv(void* buf, size_t count, DataType dtype, int peer) {
    return {Kind::kRecv, buf, count, dtype, peer};
  }
  /// A send or receive this rank refuses to make (its buffer failed this rank's own checks with
  /// `status`), run in its place so that the peer's matching op fails at once with
  /// ERROR_RANK_MISMATCH naming this rank and `status` instead of waiting for it. It announces
  /// `status` as its count and ACL_DT_UNDEFINED (no size) as its dtype, so it matches no real op
  /// and moves nothing; two refusals of one message meet without error. Every engine runs it
  /// (lccl, mpi, c10d).
  static PointToPoint Refusal(Kind kind, int peer, Status status) {
    return {kind, nullptr, static_cast<size_t>(status), ACL_DT_UNDEFINED, peer};
  }
  bool IsRefusal() const { return dtype == ACL_DT_UNDEFINED; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  /// "lccl", "mpi", "c10d", ...
  virtual std::string BackendName() const = 0;
  virtual int Rank() const = 0;
  virtual int Size() const = 0;

  /// Every rank contributes `bytes` bytes; `out` receives Size() * bytes, ordered by rank.
  /// The building block of the cross-rank signature check, so every backend must provide it.
  virtual void AllGatherBytes(const void* in, void* out, size_t bytes) = 0;

  /// out = reduce over ranks of in. `in == out` is allowed (in place).
  virtual void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op);

  /// out[rdispls[i] : +recvCounts[i]] = in of rank i (its first recvCounts[i] elements).
  /// Elements of `out` outside every received range are left untouched.
  virtual void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                          const int64_t* rdispls, DataType dtype);

  /// out[0 : recvCount] = reduce over ranks j of in_j[sdispls_j[Rank()] : +sendCounts_j[Rank()]].
  virtual void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls,
                              void* out, size_t recvCount, DataType dtype, ReduceOp op);

  /// out[rdispls[j] : +recvCounts[j]] = in_j[sdispls_j[Rank()] : +sendCounts_j[Rank()]].
  virtual void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls,
                         void* out, const int64_t* recvCounts, const int64_t* rdispls,
                         DataType dtype);
  /// AllToAllV in two halves, so the caller can run a collective on another communicator while
  /// this one moves data: StartAllToAllV begins it, FinishAllToAllV returns once it is done (and
  /// throws what it met). Until then no other call may use this communicator, `in` must stay
  /// unchanged and `out` unread. Every StartAllToAllV that returned needs its FinishAllToAllV, even
  /// when the work between them failed: the peers' transfers may still use this rank's buffers.
  /// The default runs the whole AllToAllV in Start (lccl); mpi posts nonblocking sends and
  /// receives there and c10d issues its all_to_all_single, which the hierarchical AllToAllV
  /// overlaps with its host's part.
  virtual void StartAllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls,
                              void* out, const int64_t* recvCounts, const int64_t* rdispls,
                              DataType dtype);
  virtual void FinishAllToAllV() {}

  /// buf = buf of `root`, on every rank.
  virtual void Broadcast(void* buf, size_t count, DataType dtype, int root);

  /// Quantised AllReduce where the engine has a path of its own: out[i] = (Σ_r in_r[i] +
  /// R·offset)·scale_i in `outDtype` (float16, bfloat16, float32) as SumDequantiseInt8 computes it
  /// (reduce.h), the same bits on every rank, the int8 data moving between ranks as int8.
  /// `quant` must be the same on every rank. Returns false, having done nothing, where the engine
  /// has no such path (the default): the caller then builds it from AllGatherV and AllToAllV
  /// (ops/all_reduce/quant_all_reduce.h). lccl has one in both comm modes.
  virtual bool AllReduceQuantised(const int8_t* in, void* out, size_t count,
                                  const QuantScale& quant, DataType outDtype) {
    (void)in, (void)out, (void)count, (void)quant, (void)outDtype;
    return false;
  }
  /// Whether AllReduceQuantised runs here (returns true) rather than leaving the call to its
  /// caller. Asked before any call, so an operation can size its workspace by it: the path built
  /// from the primitives needs one, the engine's own needs none. Must agree with
  /// AllReduceQuantised; the default, as its default, says no.
  virtual bool HasAllReduceQuantised() const { return false; }

  /// Point to point. A Send must meet a Recv with the same count and dtype on `peer`; when they
  /// differ both sides throw ERROR_RANK_MISMATCH naming both ranks and values.
  virtual void Send(const void* buf, size_t count, DataType dtype, int peer);
  virtual void Recv(void* buf, size_t count, DataType dtype, int peer);
  /// Sends and receives run as one group (a NCCL group of send/recv; MPI_Isend/Irecv + Waitall):
  /// returns when all are done, and no order of them deadlocks whatever groups the peers run (a
  /// ring in which every rank sends right and receives left is one group per rank). Each op
  /// meets a Send, Recv or op of a peer's group as Send/Recv would, mismatches included; messages
  /// between one ordered pair of ranks match in the order they are issued. When some op
  /// mismatches, the others still complete and then the first mismatch is thrown. A send is done
  /// only once its data needs nothing more from this rank (its receiver has it, or the engine
  /// delivers it by itself), so a rank may wait elsewhere right after. The default runs a group of
  /// one as Send or Recv and supports no other.
  virtual void Exchange(const std::vector<PointToPoint>& ops);

  /// Returns once every rank has entered.
  virtual void Barrier();

  /// The cross-rank agreement check (signature.h) of the one collective primitive this rank calls
  /// next. The default exchanges the records at once (VerifyAgreement: one AllGatherBytes). A
  /// backend may instead carry the record with the first synchronisation of that primitive and
  /// check it there (lccl does: one round less per call). Either way, ranks that disagree all
  /// throw the same ERROR_RANK_MISMATCH before any of them writes output; a record carrying
  /// failedStatus (a rank that will not make the call) is exchanged at once.
  virtual void Agree(const CallSignature& mine);

  /// Collective over every rank (as MPI_Comm_split): ranks passing the same color >= 0 form a new
  /// communicator, ranked by (key, Rank()); a rank passing a negative color takes part but gets
  /// null. Hierarchical collectives build their inter-host communicator of host leaders with it.
  virtual std::shared_ptr<Communicator> Split(int color, int key);

  /// Memory this rank's peers can reach directly (ncclMemAlloc, MPI_Alloc_mem): a collective whose
  /// input or output lies in it may move that data with one copy instead of two. Collectives
  /// accept any memory; this only makes them faster where the backend can use it (lccl between
  /// processes: a heap in its shared segment, COLLOPS_SHM_HEAP_BYTES). At least `bytes` bytes,
  /// 64-byte aligned, not initialised (as malloc's: memory this rank freed may come back with
  /// what it wrote there); nullptr when the backend has no such memory or no room left, and the
  /// caller then uses ordinary memory. Valid until FreeShared() or the communicator's end. Throws
  /// where this process may not use the communicator at all (lccl: a child of fork(), whose
  /// allocations would be its parent's memory: ERROR_COMM_FAIL, as its calls).
  virtual void* AllocateShared(size_t bytes);
  /// Returns AllocateShared() memory; false when `p` did not come from this communicator.
  virtual bool FreeShared(void* p);

  /// Lets the engine move data it has queued, without blocking. OpenMPI over TCP progresses only
  /// inside MPI calls, so a message a rank sent just before it went to wait elsewhere (in lccl)
  /// may sit in its queue while the receiver waits for it (mpi: one MPI_Iprobe). The default
  /// does nothing: engines that progress on their own threads (gloo) or finish every transfer
  /// inside the call (lccl) have nothing to drive.
  virtual void Progress() {}

  /// `hook` runs on the waiting thread each time one of this communicator's waits has slept a
  /// slice (lccl: 20 ms) and the peer has still not come; an empty hook removes it. The
  /// hierarchical communicator installs its engine's Progress() on its lccl communicator, so a
  /// rank waiting inside its host keeps its cross-host messages moving. Set it before the
  /// communicator is in use. The default ignores it (backends whose waits are their engine's own
  /// progress loop).
  virtual void SetIdleHook(std::function<void()> hook) { (void)hook; }

  /// True once the communicator has failed for good (timeout, lost peer): every later call
  /// throws the same error, and the pool replaces it on the next Get().
  virtual bool Broken() const { return false; }

  /// Breaks this communicator for good on every rank, as a lost peer would, without throwing:
  /// the peers' waits end with `status` naming this rank, and every later call fails. A
  /// communicator built from others calls it on the healthy ones when one fails, so ranks waiting
  /// there for this one stop at once instead of at their timeout. The default does nothing.
  virtual void Abort(Status status, const std::string& why) {
    (void)status;
    (void)why;
  }

  /// `hook(status, message)` runs when this communicator breaks for good (a lost peer or a
  /// timeout), before the call that found it throws. The hierarchical communicator aborts its
  /// lccl communicator from its engine's hook. The default ignores it (lccl reports to its own
  /// peers through shared memory).
  virtual void SetFailureHook(std::function<void(Status, const std::string&)> hook) { (void)hook; }

 protected:
  /// Throws ERROR_BACKEND_UNAVAILABLE: "backend <BackendName()> does not support <what>".
  [[noreturn]] void Unsupported(const char* what) const;

 private:
  friend class ExclusiveUse;
  /// 0 free, 1 held by an ExclusiveUse, 2 held while another thread tried to enter.
  std::atomic<int> use_{0};
};

/// One thread's use of a communicator for one call (OperationBase holds one around each). A
/// rank is one sequence of calls, as with a NCCL communicator or an MPI_Comm: two threads of a
/// rank calling on it at once would each meet some peer's call, in an order the peers need not
/// share, and ops of one commDomain share a communicator. So a second thread entering while
/// another is inside throws ERROR_COMM_FAIL at once, and the thread inside, whose call the peers
/// may have paired with the other thread's, aborts the communicator for every rank when it is
/// done (Finish) instead of returning a result nobody can trust. Use it from one thread.
class ExclusiveUse {
 public:
  /// `caller` names the caller in messages ("AllReduceOperation"); it must outlive this.
  ExclusiveUse(Communicator& comm, const std::string& caller);
  ~ExclusiveUse();
  ExclusiveUse(const ExclusiveUse&) = delete;
  ExclusiveUse& operator=(const ExclusiveUse&) = delete;

  /// After a call that returned normally: throws ERROR_COMM_FAIL, after aborting the
  /// communicator, when another thread tried to enter during it.
  void Finish();

 private:
  Communicator& comm_;
  const std::string& caller_;
};

/// For each op of an Exchange group, the index of the op before it on the same channel (same
/// kind, same peer), or -1: backends start an op only once that one is done, so messages between
/// one ordered pair match in the order issued.
std::vector<int> PreviousOnChannel(const std::vector<PointToPoint>& ops);

/// The ERROR_RANK_MISMATCH text every backend gives both sides of a Send/Recv pair that disagree:
/// "<backend> Send/Recv: rank S sends N elements of T to rank R, which expects M elements of U
/// from rank S". When one side is a PointToPoint::Refusal (type ACL_DT_UNDEFINED, the count its
/// Status), the text says that that rank refused the send or receive, with the Status' name.
std::string SendRecvMismatchMessage(const std::string& backend, int sender, int64_t sendCount,
                                    int64_t sendType, int receiver, int64_t recvCount,
                                    int64_t recvType);
/// Whether `message` holds a SendRecvMismatchMessage (a wrapper may have added to it).
bool IsSendRecvMismatchMessage(const std::string& message);

}  // namespace collops
