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

class HierarchicalCommunicator final : public Communicator {
 public:
  HierarchicalCommunicator(std::shared_ptr<Communicator> flat, std::shared_ptr<Communicator> intra,
                           std::shared_ptr<Communicator> inter, HostLayout layout);

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
  void Barrier() override;
  std::shared_ptr<Communicator> Split(int color, int key) override;

 private:
  bool Leader() const { return inter_ != nullptr; }
  int HostCount() const { return static_cast<int>(ranksOn_.size()); }
  /// The leaders' part of a collective: runs only on leaders, and only when there is more than one
  /// host (with one host the inter communicator has nothing to add).
  bool AcrossHosts() const { return Leader() && HostCount() > 1; }

  std::shared_ptr<Communicator> flat_, intra_, inter_;
  int rank_, size_;
  int host_;                               ///< this rank's host index
  std::vector<int> hostOf_;                ///< host index of every rank
  std::vector<std::vector<int>> ranksOn_;  ///< global ranks of every host, ascending
  std::vector<int> localOf_;               ///< every rank's index on its host
};

/// A buffer owned by one call, not zero-filled (every byte is written before it is read).
class Scratch {
 public:
  explicit Scratch(size_t bytes) : bytes_(new uint8_t[bytes == 0 ? 1 : bytes]) {}
  uint8_t* get() { return bytes_.get(); }

 private:
  std::unique_ptr<uint8_t[]> bytes_;
};

/// Exclusive prefix sums.
std::vector<int64_t> Displacements(const std::vector<int64_t>& counts);

}  // namespace hier
}  // namespace collops
