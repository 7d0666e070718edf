// MpiCommunicator: backend "mpi" — one rank's handle on an MPI communicator. Internal header;
// users reach it through CreateCommunicator() (backend "mpi") or MakeMpiCommunicator()
// (collops/mpi_communicator.h).
//
// Every primitive is one MPI collective where MPI has it (MPI_Allreduce, MPI_Allgatherv,
// MPI_Reduce_scatter, MPI_Alltoallv, MPI_Bcast, MPI_Barrier, MPI_Comm_split). Counts or
// displacements beyond MaxCount() (INT_MAX) take chunked paths instead of being truncated.
// float16/bfloat16 sums and products are the exception (InRankOrder, mpi_types.h): each rank
// folds its share of the elements over all ranks' inputs in rank order itself.
// Send/Recv/Exchange first swap a (count, dtype) header with each peer so a mismatch fails on both
// sides; a group's ops all run nonblocking and complete together (MPI_Waitall).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collops/communicator.h"

namespace collops {
namespace mpi {

class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` (a communicator the library made, MPI_ERRORS_RETURN set on it):
  /// it is freed by the destructor unless MPI has been finalised by then.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string BackendName() const override { return "mpi"; }
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  MPI_Comm Handle() const { return comm_; }

  void AllGatherBytes(const void* in, void* out, size_t bytes) override;
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype) override;
  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op) override;
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override;
  /// Copies this rank's own piece and posts the others as nonblocking sends and receives into
  /// started_; Finish waits for them.
  void StartAllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override;
  void FinishAllToAllV() override;
  void Broadcast(void* buf, size_t count, DataType dtype, int root) override;
  void Send(const void* buf, size_t count, DataType dtype, int peer) override;
  void Recv(void* buf, size_t count, DataType dtype, int peer) override;
  void Exchange(const std::vector<PointToPoint>& ops) override;
  void Barrier() override;
  std::shared_ptr<Communicator> Split(int color, int key) override;
  /// One MPI_Iprobe, which runs OpenMPI's progress engine for every communicator; skipped when
  /// another thread is inside MPI (it progresses) or MPI has been finalised.
  void Progress() override;

 private:
  // The unlocked bodies (public methods take the serialisation lock, then call these).
  void GatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
               const int64_t* rdispls, DataType dtype);
  /// ReduceScatterV for InRankOrder reductions: every rank's range for rank j goes to rank j
  /// (chunked point to point, as AllToAllV), which folds the ranges in rank order with
  /// ReduceArrays (float32 accumulation, one rounding) into `out`: lccl's fold, so the bits are
  /// lccl's. `out` may overlap `in`; it is written only once every piece has arrived.
  void ReduceScatterInRankOrder(const void* in, const int64_t* sendCounts, const int64_t* sdispls,
                                void* out, DataType dtype, ReduceOp op);
  /// The ops of one group (Send and Recv are groups of one), under the serialisation lock.
  void RunGroup(const std::vector<PointToPoint>& ops);
  void CheckPeer(int peer, const char* role) const;

  MPI_Comm comm_;
  bool allToAllVStarted_ = false;
  std::vector<MPI_Request> started_;  ///< the pieces of a started AllToAllV
  int rank_ = 0;
  int size_ = 0;
};

/// Wraps a communicator the library made; sets MPI_ERRORS_RETURN on it first.
std::shared_ptr<Communicator> WrapOwnedComm(MPI_Comm comm);

}  // namespace mpi
}  // namespace collops
