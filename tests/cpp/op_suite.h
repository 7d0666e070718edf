// The golden op suite: one rank's run of every operation against plain-loop references, shared by
// every engine that runs real ranks (forked lccl processes, mpirun ranks on the mpi backend,
// hierarchical hccl across simulated hosts, caller-owned communicators). Each rank computes its
// own golden from TestValues of all ranks, so no rank needs another's data to check its result;
// every failure is a gtest failure naming the op, its sizes and the rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/collops.h"

namespace collops {
namespace testing {

/// The "big" sizes exceed a 64 KiB shared slot (run lccl with COLLOPS_SHM_BYTES=65536 to reach its
/// pipelined paths); odd, so no chunking comes out even.
constexpr int64_t kSuiteShmBytes = 65536;

/// One rank's view of a job: the params every op of the suite is built with.
struct SuiteJob {
  int rank = 0;
  int rankSize = 1;
  std::string backend;  ///< "" = the default ("hccl", auto)
  int commMode = 0;
  std::string commDomain = "process-ops";
  Communicator* comm = nullptr;  ///< caller-owned communicator, or null for the pool's
  std::string markerTag;         ///< unique per job: names the Barrier test's marker files
  std::string rankTableFile;     ///< "" = none; else every op's "rankTableFile"

  nlohmann::json Param(nlohmann::json extra = nlohmann::json::object()) const;
  /// The communicator params of the job (what Param() gives every op; `comm` is not carried).
  CommParam Comm() const;
};

/// The job of thread rank `rank` of `rankSize` (commMode 1) on `domain`, or on `comm` when given.
SuiteJob ThreadJob(int rank, int rankSize, const std::string& domain, Communicator* comm = nullptr);

/// Every op accepting `dtype` (reductions for reducible dtypes, data movement for the movement
/// subset), each at sizes 0 / 1 / small / beyond kSuiteShmBytes, then a Send/Recv ring and Barrier;
/// int8 also runs the quantised AllReduce suite (quant_suite.h).
void RunEveryOp(const SuiteJob& job, DataType dtype);

/// One BarrierOperation on the job's communicator, expected to succeed (`what` names it in a
/// failure): keeps every rank in a job until its peers are done with a shared communicator.
void RunBarrier(const SuiteJob& job, const std::string& what);

/// Only the in-place forms of RunEveryOp (AllReduce, ReduceScatter(V), AllGather(V)), for engines
/// that run the rest elsewhere (thread ranks).
void RunInPlaceForms(const SuiteJob& job, DataType dtype);

/// int8, int16, int32, int64, float16, bfloat16, float32, float64.
const std::vector<DataType>& SuiteDtypes();

}  // namespace testing
}  // namespace collops
