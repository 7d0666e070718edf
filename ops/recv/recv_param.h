#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of RecvOperation: this rank receives one message from a peer running a SendOperation.
struct RecvParam : CommParam {
  int srcRank = 0;  ///< the sending rank; 0 <= srcRank < rankSize and srcRank != rank

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("srcRank", srcRank);
  }
};

Status CreateOperation(const RecvParam& param, Operation** op);

}  // namespace collops
