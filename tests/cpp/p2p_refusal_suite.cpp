#include "p2p_refusal_suite.h"

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

constexpr int64_t kCount = 37;

/// One way a rank's call can fail its own checks.
struct RefusalCase {
  const char* name;
  int refuser;        ///< rank 0 or 1
  const char* kind;   ///< "Send" (refuser sends to the peer), "Recv" (refuser receives), "SendRecv"
  Status status;      ///< the refuser's own Status
  const char* field;  ///< what the refuser's message names
  /// Spoils the refuser's tensors: in Setup's pack, or with `atExecute` in Execute's only, after a
  /// Setup of good ones (a check only Execute makes).
  void (*spoil)(std::vector<Tensor>& ins, std::vector<Tensor>& outs);
  bool atExecute = false;
};

/// The refuser's call: Setup, then Execute, with the case's spoiled tensors where it says.
Status RunSpoiled(const RefusalCase& c, Operation& op, std::vector<Tensor> ins,
                  std::vector<Tensor> outs) {
  VariantPack pack{ins, outs};
  if (!c.atExecute) c.spoil(pack.inTensors, pack.outTensors);
  uint64_t workspaceSize = 0;
  const Status setup = op.Setup(pack, workspaceSize, nullptr);
  if (setup != NO_ERROR) return setup;
  EXPECT_EQ(workspaceSize, 0u) << c.name;
  if (c.atExecute) c.spoil(pack.inTensors, pack.outTensors);
  return op.Execute(pack, nullptr, 0, nullptr);
}

const std::vector<RefusalCase>& Cases() {
  using T = std::vector<Tensor>;
  static const std::vector<RefusalCase> cases = {
      {"Send x of an unknown format", 0, "Send", ERROR_INVALID_TENSOR_FORMAT, "inTensors[0] (x)",
       [](T& ins, T&) { ins[0].desc.format = ACL_FORMAT_UNDEFINED; }},
      {"Send x of an unknown dtype", 1, "Send", ERROR_INVALID_TENSOR_DTYPE, "inTensors[0] (x)",
       [](T& ins, T&) { ins[0].desc.dtype = ACL_DT_UNDEFINED; }},
      {"Recv y of another shape than its template", 1, "Recv", ERROR_INVALID_TENSOR_DIM,
       "outTensors[0] (y)",
       [](T&, T& outs) {
         outs[0].desc.shape = MakeDims({kCount - 1});
         outs[0].dataSize = (kCount - 1) * sizeof(float);
       }},
      {"Recv template of an unknown format", 0, "Recv", ERROR_INVALID_TENSOR_FORMAT,
       "inTensors[0] (template)", [](T& ins, T&) { ins[0].desc.format = ACL_FORMAT_UNDEFINED; }},
      {"SendRecv y overlapping x", 1, "SendRecv", ERROR_INVALID_PARAM, "y overlaps x",
       [](T& ins, T& outs) { outs[0].deviceData = ins[0].deviceData; }},
      {"Send x without data at Execute", 0, "Send", ERROR_INVALID_TENSOR_ADDR,
       "inTensors[0] (x) has no data", [](T& ins, T&) { ins[0].deviceData = nullptr; }, true},
      {"SendRecv x without data at Execute", 0, "SendRecv", ERROR_INVALID_TENSOR_ADDR,
       "inTensors[0] (x) has no data", [](T& ins, T&) { ins[0].deviceData = nullptr; }, true},
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
    const Status status =
        job.rank == c.refuser ? RunSpoiled(c, *op, ins, outs) : RunOperation(*op, ins, outs);
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
  RunBarrier(job, Concat("rank ", job.rank, ": the Barrier before the refusals"));
  if (job.rank <= 1) RefusalsOfThePair(job, promptSeconds);
  RunBarrier(job, Concat("rank ", job.rank, ": the Barrier after the refusals"));
}

}  // namespace testing
}  // namespace collops
