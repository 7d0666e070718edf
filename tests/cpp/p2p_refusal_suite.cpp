#include "p2p_refusal_suite.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "op_harness.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kCount = 37;

/// One way a rank's call can fail its own checks.
struct RefusalCase {
  const char* name;
  int refuser;        ///< rank 0 or 1
  const char* kind;   ///< "Send" (refuser sends to the peer), "Recv" (refuser receives), "SendRecv"
  Status status;      ///< the refuser's own Status
  const char* field;  ///< what the refuser's message names
  /// Breaks the refuser's call: runs it with bad tensors and returns its Status.
  std::function<Status(Operation& op, std::vector<Tensor>& ins, std::vector<Tensor>& outs)> run;
};

Status RunWithFormat(Operation& op, std::vector<Tensor>& ins, std::vector<Tensor>& outs) {
  ins[0].desc.format = ACL_FORMAT_UNDEFINED;
  return RunOperation(op, ins, outs);
}

Status RunWithDtype(Operation& op, std::vector<Tensor>& ins, std::vector<Tensor>& outs) {
  ins[0].desc.dtype = ACL_DT_UNDEFINED;
  return RunOperation(op, ins, outs);
}

Status RunWithLongerY(Operation& op, std::vector<Tensor>& ins, std::vector<Tensor>& outs) {
  outs[0].desc.shape = MakeDims({kCount - 1});
  outs[0].dataSize = (kCount - 1) * sizeof(float);
  return RunOperation(op, ins, outs);
}

Status RunWithYOverX(Operation& op, std::vector<Tensor>& ins, std::vector<Tensor>& outs) {
  outs[0].deviceData = ins[0].deviceData;
  return RunOperation(op, ins, outs);
}

/// Setup passes; Execute is given an x without data, which only its own checks see.
Status RunWithoutDataAtExecute(Operation& op, std::vector<Tensor>& ins, std::vector<Tensor>& outs) {
  uint64_t workspaceSize = 0;
  const VariantPack good{ins, outs};
  const Status setup = op.Setup(good, workspaceSize, nullptr);
  if (setup != NO_ERROR) return setup;
  EXPECT_EQ(workspaceSize, 0u);
  VariantPack bad = good;
  bad.inTensors[0].deviceData = nullptr;
  return op.Execute(bad, nullptr, 0, nullptr);
}

const std::vector<RefusalCase>& Cases() {
  static const std::vector<RefusalCase> cases = {
      {"Send x of an unknown format", 0, "Send", ERROR_INVALID_TENSOR_FORMAT, "inTensors[0] (x)",
       RunWithFormat},
      {"Send x of an unknown dtype", 1, "Send", ERROR_INVALID_TENSOR_DTYPE, "inTensors[0] (x)",
       RunWithDtype},
      {"Recv y of another shape than its template", 1, "Recv", ERROR_INVALID_TENSOR_DIM,
       "outTensors[0] (y)", RunWithLongerY},
      {"Recv template of an unknown format", 0, "Recv", ERROR_INVALID_TENSOR_FORMAT,
       "inTensors[0] (template)", RunWithFormat},
      {"SendRecv y overlapping x", 1, "SendRecv", ERROR_INVALID_PARAM, "y overlaps x",
       RunWithYOverX},
      {"Send x without data at Execute", 0, "Send", ERROR_INVALID_TENSOR_ADDR,
       "inTensors[0] (x) has no data", RunWithoutDataAtExecute},
      {"SendRecv x without data at Execute", 0, "SendRecv", ERROR_INVALID_TENSOR_ADDR,
       "inTensors[0] (x) has no data", RunWithoutDataAtExecute},
  };
  return cases;
}

/// This rank's op of the pair: the case's kind on the refuser, its counterpart on the peer.
OperationPtr PairOp(const SuiteJob& job, const RefusalCase& c) {
  const int peer = 1 - job.rank;
  std::string kind = c.kind;
  if (job.rank != c.refuser && kind != "SendRecv") kind = kind == "Send" ? "Recv" : "Send";
  if (kind == "Send") {
    return MakeOperation("SendOperation", job.Param({{"destRank", peer}}), job.comm);
  }
  if (kind == "Recv") {
    return MakeOperation("RecvOperation", job.Param({{"srcRank", peer}}), job.comm);
  }
  return MakeOperation("SendRecvOperation", job.Param({{"destRank", peer}, {"srcRank", peer}}),
                       job.comm);
}

