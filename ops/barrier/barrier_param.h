#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of BarrierOperation: the communication params only.
struct BarrierParam : CommParam {
  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
  }
};

Status CreateOperation(const BarrierParam& param, Operation** op);

}  // namespace collops
