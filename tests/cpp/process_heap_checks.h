// What the process heap tests share: memory placed in the communicator's heap or the C++
// heap, collectives that check every byte against golden values rebuilt on each rank, the
// environments they run in, and the fixture of the collectives run for R = 2, 3 and 4.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "core/comm/shm/process_comm.h"
#include "process_ranks.h"

namespace collops {
namespace testing {

inline uint8_t ValueAt(int rank, int64_t i) {
  return static_cast<uint8_t>((rank * 37 + i * 11) % 251);
}

/// Memory of `bytes` from the communicator's heap (shared) or the C++ heap, freed on scope exit.
class Placed {
 public:
  Placed(Communicator& comm, size_t bytes, bool shared) : comm_(comm) {
    if (shared) {
      data_ = static_cast<uint8_t*>(comm.AllocateShared(bytes));
      if (data_ == nullptr) Fail(ERROR_INTERNAL_ERROR, "AllocateShared(", bytes, ") gave null");
    } else {
      own_.resize(bytes);
      data_ = own_.data();
    }
  }
  ~Placed() {
    if (own_.empty() && data_ != nullptr) comm_.FreeShared(data_);
  }
  uint8_t* data() { return data_; }

 private:
  Communicator& comm_;
  std::vector<uint8_t> own_;
  uint8_t* data_ = nullptr;
};

/// Where each rank's input and output live in one case: bit 0 of inputs / outputs for rank r
/// is (mask >> r) & 1.
struct Placement {
  unsigned inputs;
  unsigned outputs;
};

/// One AllToAllV of int8 pieces PieceCount(.., scale) with the placement; checks every byte of the
/// output, including the gaps between pieces that nobody may write. Returns the rounds it took.
uint64_t CheckedAllToAllV(shm::ProcessCommunicator& comm, int64_t scale, Placement placement);

/// `crossMemory`: whether large pieces of ordinary memory may move by process_vm_readv; off where
/// a test counts the rounds of staged pieces.
ProcessRanksOptions SmallSlots(bool crossMemory = false);

/// Heaps of 64 MiB per rank, default slots, and the environment variable `name` = `value`.
ProcessRanksOptions HeapsAnd(const std::string& name, const std::string& value);

/// Runs check(comm, scale, shared) on every rank of a `size`-rank job with 64 KiB slots, for each
/// scale and each set of ranks whose inputs are shared (bit r: rank r): none, all, rank 0 alone,
/// rank 1 alone.
void ForEachSharedInputSet(int size, const char* domain, const std::vector<int64_t>& scales,
                           const std::function<void(shm::ProcessCommunicator& comm, int64_t scale,
                                                    unsigned shared)>& check,
                           bool crossMemory = false);

/// AllReduce of `count` floats, from and into ordinary memory unless `sharedInput` /
/// `sharedOutput`: checks every element against the sum over ranks; returns the rounds it took.
uint64_t CheckedAllReduce(shm::ProcessCommunicator& comm, int64_t count, bool inPlace,
                          bool sharedInput = false, bool sharedOutput = false);

/// Expects call() to fail on this rank because COLLOPS_ALGO_<...> = `knob` forced an algorithm
/// that cannot run it: ERROR_INVALID_PARAM naming the knob and the algorithm, and `why` in the
/// message; the communicator stays usable.
void ExpectForcedFails(shm::ProcessCommunicator& comm, const std::string& knob,
                       const std::string& why, const std::function<void()>& call);

/// The collectives of the process heap tests, for R = 2, 3 and 4 ranks (instantiated in
/// process_heap_checks.cpp).
class ProcessHeapCollectives : public ::testing::TestWithParam<int> {};

}  // namespace testing
}  // namespace collops
