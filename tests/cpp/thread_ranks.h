// Thread-ranks harness: runs one test body on R threads of this process, each thread a rank of a
// multi-thread (commMode 1) communicator.
//
//   RunThreadRanks(4, [&](int rank) {
//     auto comm = collops::CreateCommunicator(ThreadRankParam(rank, 4, domain));
//     ...EXPECT_*...
//   });
//
// gtest assertions work in every rank thread and fail the current test (each is traced with its
// rank). An exception escaping the body is a test failure naming the rank and, for a
// collops::Error, its Status. Ranks still running at the deadline are named on stderr and the
// process aborts, so ctest reports a failure instead of hanging.
#pragma once

#include <functional>
#include <string>

#include "collops/comm_params.h"
#include "collops/registry.h"

namespace collops {
namespace testing {

/// Runs body(rank) for rank = 0..rankSize-1, each on its own thread, and returns when all are done.
/// Aborts the process (after naming the stuck ranks) if they are not done within deadlineSeconds.
void RunThreadRanks(int rankSize, const std::function<void(int rank)>& body,
                    double deadlineSeconds = 60);

/// A commDomain no other test uses: the current gtest test's full name, `tag` and a process-wide
/// counter ("ThreadComm.AllReduce/3:sum#17"), shortened to fit kMaxCommDomainLength.
std::string UniqueDomain(const std::string& tag = "");

/// Params for rank `rank` of a multi-thread lccl communicator over `domain`.
CommParam ThreadRankParam(int rank, int rankSize, const std::string& domain);

/// An AllReduceOperation of one thread-mode rank in a domain of its own (UniqueDomain): the
/// smallest op that runs every generic OperationBase check.
OperationPtr SingleRankAllReduce();

}  // namespace testing
}  // namespace collops
