#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of ReduceScatterVOperation (ATB's ReduceScatterVParam). The counts are also inputs
/// (int64 host tensors), which are authoritative; a count param that is given must agree with
/// its tensor at Setup and Execute.
struct ReduceScatterVParam : CommParam {
  std::string reduceType = "sum";   ///< "sum" | "prod" | "max" | "min"
  std::vector<int64_t> sendCounts;  ///< [rankSize] elements sent to rank j, >= 0; {} = not given
  std::vector<int64_t> sdispls;     ///< [rankSize] offsets into x of those, >= 0; {} = not given
  int64_t recvCount = -1;           ///< elements this rank receives, >= 0; -1 = not given

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("reduceType", reduceType);
    v("sendCounts", sendCounts);
    v("sdispls", sdispls);
    v("recvCount", recvCount);
  }
};

Status CreateOperation(const ReduceScatterVParam& param, Operation** op);

}  // namespace collops
