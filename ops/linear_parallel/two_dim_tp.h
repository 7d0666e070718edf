// AG_LINEAR_RS, ATB's 2-D tensor parallel linear layer: the agDim x rsDim grid of ranks that
// LinearParallelTwoDimTPInfo describes (linear_parallel_param.h has the definition), its rules,
// and the AllGather - product - ReduceScatter over that grid.
//
// The two collectives run within groups of the grid, over the op's one communicator: each is an
// AllToAllV in which a rank sends only to the members of its group (every engine has AllToAllV;
// lccl has no sub-communicators), so a rank moves the bytes a collective of its group alone
// would. The ReduceScatter's blocks move in the product's dtype (y's) and are summed by their
// receiver in rsIdx order (float16/bfloat16 accumulate in float32 and round once).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "collops/communicator.h"
#include "ops/linear_parallel/linear_parallel_param.h"

namespace collops {

/// Rank r's place in the grid: its AllGather index agIdx (its position within its AllGather
/// group) and its ReduceScatter index rsIdx. innerDimIsAg = 1: r = rsIdx * agDim + agIdx;
/// 0: r = agIdx * rsDim + rsIdx.
class TwoDimGrid {
 public:
  explicit TwoDimGrid(const LinearParallelTwoDimTPInfo& info)
      : agDim(info.agDim), rsDim(info.rsDim), innerIsAg(info.innerDimIsAg != 0) {}
  int AgIndex(int rank) const { return innerIsAg ? rank % agDim : rank / rsDim; }
  int RsIndex(int rank) const { return innerIsAg ? rank / agDim : rank % rsDim; }
  int RankAt(int agIdx, int rsIdx) const {
    return innerIsAg ? rsIdx * agDim + agIdx : agIdx * rsDim + rsIdx;
  }

  int agDim;
  int rsDim;
  bool innerIsAg;
};

/// Throws ERROR_INVALID_PARAM naming the field unless agDim >= 1, rsDim >= 1, agDim * rsDim =
/// rankSize and innerDimIsAg is 0 or 1. `op` starts the message.
void ValidateTwoDimTPInfo(const std::string& op, const LinearParallelTwoDimTPInfo& info,
                          int rankSize);

/// Where one AG_LINEAR_RS call reads and writes. x [rows, k] of `dtype`; `gathered` holds
/// agDim * rows rows of k (unused when agDim = 1: x is the gathered x); `product` agDim * rows
/// rows of n of `productDtype`; `received` the rsDim blocks of agDim * rows / rsDim rows of n that
/// this rank's ReduceScatter group sends it (unused when rsDim = 1: the product is the block, and
/// `product` is y itself); y this rank's block, of `productDtype`.
struct AgLinearRsCall {
  const void* x = nullptr;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t n = 0;
  DataType dtype = ACL_FLOAT;
  DataType productDtype = ACL_FLOAT;
  void* gathered = nullptr;
  void* product = nullptr;
  void* received = nullptr;
  void* y = nullptr;
};

/// Runs the gather, `multiply(rowsOfX, count, out)` of the gathered rows into the product, the
/// exchange of its blocks and their sum into y, then `finish(count)` on y's count rows (the
/// residual). A failure of multiply, the sum or finish runs `abandon` (which breaks the
/// communicator for the peers still waiting) before it is rethrown.
void RunAgLinearRs(const TwoDimGrid& grid, Communicator& comm, const AgLinearRsCall& call,
                   const std::function<void(const void*, int64_t, void*)>& multiply,
                   const std::function<void(int64_t)>& finish,
                   const std::function<void(const Error&)>& abandon);

}  // namespace collops
