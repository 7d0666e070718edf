// Send/Recv/Exchange of the process engine ("staged" and "cma": algorithm_table.cpp): a channel
// per ordered (src, dst) pair (PairControl).
//
// Both sides first announce (count, dtype) of message m on their own side of the channel and wait
// for the other's announcement of m; if they differ, both report the same ERROR_RANK_MISMATCH and
// the channel stays consistent (no data moved). Data then flows through the sender's slot half
// that the *next* collective round will use — nobody reads it now, and the next round is written
// only after the group returned — in a region per destination of the group (the whole half for a
// lone Send), split in two chunk buffers so the sender fills one while the receiver drains the
// other. A message that CrossMemoryMessage (shm_policy.h) gives to process_vm_readv is not
// staged: the sender announces its address with (count, dtype), and the receiver reads it whole
// straight into its buffer, one copy instead of two. The sender makes the choice (it may depend on
// what else its group does) and the receiver follows the announced address. A send completes once
// the receiver has copied everything (synchronous, like MPI_Ssend).
//
// Send and Recv are groups of one. A group never blocks on one transfer: it takes every step any
// of its transfers can take without waiting, and sleeps on its rank's bell (which every peer rings
// after each post toward it) only when none can. Transfers on one channel run in the order given,
// each announced once the one before it on that channel is done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

class PointToPointChannels {
 public:
  explicit PointToPointChannels(Transport& transport);

  /// Runs `ops` as one group (Send and Recv are groups of one), after Transport::Enter().
  void Run(const std::vector<PointToPoint>& ops);

 private:
  struct Transfer;
  /// Announces transfer t on its channel.
  void Announce(Transfer& t);
  /// Takes every step of t that needs no waiting; true when it took any. A mismatch with the
  /// peer's announcement ends t and, when it is the group's first, is described in `mismatch`.
  bool Advance(Transfer& t, const std::vector<Transfer>& group, std::string& mismatch);
  /// A staged receive: where t's chunks lie in the sender's slot, as its announcement says;
  /// breaks the transport (ERROR_COMM_FAIL naming the sender) when that is outside the slot.
  void ReceiveStaged(Transfer& t);
  /// Whether t's peer has done what t waits for (its next step would not wait).
  bool Ready(const Transfer& t) const;

  Transport& t_;
  std::vector<uint64_t> sendMessages_, recvMessages_, sendChunks_, recvChunks_;  ///< by peer
};

}  // namespace shm
}  // namespace collops
