// Golden tests of every operation over real processes (commMode 0): the thread-rank op tests
// never touch the multi-process communicator's pipelined paths or its cross-process signature
// exchange, and the process communicator tests never go through an operation. Each forked job is
// one (R, dtype, backend) and runs the op suite (op_suite.h) for that dtype on one communicator
// domain, so the grid forks a few dozen times instead of hundreds; every failure names the op.
// COLLOPS_SHM_BYTES=64K makes the "big" sizes (> 64 KiB per rank) take the pipelined paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "first_call_failure_suite.h"
#include "op_harness.h"
#include "op_suite.h"
#include "p2p_refusal_suite.h"
#include "process_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;
using Grid = std::vector<std::vector<int64_t>>;

ProcessRanksOptions SmallShm() {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BYTES"] = std::to_string(kSuiteShmBytes);
  options.env["COLLOPS_TIMEOUT"] = "30";
  options.deadlineSeconds = 90;
  return options;
}

/// Runs the op and records a failure naming `what` when it does not succeed.
bool Runs(Operation& op, std::vector<HostTensor>& ins, std::vector<HostTensor>& outs,
          const std::string& what) {
  const Status status = RunOperation(op, Tensors(ins), Tensors(outs));
  EXPECT_EQ(status, NO_ERROR) << what << ": " << StatusName(status) << ": " << LastErrorMessage();
  return status == NO_ERROR;
}

/// Alternates the backend over the dtype grid so both reach every R.
std::string BackendFor(DataType dtype) {
  const auto& d = SuiteDtypes();
  const size_t index = std::find(d.begin(), d.end(), dtype) - d.begin();
  return index % 2 == 0 ? "lccl" : "";
}

class ProcessOpsGolden : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(ProcessOpsGolden, EveryOpMatchesReference) {
  const auto [rankSize, dtype] = GetParam();
  const std::string backend = BackendFor(dtype);
  RunProcessRanks(
      rankSize,
      [rankSize = rankSize, dtype = dtype, backend](int rank) {
        SuiteJob job;
        job.rank = rank;
        job.rankSize = rankSize;
        job.backend = backend;
        job.markerTag = std::getenv("COLLOPS_JOB_ID");
        RunEveryOp(job, dtype);
      },
      SmallShm());
}

INSTANTIATE_TEST_SUITE_P(ProcessOps, ProcessOpsGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(SuiteDtypes())),
                         [](const auto& info) {
                           const DataType dtype = std::get<1>(info.param);
                           const std::string backend = BackendFor(dtype);
                           return Concat("R", std::get<0>(info.param), "_", DtypeTestName(dtype),
                                         "_", backend.empty() ? "hccl" : backend);
                         });

/// One rank of a pair refusing its own tensors makes its peer fail at once naming it
/// (p2p_refusal_suite.h), on plain lccl and on hccl (one host: lccl); a peer left waiting would
/// fail only at the 20 s timeout, after the 10 s the suite allows each call.
TEST(ProcessOpsRefusals, ARankRefusingItsTensorsFailsItsPeerAtOnce) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "20";
  options.deadlineSeconds = 90;
  for (const std::string backend : {"lccl", ""}) {
    SCOPED_TRACE(backend.empty() ? "hccl" : backend);
    RunProcessRanks(
        3,
        [backend](int rank) {
          SuiteJob job;
          job.rank = rank;
          job.rankSize = 3;
          job.backend = backend;
          job.commDomain = "process-refusals";
          RunPointToPointRefusals(job, /*promptSeconds=*/10);
        },
        options);
  }
}

/// A rank whose first call fails its own checks, before its communicator exists, makes its peers
/// fail at once naming it (first_call_failure_suite.h), on plain lccl and on hccl (one host:
/// lccl), 2 and 3 ranks; a peer left in the creation would fail only at the 20 s timeout, after
/// the 10 s the suite allows each call.
TEST(ProcessOpsFirstCallFailures, ARankFailingItsFirstCallFailsItsPeersAtOnce) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "20";
  options.deadlineSeconds = 90;
  for (const std::string backend : {"lccl", ""}) {
    for (int rankSize : {2, 3}) {
      SCOPED_TRACE(Concat(backend.empty() ? "hccl" : backend, ", ", rankSize, " ranks"));
      RunProcessRanks(
          rankSize,
          [backend, rankSize](int rank) {
            SuiteJob job;
            job.rank = rank;
            job.rankSize = rankSize;
            job.backend = backend;
            job.commDomain = "process-first-call";
            RunFirstCallFailures(job, /*promptSeconds=*/10);
          },
          options);
    }
  }
}

