// The process engine's ReduceScatterV ("staged" and "heap": algorithm_table.cpp). Each half-slot
// is cut into R-1 regions, one per other rank (a rank's own piece never goes through shared
// memory, so it gets no region); each rank reduces its region of every rank, its own piece read
// in place. Pieces of a heap input are reduced in place by their receivers (PieceTables).
#pragma once

#include <cstdint>
#include <vector>

#include "collops/reduce.h"
#include "core/comm/shm/piece_tables.h"
#include "core/comm/shm/transport.h"

namespace collops {
namespace shm {

class ReduceScatterAlgorithms {
 public:
  explicit ReduceScatterAlgorithms(Transport& transport) : t_(transport), tables_(transport) {}

  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op);

 private:
  Transport& t_;
  PieceTables tables_;
  std::vector<const void*> srcs_;  ///< ReduceArrays' sources, by rank
};

}  // namespace shm
}  // namespace collops
