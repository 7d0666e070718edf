// The hierarchical communicator (algorithms: collops/hierarchical_communicator.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "collops/topology.h"

namespace collops {
namespace hier {

/// Scratch buffers kept across calls, one per slot, each as large as the largest request so far,
/// not zero-filled (every byte is written before it is read). A call's own large allocation is
/// mmap'ed and unmapped by malloc every time, so each call would fault in every page again, which
/// costs more than the data movement of a large AllToAllV (six buffers). The price is memory held
/// for the communicator's life: at 2 x 2 a leader keeps 4.5x the per-rank data of the largest
/// AllToAllV. Calls on one communicator are serial (collectives run in the same order everywhere).
///
/// Buffers come from the host communicator's shared heap (AllocateShared) where it has room, so
/// the host's collectives read them in place instead of staging them; else from new[].
class ScratchPool {
 public:
  /// `heap`: where to take buffers from first (may be null); must outlive the pool.
  explicit ScratchPool(Communicator* heap = nullptr) : heap_(heap) {}
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  /// Room for at least `bytes` in `slot`; the pointer stays valid until the next Get of `slot`.
  uint8_t* Get(size_t slot, size_t bytes);

 private:
  struct Buffer {
    uint8_t* data = nullptr;
    size_t bytes = 0;
    bool shared = false;  ///< from heap_
  };
  void Release(Buffer& buffer);

  Communicator* heap_;
  std::vector<Buffer> buffers_;
};

/// One buffer of one call, borrowed from a pool slot.
class Scratch {
 public:
  Scratch(ScratchPool& pool, size_t slot, size_t bytes) : bytes_(pool.Get(slot, bytes)) {}
  uint8_t* get() { return bytes_; }

 private:
  uint8_t* bytes_;
};

class HierarchicalCommunicator final : public Communicator {
 public:
  HierarchicalCommunicator(std::shared_ptr<Communicator> flat, std::shared_ptr<Communicator> intra,
                           std::shared_ptr<Communicator> rail, HostLayout layout);

  std::string BackendName() const override;
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  bool Broken() const override;

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
  /// The default exchange (one hierarchical AllGatherBytes), keeping the records until the next
  /// primitive: they hold every rank's counts, which AllToAllV would otherwise gather again
  /// across the hosts (at 2 hosts x 2 ranks, 4 KiB: a third of the call).
  void Agree(const CallSignature& mine) override;
  std::shared_ptr<Communicator> Split(int color, int key) override;

 private:
  bool Leader() const { return localOf_[rank_] == 0; }
  /// Every primitive starts here: forgets the last Agree()'s records and throws ERROR_COMM_FAIL
  /// once any part has broken, so no rank of this host starts a call its peers cannot finish.
  void CheckUsable(const char* primitive);
  /// CheckUsable's check alone, for AllToAllV, which reads the records of the Agree() before it.
  void ThrowIfBroken(const char* primitive) const;
  int HostCount() const { return static_cast<int>(ranksOn_.size()); }
  /// The leaders' part of a collective: runs only on leaders, and only when there is more than one
  /// host (with one host the leaders' rail has nothing to add).
  bool AcrossHosts() const { return Leader() && HostCount() > 1; }
  /// AllReduce with every rail carrying its block between hosts (a uniform layout of more than one
  /// rank per host); the leaders' scheme otherwise.
  void AllReduceOnRails(const void* in, void* out, size_t count, DataType dtype, ReduceOp op);
  /// In place: data = reduce of data over this rank's rail.
  void ReduceOnRail(void* data, size_t count, DataType dtype, ReduceOp op);
  /// counts[j * R + i] = elements rank j sends to rank i, from the records of the Agree() that
  /// preceded this AllToAllV; false (and nothing read) when none did. Every rank of a call takes
  /// the same branch: all ran that Agree, or none. Forgets the records either way.
  bool TakeAgreedCounts(const int64_t* sendCounts, const int64_t* recvCounts,
                        std::vector<int64_t>& counts);

  /// rail_: this rank's rail (the ranks at its local index, one per host); on leaders, the
  /// leaders' communicator.
  std::shared_ptr<Communicator> flat_, intra_, rail_;
  bool railsCarryAllReduce_ = false;  ///< every host holds the same number (> 1) of ranks
  int rank_, size_;
  int host_;                               ///< this rank's host index
  std::vector<int> hostOf_;                ///< host index of every rank
  std::vector<std::vector<int>> ranksOn_;  ///< global ranks of every host, ascending
  std::vector<int> localOf_;               ///< every rank's index on its host
  /// The calls' buffers; slots are per call, by role. Drawn from intra_'s heap, so declared
  /// after intra_ (destroyed before it).
  std::unique_ptr<ScratchPool> scratch_;
  /// Records of the last Agree() whose signature carried counts; every primitive but AllToAllV
  /// clears them, so a raw AllToAllV (no Agree) never reads a stale matrix.
  std::vector<uint8_t> agreed_;
};

/// Exclusive prefix sums.
std::vector<int64_t> Displacements(const std::vector<int64_t>& counts);

}  // namespace hier
}  // namespace collops
