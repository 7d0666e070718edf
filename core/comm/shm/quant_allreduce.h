// The process engine's quantised AllReduce (Communicator::AllReduceQuantised): "oneshot" and
// "rsag" (algorithm_table.cpp), chosen per call by SelectQuantAllReduce (shm_policy.h) or forced
// by COLLOPS_ALGO_QUANTALLREDUCE. The int8 inputs go through the slots as int8; only "rsag" puts
// dequantised values there (each rank's slice of the output, once). Every rank's int8 sum is
// exact and SumDequantiseInt8 computes each output element from it the same way wherever it runs,
// so every rank gets the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "collops/reduce.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

class QuantAllReduceAlgorithms {
 public:
  explicit QuantAllReduceAlgorithms(Transport& transport) : t_(transport) {}

  void AllReduceQuantised(const int8_t* in, void* out, size_t count, const QuantScale& quant,
                          DataType outDtype);

 private:
  /// Per round of int8 whose output is one rsag chunk (at most a half): stage it, one round,
  /// every rank dequantises all R of it.
  void OneShot(const int8_t* in, uint8_t* out, size_t count, const QuantScale& quant,
               DataType outDtype);
  /// Per chunk: stage the int8 slices the others dequantise, dequantise the own slice over all
  /// ranks into the slot, copy every dequantised slice out; the round that publishes a chunk's
  /// staged slices also publishes the previous chunk's dequantised ones (K chunks, K + 1 rounds).
  void ReduceScatterAllGather(const int8_t* in, uint8_t* out, size_t count, const QuantScale& quant,
                              DataType outDtype);

  Transport& t_;
  std::vector<const int8_t*> srcs_;  ///< the dequantising sum's sources, by rank
};

}  // namespace shm
}  // namespace collops
