// A rank whose first call of an operation fails its own checks, before any communicator of the
// op's commDomain exists: it joins the communicator's creation, where its peers wait, and tells
// them (OperationBase::ShareFailure), so they fail at once with ERROR_RANK_MISMATCH naming it and
// its Status instead of at COLLOPS_TIMEOUT, and it returns its own Status and message. Shared by
// every engine whose communicators the pool creates: thread and process lccl, hccl, mpi.
#pragma once

#include "op_suite.h"

namespace collops {
namespace testing {

/// Runs each case on a commDomain of its own (job.commDomain plus the case's number), so the
/// refused call is the first of that domain on every rank: an AllReduce whose y has another shape
/// on the last rank; a Send of x of an unknown dtype by rank 0 to rank 1; a Recv into y of another
/// shape than its template by rank 1 from rank 0 (ranks beyond the pair run a Barrier as their
/// first call, as they must be in the creation too). Then a good call of the case's kind on the
/// same domain must deliver (every rank is still at the same call) and a Barrier ends it. Each
/// refused call must end on every rank within `promptSeconds`: run it with a COLLOPS_TIMEOUT well
/// above that, so a rank left waiting fails the test. Nothing to do for one rank; job.comm must be
/// null.
void RunFirstCallFailures(const SuiteJob& job, double promptSeconds);

}  // namespace testing
}  // namespace collops
