#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of SendOperation: this rank sends its input to one peer, which runs a RecvOperation.
struct SendParam : CommParam {
  int destRank = 0;  ///< the receiving rank; 0 <= destRank < rankSize and destRank != rank

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("destRank", destRank);
  }
};

Status CreateOperation(const SendParam& param, Operation** op);

}  // namespace collops
