#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of AllGatherOperation (ATB's AllGatherParam): only the communication params.
struct AllGatherParam : CommParam {
  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
  }
};

Status CreateOperation(const AllGatherParam& param, Operation** op);

}  // namespace collops
