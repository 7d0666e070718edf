// The process engine's AllReduce: "oneshot", "rsag", "cma" and "heap" (algorithm_table.cpp),
// chosen per call by SelectAllReduce (shm_policy.h) or forced by COLLOPS_ALGO_ALLREDUCE. Every
// input of the choice is the same on every rank (the counts and dtype by the agreement check, the
// rest from the segment), so all ranks take the same path. Reductions fold the ranks in order
// 0..R-1 with ReduceArrays, so every rank computes bit-identical results.
#pragma once

#include <cstdint>
#include <vector>

#include "collops/reduce.h"
#include "core/comm/shm/peer_inputs.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

class AllReduceAlgorithms {
 public:
  explicit AllReduceAlgorithms(Transport& transport) : t_(transport), inputs_(transport) {}

  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op);

 private:
  /// Copy in, one round (per half-full), every rank reduces all R inputs.
  void OneShot(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op,
               bool mayTakeHeap);
  /// Reduce-scatter and all-gather pipelined over chunks: one round per chunk and one more, each
  /// publishing a chunk's staged slices with the previous chunk's reduced ones.
  void ReduceScatterAllGather(const uint8_t* in, uint8_t* out, size_t count, DataType dtype,
                              ReduceOp op, bool mayTakeHeap);
  /// Each rank reduces its slice from the peers' inputs by process_vm_readv and writes it into
  /// their outputs by process_vm_writev.
  void CrossMemory(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op,
                   bool mayTakeHeap);
  /// "heap" forced: its own first round, then InHeaps; fails when some rank's buffers are not in
  /// its heap.
  void Heap(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op);
  /// The heap algorithm after a first round that found every rank's buffers in its heap (two
  /// more rounds).
  void InHeaps(const uint8_t* in, uint8_t* out, size_t count, DataType dtype, ReduceOp op);
  /// With the first round of an algorithm that may continue in the heaps: publishes whether this
  /// rank's input and output of `bytes` both lie in its heap (kHeapBuffers, DirectTable from[0],
  /// to[0], from[1]); returns that.
  bool PublishHeapBuffers(const uint8_t* in, const uint8_t* out, size_t bytes);
  /// After that round: heapInput_[r] and heapOutput_[r] are rank r's published buffers (null
  /// where it published none); true when every rank published both for a call of `bytes`. Every
  /// rank reads the same tables, so all take the same path. `missing`, when given, receives the
  /// first rank that published none.
  bool FindHeapBuffers(size_t bytes, int* missing = nullptr);

  Transport& t_;
  PeerInputs inputs_;
  std::vector<const uint8_t*> heapInput_;  ///< by rank (FindHeapBuffers)
  std::vector<uint8_t*> heapOutput_;
  std::vector<const void*> srcs_;  ///< ReduceArrays' sources, by rank
};

}  // namespace shm
}  // namespace collops
