// AllToAllVPlan: the part AllToAllVOperation (counts as params), AllToAllVV2Operation (counts as
// host tensors) and AllToAllOperation (equal counts) share, so the rules and the call into the
// communicator exist once.
//
// Rank r's output is y.flat[rdispls[j] : +recvCounts[j]] = x_j.flat[sdispls_j[r] :
// +sendCounts_j[r]] for every source rank j. The receive ranges must tile y = [1, sum(recvCounts)]
// exactly: each lies inside y and no two overlap (zero-length ranges excepted). Since their lengths
// add up to y's size, that means every element of y is written exactly once, so y needs no zeroing
// and no element depends on the order in which peers are copied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "collops/signature.h"
#include "collops/tensor.h"

namespace collops {

struct AllToAllVPlan {
  std::vector<int64_t> sendCounts;  ///< elements sent to rank j
  std::vector<int64_t> sdispls;     ///< where in x.flat the block for rank j starts
  std::vector<int64_t> recvCounts;  ///< elements received from rank j
  std::vector<int64_t> rdispls;     ///< where in y.flat the block from rank j lands

  /// Every rank sends and receives `chunk` elements, blocks packed in rank order.
  static AllToAllVPlan Uniform(int rankSize, int64_t chunk);

  /// sum(recvCounts), the element count of y; the caller validated the vectors.
  int64_t RecvTotal() const;

  /// The rules that need no tensor: each vector has rankSize entries, every entry >= 0,
  /// sum(recvCounts) > 0 (y is sized by it) and the receive ranges tile y. Throws
  /// Error(ERROR_INVALID_PARAM) naming `where` (op and rank), the field, the index and the value.
  void Validate(const std::string& where, int rankSize) const;

  /// What this rank sends to and expects from every peer, for the cross-rank agreement check.
  CallSignature Signature(const std::string& opName, DataType dtype) const;

  /// Runs the exchange. `in` and `out` hold the ranges this plan names (validated by the caller).
  void Run(Communicator& comm, const void* in, void* out, DataType dtype) const;
};

}  // namespace collops
