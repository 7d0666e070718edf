#pragma once

#include <string>

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of ReduceScatterOperation (ATB's ReduceScatterParam).
struct ReduceScatterParam : CommParam {
  std::string reduceType = "sum";  ///< "sum" | "prod" | "max" | "min"

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("reduceType", reduceType);
  }
};

Status CreateOperation(const ReduceScatterParam& param, Operation** op);

}  // namespace collops
