#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of BroadcastOperation (ATB's BroadcastParam). The source rank is the common
/// `rankRoot` field (default 0; 0 <= rankRoot < rankSize).
struct BroadcastParam : CommParam {
  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
  }
};

Status CreateOperation(const BroadcastParam& param, Operation** op);

}  // namespace collops
