// Backend "hccl" (auto) over forked processes on pretend hosts: it finds the hosts (rank table
// or COLLOPS_HOST_ID) and runs the hierarchical communicator, with COLLOPS_ENGINE=lccl standing in
// for the engine between hosts; one host is plain lccl; bad tables and engines are clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/context.h"
#include "op_harness.h"
#include "op_suite.h"
#include "process_ranks.h"
#include "random_schedule.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Table(const std::string& name) {
  return std::string(COLLOPS_SOURCE_DIR) + "/tests/cases/rank_tables/" + name;
}

ProcessRanksOptions AcrossPretendHosts() {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BYTES"] = std::to_string(kSuiteShmBytes);
  options.env["COLLOPS_TIMEOUT"] = "30";
  options.env["COLLOPS_ENGINE"] = "lccl";
  options.deadlineSeconds = 90;
  return options;
}

CommParam HcclParam(int rank, int size, const std::string& table, const std::string& domain) {
  CommParam param;
  param.rank = rank;
  param.rankSize = size;
  param.backend = "hccl";
  param.commMode = COMM_MULTI_PROCESS;
  param.commDomain = domain;
  param.rankTableFile = table;
  return param;
}

/// Gets this rank's communicator for `param` from the default pool (as every op does), checks its
/// backend, then runs the suite through the pool (ops name backend "hccl" and the domain only).
void ExpectBackendAndRunSuite(const CommParam& param, const std::string& backend,
                              const std::vector<DataType>& dtypes) {
  std::shared_ptr<Communicator> comm = DefaultContext().Communicators().Get(param);
  EXPECT_EQ(comm->BackendName(), backend) << "rank " << param.rank;
  SuiteJob job;
  job.rank = param.rank;
  job.rankSize = param.rankSize;
  job.backend = "hccl";
  job.commDomain = param.commDomain;
  job.markerTag = std::getenv("COLLOPS_JOB_ID");
  for (DataType dtype : dtypes) RunEveryOp(job, dtype);
}

TEST(HcclAuto, RankTableOnTwoServersRunsHierarchicalEveryOp) {
  RunProcessRanks(
      4,
      [](int rank) {
        ExpectBackendAndRunSuite(HcclParam(rank, 4, Table("two_servers.json"), "hier-table"),
                                 "hccl(lccl+lccl)", {ACL_FLOAT16});
      },
      AcrossPretendHosts());
}

TEST(HcclAuto, RandomScheduleAcrossPretendHosts) {
  RunProcessRanks(
      4,
      [](int rank) {
        std::shared_ptr<Communicator> comm = DefaultContext().Communicators().Get(
            HcclParam(rank, 4, Table("two_servers.json"), "hier-schedule"));
        EXPECT_EQ(comm->BackendName(), "hccl(lccl+lccl)") << "rank " << rank;
        RunRandomSchedule(*comm, 400, 40);
      },
      AcrossPretendHosts());
}

TEST(HcclAuto, HostIdentitiesFindUnevenNonContiguousHosts) {
  const std::vector<int> hostOfRank = {0, 1, 1, 0, 2};
  RunProcessRanks(
      5,
      [&](int rank) {
        setenv("COLLOPS_HOST_ID", Concat("pretend-", hostOfRank[rank]).c_str(), 1);
        ExpectBackendAndRunSuite(HcclParam(rank, 5, "", "hier-ids"), "hccl(lccl+lccl)",
                                 {ACL_FLOAT});
      },
      AcrossPretendHosts());
}

TEST(HcclAuto, OneHostIsPlainLccl) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "30";
  RunProcessRanks(
      2,
      [](int rank) {
        unsetenv("COLLOPS_ENGINE");
        auto comm = DefaultContext().Communicators().Get(HcclParam(rank, 2, "", "one-host"));
        EXPECT_EQ(comm->BackendName(), "lccl");
        // A table of one server needs no engine, even when one is named.
        setenv("COLLOPS_ENGINE", "lccl", 1);
        comm = DefaultContext().Communicators().Get(
            HcclParam(rank, 2, Table("one_server.json"), "one-server"));
        EXPECT_EQ(comm->BackendName(), "lccl");
        comm->Barrier();
      },
      options);
}

