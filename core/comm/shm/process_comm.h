// ProcessCommunicator: backend "lccl", commMode 0 — ranks are separate processes of one host that
// share a memfd segment. Internal header; users reach it through CreateCommunicator().
//
// It is the Communicator face of the engine: every call enters the Transport (transport.h: the
// segment, rounds, waits, liveness, the peers' buffers) and runs the algorithms of its collective,
// each family in a file of its own (allreduce.h, gather.h, reduce_scatter.h, alltoallv.h, p2p.h,
// quant_allreduce.h; the table of them: algorithm_table.cpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/signature.h"
#include "collops/status.h"
#include "core/comm/shm/allreduce.h"
#include "core/comm/shm/alltoallv.h"
#include "core/comm/shm/gather.h"
#include "core/comm/shm/p2p.h"
#include "core/comm/shm/quant_allreduce.h"
#include "core/comm/shm/reduce_scatter.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

class ProcessCommunicator final : public Communicator {
 public:
  /// Rendezvous with the other ranks of (job key, param.commDomain, param.rankSize); blocks up to
  /// COLLOPS_TIMEOUT seconds. Throws Error (see Rendezvous()).
  explicit ProcessCommunicator(const CommParam& param);

  std::string BackendName() const override { return "lccl"; }
  int Rank() const override { return transport_.Rank(); }
  int Size() const override { return transport_.Size(); }

  void AllGatherBytes(const void* in, void* out, size_t bytes) override;
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype) override;
  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op) override;
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override;
  void Broadcast(void* buf, size_t count, DataType dtype, int root) override;
  /// Always runs it (quant_allreduce.h): returns true.
  bool AllReduceQuantised(const int8_t* in, void* out, size_t count, const QuantScale& quant,
                          DataType outDtype) override;
  bool HasAllReduceQuantised() const override { return true; }
  void Send(const void* buf, size_t count, DataType dtype, int peer) override;
  void Recv(void* buf, size_t count, DataType dtype, int peer) override;
  void Exchange(const std::vector<PointToPoint>& ops) override;
  void Barrier() override;
  void Agree(const CallSignature& mine) override;
  bool Broken() const override { return transport_.Broken(); }
  /// From this rank's heap in the segment (process_heap.h); nullptr when COLLOPS_SHM_HEAP_BYTES
  /// is 0, R > 64, or the heap has no room. In a child of fork(): ERROR_COMM_FAIL, as any call.
  void* AllocateShared(size_t bytes) override { return transport_.AllocateShared(bytes); }
  /// In a child of fork(): does nothing (the pages are the parent's; process_heap.h).
  bool FreeShared(void* p) override { return transport_.Heap().Free(p); }
  void SetIdleHook(std::function<void()> hook) override { transport_.SetIdleHook(std::move(hook)); }
  void Abort(Status status, const std::string& why) override { transport_.Abort(status, why); }

  /// The pid of every rank, by rank (tests and messages).
  const std::vector<pid_t>& Pids() const { return transport_.Pids(); }
  std::string PidOf(int rank) const { return transport_.PidOf(rank); }
  /// Whether large pieces may move by process_vm_readv/writev (the creation probe's verdict).
  bool CrossMemory() const { return transport_.CrossMemory(); }
  /// Synchronisation rounds this rank has completed (tests count the rounds a call costs).
  uint64_t Rounds() const { return transport_.Rounds(); }
  /// Bytes of this rank's heap handed out by AllocateShared (tests).
  uint64_t SharedBytes() const { return transport_.Heap().AllocatedBytes(); }
  /// The shared segment (tests write into it as a peer that scribbles on it would).
  const Segment& SharedSegment() const { return transport_.SharedSegment(); }

 private:
  Transport transport_;
  AllReduceAlgorithms allReduce_{transport_};
  GatherAlgorithms gather_{transport_};
  ReduceScatterAlgorithms reduceScatter_{transport_};
  AllToAllAlgorithms allToAll_{transport_};
  QuantAllReduceAlgorithms quantAllReduce_{transport_};
  PointToPointChannels channels_{transport_};
};

}  // namespace shm
}  // namespace collops
