// Send, Recv and SendRecv operations when one rank of a pair refuses its own tensors: the refusing
// rank fails with its own Status and a message naming the tensor, and its peer, already waiting in
// the matching call, fails at once with ERROR_RANK_MISMATCH naming the refusing rank and that
// Status (OperationBase::RefusalsImpl), never at COLLOPS_TIMEOUT. Shared by every engine that runs
// real ranks: thread and process lccl, hierarchical hccl, mpi.
#pragma once

#include "op_suite.h"

namespace collops {
namespace testing {

/// Every rank of the job runs a Barrier first (the refusals are told through a communicator that
/// exists; first_call_failure_suite.h refuses a domain's first call) and one at the end; in
/// between, ranks 0 and 1 run, for each way a tensor can fail one side's checks (its format, its
/// dtype, y's shape, y overlapping x, a pointer only Execute sees), a call in which one of them
/// refuses, then a good call that must deliver (the pair is still in step). Each refused call must
/// end on both ranks within `promptSeconds`: run it with a COLLOPS_TIMEOUT well above that, so a
/// peer left waiting fails the test.
void RunPointToPointRefusals(const SuiteJob& job, double promptSeconds);

}  // namespace testing
}  // namespace collops