/// The AllToAllVV2 example of docs/operations.md (examples/json/all_to_allvv2_seed.json): rank 0
/// sends 2 and 4 elements, rank 1 sends 2 and 1, over backend "hccl" (auto) as the example does.
TEST(ProcessOpsSeed, AllToAllVV2ExampleOverTwoProcessesEveryDtype) {
  RunProcessRanks(
      2,
      [](int rank) {
        const Grid x = {{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 6}};
        const std::vector<std::vector<int64_t>> xShape = {{2, 4}, {2, 3}};
        const Grid sendCounts = {{2, 4}, {2, 1}}, sdispls = {{0, 2}, {0, 2}};
        const Grid recvCounts = {{2, 2}, {4, 1}}, rdispls = {{0, 2}, {0, 4}};
        const int64_t total = recvCounts[rank][0] + recvCounts[rank][1];
        std::vector<double> golden(total, 0.0);
        for (int j = 0; j < 2; ++j) {
          for (int64_t k = 0; k < recvCounts[rank][j]; ++k) {
            golden[rdispls[rank][j] + k] = static_cast<double>(x[j][sdispls[j][rank] + k]);
          }
        }
        for (DataType dtype : ReducibleDtypes()) {
          const std::string what =
              Concat("AllToAllVV2Operation seed example ", DataTypeName(dtype), " rank ", rank);
          OperationPtr op = MakeOperation("AllToAllVV2Operation", {{"rank", rank},
                                                                   {"rankSize", 2},
                                                                   {"rankRoot", 0},
                                                                   {"backend", "hccl"},
                                                                   {"commDomain", "demo"}});
          std::vector<HostTensor> ins = {
              HostTensor::FromValues(dtype, xShape[rank],
                                     std::vector<double>(x[rank].begin(), x[rank].end())),
              HostTensor::Counts(sendCounts[rank]),
              HostTensor::Counts(sdispls[rank]),
              HostTensor::Counts(recvCounts[rank]),
              HostTensor::Counts(rdispls[rank]),
              HostTensor::FromValues(ACL_INT8, {total}, std::vector<double>(total, 3))};
          std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
          if (!Runs(*op, ins, outs, what)) continue;
          EXPECT_EQ(outs[0].shape(), (std::vector<int64_t>{1, total})) << what;
          ExpectExactly(outs[0], golden, what);
        }
      },
      SmallShm());
}

TEST(ProcessOpsErrors, CountDisagreementGivesRankMismatchOnEveryProcess) {
  RunProcessRanks(
      3,
      [](int rank) {
        OperationPtr op = MakeOperation(
            "AllReduceOperation",
            {{"rank", rank}, {"rankSize", 3}, {"commMode", 0}, {"commDomain", "mismatch"}});
        const int64_t n = rank == 2 ? 5 : 4;
        std::vector<HostTensor> ins = {
            HostTensor::FromValues(ACL_FLOAT, {n}, TestValues(ACL_FLOAT, n, 1, rank))};
        std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
        EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH)
            << "rank " << rank << ": " << LastErrorMessage();
        EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 2")) << "on rank " << rank;
        EXPECT_THAT(LastErrorMessage(), ::testing::AnyOf(HasSubstr("rank 0"), HasSubstr("rank 1")))
            << "on rank " << rank;
      },
      SmallShm());
}

/// The first op creates the communicator; on the second, rank 1 fails its own checks (a
/// sendCount beyond x) and must tell its peers through that communicator instead of letting them
/// wait for COLLOPS_TIMEOUT (30 s here).
TEST(ProcessOpsErrors, LocalFailureOnSecondOpReachesPeersQuickly) {
  RunProcessRanks(
      3,
      [](int rank) {
        const nlohmann::json param = {
            {"rank", rank}, {"rankSize", 3}, {"commMode", 0}, {"commDomain", "second-op"}};
        {
          OperationPtr first = MakeOperation("AllReduceOperation", param);
          std::vector<HostTensor> ins = {
              HostTensor::FromValues(ACL_INT32, {4}, TestValues(ACL_INT32, 4, 2, rank))};
          std::vector<HostTensor> outs = AllocateOutputs(*first, Tensors(ins));
          ASSERT_EQ(RunOperation(*first, Tensors(ins), Tensors(outs)), NO_ERROR)
              << "first AllReduceOperation on rank " << rank << ": " << LastErrorMessage();
        }
        OperationPtr second = MakeOperation("AllGatherVOperation", param);
        const int64_t sendCount = rank == 1 ? 9 : 2;  // rank 1's x holds only 2 elements
        std::vector<HostTensor> ins = {
            HostTensor::FromValues(ACL_FLOAT, {2}, TestValues(ACL_FLOAT, 2, 3, rank)),
            HostTensor::Counts({sendCount}), HostTensor::Counts({2, 9, 2}),
            HostTensor::Counts({0, 2, 11}), HostTensor(ACL_INT8, {13})};
        std::vector<HostTensor> outs = AllocateOutputs(*second, Tensors(ins));
        const auto start = std::chrono::steady_clock::now();
        const Status status = RunOperation(*second, Tensors(ins), Tensors(outs));
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string message = LastErrorMessage();
        EXPECT_LT(seconds, 10) << "rank " << rank << " took " << seconds << " s: " << message;
        if (rank == 1) {
          EXPECT_EQ(status, ERROR_INVALID_PARAM) << message;
          EXPECT_THAT(message, HasSubstr("sendCount"));
        } else {
          EXPECT_EQ(status, ERROR_RANK_MISMATCH) << "rank " << rank << ": " << message;
          EXPECT_THAT(message, HasSubstr("rank 1")) << "on rank " << rank;
        }
      },
      SmallShm());
}

}  // namespace
}  // namespace testing
}  // namespace collops
