// The process engine's AllGather(V) and Broadcast (algorithms "staged", "heap", "cma":
// algorithm_table.cpp). Every rank's input (Broadcast: the root's buffer) goes through its slot,
// one round per half-slot, unless its peers read it in place (PeerInputs): then two rounds, the
// second keeping it there until they have.
#pragma once

#include <cstdint>
#include <vector>

#include "core/comm/shm/peer_inputs.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

class GatherAlgorithms {
 public:
  explicit GatherAlgorithms(Transport& transport) : t_(transport), inputs_(transport) {}

  void AllGatherBytes(const void* in, void* out, size_t bytes);
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype);
  void Broadcast(void* buf, size_t count, DataType dtype, int root);

 private:
  /// Every rank contributes myBytes (bytesOf[j] for rank j) and rank j's data lands at
  /// out + offsetOf[j].
  void Gather(const uint8_t* in, size_t myBytes, uint8_t* out, const std::vector<size_t>& bytesOf,
              const std::vector<size_t>& offsetOf);
  /// The forced algorithm of `collective`, after checking that it can run: "cma" needs the probe.
  Algo ForcedAlgo(Collective collective) const;

  Transport& t_;
  PeerInputs inputs_;
  std::vector<bool> staged_;  ///< by rank: its input went through its slot
};

}  // namespace shm
}  // namespace collops
