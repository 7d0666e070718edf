// The process engine's AllToAllV ("staged", "heap", "cma": algorithm_table.cpp). R-1 regions per
// half-slot, one per other rank; the own piece is copied locally. A piece whose receiver's output
// or sender's input lies in a heap moves directly between the heaps (PieceTables); a piece of
// ordinary memory large enough is read by its receiver from the sender's process with
// process_vm_readv. Both are learnt from the first round, and a second round keeps every buffer
// in place until all those copies are done; the staged rounds that follow carry only the other
// pieces.
#pragma once

#include <cstdint>
#include <vector>

#include "core/comm/shm/piece_tables.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

class AllToAllAlgorithms {
 public:
  explicit AllToAllAlgorithms(Transport& transport) : t_(transport), tables_(transport) {}

  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype);

 private:
  /// Which pieces of this call move by process_vm_readv: publishes, with the next round, the
  /// address of every piece of at least `from` bytes this rank sends that way (kCrossMemory flag,
  /// DirectTable at[]) and sets crossSend_. `flags` are this rank's kDirect* flags for that round.
  void PublishCross(const uint8_t* in, const int64_t* sendCounts, const int64_t* sdispls, size_t e,
                    int32_t flags, int64_t from);
  /// After that round: crossRecv_[j] for the pieces this rank reads from rank j's memory.
  bool FindCross(const int64_t* recvCounts, size_t e, int64_t from);
  /// Forced "heap": fails unless, for every pair of ranks, the sender's input or the receiver's
  /// output lies in a heap (every rank reads the same tables, so all fail alike).
  void CheckEveryPieceDirect() const;

  Transport& t_;
  PieceTables tables_;
  /// By peer: this call's piece for it, and from it, moves by process_vm_readv. Never set
  /// without Transport::CrossMemory().
  std::vector<bool> crossSend_, crossRecv_;
};

}  // namespace shm
}  // namespace collops
