#pragma once

#include <cstdint>
#include <vector>

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of AllToAllVOperation (ATB's AllToAllVParam). Counts and displacements are in elements
/// and have rankSize entries each, all required.
struct AllToAllVParam : CommParam {
  std::vector<int64_t> sendCounts;  ///< elements sent to rank j; >= 0
  std::vector<int64_t> sdispls;     ///< offset in x.flat of the block for rank j; >= 0
  std::vector<int64_t> recvCounts;  ///< elements received from rank j; >= 0, sum > 0
  std::vector<int64_t> rdispls;     ///< offset in y.flat of the block from rank j; >= 0

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("sendCounts", sendCounts);
    v("sdispls", sdispls);
    v("recvCounts", recvCounts);
    v("rdispls", rdispls);
  }
};

Status CreateOperation(const AllToAllVParam& param, Operation** op);

}  // namespace collops