/// Rank 0 sends rank 1 a message that must arrive whole: after each refusal the pair is still in
/// step.
void GoodSend(const SuiteJob& job, const std::string& what) {
  const int peer = 1 - job.rank;
  std::vector<HostTensor> none;
  if (job.rank == 0) {
    OperationPtr send = MakeOperation("SendOperation", job.Param({{"destRank", peer}}), job.comm);
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(ACL_FLOAT, {kCount}, TestValues(ACL_FLOAT, kCount, 31, 0))};
    EXPECT_EQ(RunOperation(*send, Tensors(ins), Tensors(none)), NO_ERROR)
        << what << ": " << LastErrorMessage();
    return;
  }
  OperationPtr recv = MakeOperation("RecvOperation", job.Param({{"srcRank", peer}}), job.comm);
  std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {kCount})};
  std::vector<HostTensor> outs = AllocateOutputs(*recv, Tensors(ins));
  ASSERT_EQ(RunOperation(*recv, Tensors(ins), Tensors(outs)), NO_ERROR)
      << what << ": " << LastErrorMessage();
  ExpectExactly(outs[0], TestValues(ACL_FLOAT, kCount, 31, 0), what);
}

/// Every rank: the communicator is collective to create, and ranks beyond the pair must not leave
/// while it is in use.
void Barrier(const SuiteJob& job, const std::string& what) {
  OperationPtr op = MakeOperation("BarrierOperation", job.Param(), job.comm);
  std::vector<HostTensor> none, noneOut;
  EXPECT_EQ(RunOperation(*op, Tensors(none), Tensors(noneOut)), NO_ERROR)
      << what << ": " << LastErrorMessage();
}

void RefusalsOfThePair(const SuiteJob& job, double promptSeconds) {
  GoodSend(job, Concat("rank ", job.rank, ": the first Send/Recv"));
  for (const RefusalCase& c : Cases()) {
    const std::string what = Concat(c.name, " on rank ", c.refuser, ", seen by rank ", job.rank);
    OperationPtr op = PairOp(job, c);
    std::vector<HostTensor> x = {
        HostTensor::FromValues(ACL_FLOAT, {kCount}, TestValues(ACL_FLOAT, kCount, 32, job.rank))};
    std::vector<HostTensor> y;
    if (op->GetOutputNum() == 1) y.push_back(HostTensor(ACL_FLOAT, {kCount}));
    std::vector<Tensor> ins = Tensors(x), outs = Tensors(y);
    const auto start = std::chrono::steady_clock::now();
    Status status;
    if (job.rank == c.refuser) {
      status = c.run(*op, ins, outs);
    } else {
      status = RunOperation(*op, ins, outs);
    }
    const std::string message = LastErrorMessage();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, promptSeconds) << what << ": the call ended after " << seconds << " s";
    if (job.rank == c.refuser) {
      EXPECT_EQ(status, c.status) << what << ": " << message;
      EXPECT_THAT(message, HasSubstr(c.field)) << what;
    } else {
      EXPECT_EQ(status, ERROR_RANK_MISMATCH) << what << ": " << message;
      EXPECT_THAT(message, HasSubstr(Concat("rank ", c.refuser, " refused its "))) << what;
      EXPECT_THAT(message, HasSubstr(Concat("(", StatusName(c.status), ":"))) << what;
    }
    if (::testing::Test::HasFatalFailure()) return;
    GoodSend(job, Concat(what, ": the Send/Recv after it"));
  }
}

}  // namespace

void RunPointToPointRefusals(const SuiteJob& job, double promptSeconds) {
  if (job.rankSize < 2) return;
  Barrier(job, Concat("rank ", job.rank, ": the Barrier before the refusals"));
  if (job.rank <= 1) RefusalsOfThePair(job, promptSeconds);
  Barrier(job, Concat("rank ", job.rank, ": the Barrier after the refusals"));
}

}  // namespace testing
}  // namespace collops
