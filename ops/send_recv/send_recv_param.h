#pragma once

#include "collops/comm_params.h"
#include "collops/status.h"

namespace collops {

class Operation;

/// Params of SendRecvOperation: this rank sends its input to destRank and, at the same time,
/// receives a message of the same count and dtype from srcRank (MPI_Sendrecv).
struct SendRecvParam : CommParam {
  int destRank = 0;  ///< the rank x goes to; 0 <= destRank < rankSize and destRank != rank
  int srcRank = 0;   ///< the rank y comes from; 0 <= srcRank < rankSize and srcRank != rank

  template <class Visitor>
  void VisitFields(Visitor& v) {
    CommParam::VisitFields(v);
    v("destRank", destRank);
    v("srcRank", srcRank);
  }
};

Status CreateOperation(const SendRecvParam& param, Operation** op);

}  // namespace collops
