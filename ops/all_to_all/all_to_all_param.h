#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of AllToAllOperation (ATB's AllToAllParam).
struct AllToAllParam : CommParam {
  /// false: x.flat is cut in rankSize equal chunks, y = x.shape. true: x [H, W] is cut in
  /// rankSize column blocks [H, W / rankSize] and y = [H * rankSize, W / rankSize].
  bool transpose = false;

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("transpose", transpose);
  }
};

Status CreateOperation(const AllToAllParam& param, Operation** op);

}  // namespace collops
