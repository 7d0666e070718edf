#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of AllToAllVV2Operation (ATB's AllToAllVV2Param): the communication params only; the
/// counts arrive as int64 host tensors. As in ATB, rank defaults to -1 and must be set.
struct AllToAllVV2Param : CommParam {
  AllToAllVV2Param() { rank = -1; }

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
  }
};

Status CreateOperation(const AllToAllVV2Param& param, Operation** op);

}  // namespace collops
