#pragma once

#include <string>

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of AllReduceOperation (ATB's AllReduceParam).
struct AllReduceParam : CommParam {
  std::string allReduceType = "sum";  ///< "sum" | "prod" | "max" | "min"

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("allReduceType", allReduceType);
  }
};

Status CreateOperation(const AllReduceParam& param, Operation** op);

}  // namespace collops
