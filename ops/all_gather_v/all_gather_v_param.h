#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of AllGatherVOperation (ATB's AllGatherVParam). The counts are host tensors, not
/// params. Unlike most ops, `rank` defaults to -1 (as in ATB), so a caller that forgets to set it
/// is rejected instead of silently acting as rank 0.
struct AllGatherVParam : CommParam {
  AllGatherVParam() { rank = -1; }

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
  }
};

Status CreateOperation(const AllGatherVParam& param, Operation** op);

}  // namespace collops
