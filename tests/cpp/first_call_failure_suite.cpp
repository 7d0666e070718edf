#include "first_call_failure_suite.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "op_harness.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kCount = 29;

/// One way a rank's first call can fail its own checks.
struct FirstCallCase {
  const char* name;
  const char* kind;   ///< "AllReduce" (every rank), "Send" (0 to 1), "Recv" (1 from 0)
  int failer;         ///< -1: the last rank
  Status status;      ///< the failer's own Status
  const char* field;  ///< what the failer's message names
  const char* told;   ///< what the failer's peers' messages say of it
};

const std::vector<FirstCallCase>& Cases() {
  static const std::vector<FirstCallCase> cases = {
      {"AllReduce y of another shape", "AllReduce", -1, ERROR_INVALID_TENSOR_DIM,
       "outTensors[0] (y) has shape", "failed its own checks for this call"},
      {"Send x of an unknown dtype", "Send", 0, ERROR_INVALID_TENSOR_DTYPE,
       "inTensors[0] (x) has dtype", "refused its send to rank 1"},
      {"Recv y of another shape than its template", "Recv", 1, ERROR_INVALID_TENSOR_DIM,
       "outTensors[0] (y) has shape", "refused its receive from rank 0"},
  };
  return cases;
}

/// This rank's op of the case: the AllReduce, a Send on rank 0, a Recv on rank 1, else a Barrier.
OperationPtr CaseOp(const SuiteJob& job, const FirstCallCase& c) {
  const std::string kind = c.kind;
  if (kind == "AllReduce") return MakeOperation("AllReduceOperation", job.Param(), job.comm);
  if (job.rank == 0) return MakeOperation("SendOperation", job.Param({{"destRank", 1}}), job.comm);
  if (job.rank == 1) return MakeOperation("RecvOperation", job.Param({{"srcRank", 0}}), job.comm);
  return MakeOperation("BarrierOperation", job.Param(), job.comm);
}

/// The tensors of this rank's call, good ones (the failer's are then spoiled by Spoil).
struct CallTensors {
  std::vector<HostTensor> ins, outs;
};

CallTensors GoodTensors(const SuiteJob& job, Operation& op, uint64_t seed) {
  CallTensors t;
  if (op.GetName() == "BarrierOperation") return t;
  if (op.GetName() == "RecvOperation") {
    t.ins.push_back(HostTensor(ACL_INT32, {kCount}));  // the template
  } else {
    t.ins.push_back(
        HostTensor::FromValues(ACL_INT32, {kCount}, TestValues(ACL_INT32, kCount, seed, job.rank)));
  }
  if (op.GetOutputNum() == 1) t.outs.push_back(HostTensor(ACL_INT32, {kCount}));
  return t;
}

void Spoil(const FirstCallCase& c, std::vector<Tensor>& ins, std::vector<Tensor>& outs) {
  const std::string kind = c.kind;
  if (kind == "Send") {
    ins[0].desc.dtype = ACL_DT_UNDEFINED;
    return;
  }
  outs[0].desc.shape = MakeDims({kCount - 1});  // AllReduce's y, Recv's y
  outs[0].dataSize = (kCount - 1) * sizeof(int32_t);
}

/// What every rank must see of a good call of the case's kind on the same domain.
void ExpectGoodCall(const SuiteJob& job, const FirstCallCase& c, const std::string& what) {
  OperationPtr op = CaseOp(job, c);
  CallTensors t = GoodTensors(job, *op, 41);
  ASSERT_EQ(RunOperation(*op, Tensors(t.ins), Tensors(t.outs)), NO_ERROR)
      << what << ": " << LastErrorMessage();
  if (op->GetName() == "AllReduceOperation") {
    std::vector<std::vector<double>> all;
    for (int r = 0; r < job.rankSize; ++r) all.push_back(TestValues(ACL_INT32, kCount, 41, r));
    ExpectExactly(t.outs[0], FoldRanks(all, ReduceOp::kSum), what);
  } else if (op->GetName() == "RecvOperation") {
    ExpectExactly(t.outs[0], TestValues(ACL_INT32, kCount, 41, 0), what);
  }
}

void RunCase(const SuiteJob& job, const FirstCallCase& c, double promptSeconds) {
  const int failer = c.failer < 0 ? job.rankSize - 1 : c.failer;
  const std::string what = Concat(c.name, " on rank ", failer, " in the first call of ",
                                  job.commDomain, ", seen by rank ", job.rank);
  OperationPtr op = CaseOp(job, c);
  CallTensors t = GoodTensors(job, *op, 40);
  std::vector<Tensor> ins = Tensors(t.ins), outs = Tensors(t.outs);
  if (job.rank == failer) Spoil(c, ins, outs);
  const auto start = std::chrono::steady_clock::now();
  const Status status = RunOperation(*op, ins, outs);
  const std::string message = LastErrorMessage();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, promptSeconds) << what << ": the call ended after " << seconds << " s";
  const bool peerOfTheCall = std::string(c.kind) == "AllReduce" || job.rank <= 1;
  if (job.rank == failer) {
    EXPECT_EQ(status, c.status) << what << ": " << message;
    EXPECT_THAT(message, HasSubstr(c.field)) << what;
  } else if (peerOfTheCall) {
    EXPECT_EQ(status, ERROR_RANK_MISMATCH) << what << ": " << message;
    EXPECT_THAT(message, HasSubstr(Concat("rank ", failer, " ", c.told))) << what;
    EXPECT_THAT(message, HasSubstr(StatusName(c.status))) << what;
  } else {
    EXPECT_EQ(status, NO_ERROR) << what << " (its Barrier): " << message;
  }
  if (::testing::Test::HasFatalFailure()) return;
  // Every rank is still at the same call: a good one delivers, ranks beyond a pair waiting in
  // the Barrier that ends the case.
  if (peerOfTheCall) ExpectGoodCall(job, c, Concat(what, ": the good call after it"));
  if (::testing::Test::HasFatalFailure()) return;
  if (peerOfTheCall) RunBarrier(job, Concat(what, ": the Barrier after it"));
}

}  // namespace

void RunFirstCallFailures(const SuiteJob& job, double promptSeconds) {
  if (job.rankSize < 2) return;  // no peer to tell
  ASSERT_EQ(job.comm, nullptr) << "a caller's communicator needs no creation to join";
  for (size_t i = 0; i < Cases().size(); ++i) {
    SuiteJob caseJob = job;
    caseJob.commDomain = Concat(job.commDomain, "-first", i);
    RunCase(caseJob, Cases()[i], promptSeconds);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace testing
}  // namespace collops