TEST(HcclAuto, TableServerSpanningHostsIsInvalidOnEveryRank) {
  RunProcessRanks(
      4,
      [](int rank) {
        setenv("COLLOPS_HOST_ID", Concat("alone-", rank).c_str(), 1);
        try {
          DefaultContext().Communicators().Get(
              HcclParam(rank, 4, Table("two_servers.json"), "spanning"));
          ADD_FAILURE() << "rank " << rank << ": a server spanning hosts was accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
          EXPECT_THAT(e.what(), AllOf(HasSubstr("two_servers.json"),
                                      HasSubstr("ranks 0 and 2 are both on server \"10.231.0.1\""),
                                      HasSubstr("run on different hosts")));
        }
      },
      AcrossPretendHosts());
}

/// Runs `body` with environment variable `name` set to `value` (unset when null), then restores
/// it.
void WithEnv(const char* name, const char* value, const std::function<void()>& body) {
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  auto set = [name](const char* v) { v ? setenv(name, v, 1) : unsetenv(name); };
  set(value);
  body();
  set(old ? saved.c_str() : nullptr);
}

void WithEngineEnv(const char* engine, const std::function<void()>& body) {
  WithEnv("COLLOPS_ENGINE", engine, body);
}

TEST(HcclAuto, MultiHostTableWithoutEngineSaysWhatToDo) {
  WithEngineEnv(nullptr, [] {
    Context context;
    try {
      context.Communicators().Get(HcclParam(0, 4, Table("two_servers.json"), "no-engine"));
      ADD_FAILURE() << "a multi-host table without an engine was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_BACKEND_UNAVAILABLE);
      EXPECT_THAT(e.what(), AllOf(HasSubstr("on 2 hosts"), HasSubstr("mpirun"),
                                  HasSubstr("torch.distributed"), HasSubstr("COLLOPS_ENGINE")));
    }
  });
}

TEST(HcclAuto, UnknownEngineIsInvalid) {
  WithEngineEnv("gloo", [] {
    Context context;
    try {
      context.Communicators().Get(HcclParam(0, 2, "", "bad-engine"));
      ADD_FAILURE() << "COLLOPS_ENGINE=gloo was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
      EXPECT_THAT(e.what(), HasSubstr("COLLOPS_ENGINE=\"gloo\" is not one of mpi, c10d, lccl"));
    }
  });
}

// No engine fits (no mpirun, no torch group) and no table: hccl takes the domain to be on this
// host. When torchrun says the job spans hosts, the rendezvous timing out most likely means the
// domain does not: the error says so instead of only "did not arrive".
TEST(HcclAuto, NoEngineInAJobSpanningHostsHintsWhyTheRendezvousTimedOut) {
  WithEngineEnv(nullptr, [] {
    WithEnv("WORLD_SIZE", "4", [] {
      WithEnv("LOCAL_WORLD_SIZE", "2", [] {
        Context context;
        CommParam param = HcclParam(0, 2, "", UniqueDomain());
        param.timeoutSeconds = 0.5;
        try {
          context.Communicators().Get(param);
          ADD_FAILURE() << "a rendezvous without its peer succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), ERROR_TIMEOUT);
          EXPECT_THAT(e.what(), AllOf(HasSubstr("did not arrive"),
                                      HasSubstr("the launcher says the job spans hosts "
                                                "(WORLD_SIZE=4, LOCAL_WORLD_SIZE=2)"),
                                      HasSubstr("mpirun")));
        }
      });
    });
  });
}

/// A bad table reaches the op's caller as ERROR_INVALID_PARAM before any rank communicates.
TEST(HcclAuto, BadTableFailsTheOperation) {
  Context context;
  OperationPtr op =
      MakeOperation("AllReduceOperation", {{"rank", 0},
                                           {"rankSize", 4},
                                           {"commDomain", "bad-table"},
                                           {"rankTableFile", Table("duplicate_rank_id.json")}});
  std::vector<HostTensor> ins = {HostTensor::FromValues(ACL_FLOAT, {2}, {1, 2})};
  std::vector<HostTensor> outs = {HostTensor(ACL_FLOAT, {2})};
  EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs), &context), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(),
              AllOf(HasSubstr("duplicate_rank_id.json"), HasSubstr("rank_id 1 appears twice")));
}

}  // namespace
}  // namespace testing
}  // namespace collops
