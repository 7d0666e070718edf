// Backend "mpi" itself, on real mpirun ranks: params checked against MPI, domains, point-to-point
// agreement, data movement of every byte type, MPI errors, and who initialises MPI. Every test
// is collective: all ranks take the same path (no early ASSERT on one rank only), so a failure
// is reported instead of hanging the job.
#include <mpi.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/collops.h"
#include "collops/context.h"
#include "core/comm/mpi/mpi_runtime.h"
#include "core/comm/mpi/mpi_types.h"
#include "core/comm/shm/process_rendezvous.h"
#include "exchange_cases.h"
#include "mpi_job.h"
#include "op_harness.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

CommParam MpiParam(const std::string& domain, int rank, int rankSize) {
  CommParam param;
  param.backend = "mpi";
  param.commDomain = domain;
  param.rank = rank;
  param.rankSize = rankSize;
  return param;
}

/// Creates the communicator; on failure returns null and the Status and message.
std::shared_ptr<Communicator> TryCreate(const CommParam& param, Status* status,
                                        std::string* message) {
  std::shared_ptr<Communicator> comm;
  *status = Guarded([&] { comm = CreateCommunicator(param); });
  *message = LastErrorMessage();
  return comm;
}

/// World ranks of every member of `comm`, in its rank order.
std::vector<int32_t> MembersOf(Communicator& comm) {
  const int32_t mine = WorldRank();
  std::vector<int32_t> all(comm.Size());
  comm.AllGatherBytes(&mine, all.data(), sizeof(mine));
  return all;
}

TEST(MpiParams, RankSizeThatDisagreesWithMpiIsNamed) {
  Status status;
  std::string message;
  TryCreate(MpiParam("bad-size", WorldRank(), WorldSize() + 1), &status, &message);
  EXPECT_EQ(status, ERROR_INVALID_PARAM) << message;
  EXPECT_THAT(message, HasSubstr(Concat("rankSize = ", WorldSize() + 1)));
  EXPECT_THAT(message, HasSubstr(Concat("MPI has ", WorldSize(), " process")));
}

// "abc" once meant INT_MAX: every rank refuses it at creation, before any MPI call, naming it.
TEST(MpiParams, AMaxCountThatIsNotANumberIsRefusedNamingIt) {
  const char* old = std::getenv("COLLOPS_MPI_MAX_COUNT");
  const std::string saved = old == nullptr ? "" : old;
  setenv("COLLOPS_MPI_MAX_COUNT", "abc", 1);
  Status status;
  std::string message;
  TryCreate(MpiParam("bad-max-count", WorldRank(), WorldSize()), &status, &message);
  EXPECT_THROW(mpi::MaxCount(), Error);
  if (old == nullptr) {
    unsetenv("COLLOPS_MPI_MAX_COUNT");
  } else {
    setenv("COLLOPS_MPI_MAX_COUNT", saved.c_str(), 1);
  }
  EXPECT_EQ(status, ERROR_INVALID_PARAM) << message;
  EXPECT_THAT(message, HasSubstr("COLLOPS_MPI_MAX_COUNT=\"abc\" is not an integer from 1 to "));
}

TEST(MpiParams, RankThatDisagreesWithMpiIsNamed) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks to pass the same rank";
  Status status;
  std::string message;
  TryCreate(MpiParam("bad-rank", 0, WorldSize()), &status, &message);
  EXPECT_EQ(status, ERROR_INVALID_PARAM) << message;
  EXPECT_THAT(message, HasSubstr("rank = 0 on MPI_COMM_WORLD rank "));
  EXPECT_THAT(message, HasSubstr("but MPI ranks that process "));
}

TEST(MpiParams, AnOperationReportsTheBadFieldAsItsStatus) {
  OperationPtr op = MakeOperation("BarrierOperation", {{"rank", WorldRank()},
                                                       {"rankSize", WorldSize() + 1},
                                                       {"backend", "mpi"},
                                                       {"commDomain", "bad-size-op"}});
  std::vector<HostTensor> none;
  EXPECT_EQ(RunOperation(*op, Tensors(none), Tensors(none)), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat("rankSize = ", WorldSize() + 1)));
}

/// The rank param is the split key: any permutation of 0..R-1 is accepted and becomes Rank().
TEST(MpiParams, RanksMayPermuteTheWorld) {
  const int R = WorldSize();
  Status status;
  std::string message;
  auto comm = TryCreate(MpiParam("reversed", R - 1 - WorldRank(), R), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  EXPECT_EQ(comm->Rank(), R - 1 - WorldRank());
  std::vector<int32_t> expected;
  for (int r = R - 1; r >= 0; --r) expected.push_back(r);
  EXPECT_EQ(MembersOf(*comm), expected);
}

TEST(MpiDomains, TwoDomainsGiveDisjointCommunicators) {
  const int parity = WorldRank() % 2;
  const int size = (WorldSize() + 1 - parity) / 2;
  Status status;
  std::string message;
  auto comm =
      TryCreate(MpiParam(parity == 0 ? "even" : "odd", WorldRank() / 2, size), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  EXPECT_EQ(comm->Size(), size);
  std::vector<int32_t> expected;
  for (int w = parity; w < WorldSize(); w += 2) expected.push_back(w);
  EXPECT_EQ(MembersOf(*comm), expected);
  int64_t sum = WorldRank();
  comm->AllReduce(&sum, &sum, 1, ACL_INT64, ReduceOp::kSum);
  int64_t golden = 0;
  for (int32_t w : expected) golden += w;
  EXPECT_EQ(sum, golden);
}

/// Rank 0 sends, rank 1 receives a different count, then a different dtype: both fail with the
/// same message; then a matching pair still goes through on the same communicator.
TEST(MpiSendRecv, MismatchFailsOnBothSides) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  Status status;
  std::string message;
  auto comm = TryCreate(MpiParam("p2p", WorldRank(), WorldSize()), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  std::vector<int32_t> buf(8, WorldRank() == 0 ? 7 : 0);
  const auto transfer = [&](size_t sendCount, size_t recvCount, DataType recvType) {
    return Guarded([&] {
      if (WorldRank() == 0) comm->Send(buf.data(), sendCount, ACL_INT32, 1);
      if (WorldRank() == 1) comm->Recv(buf.data(), recvCount, recvType, 0);
    });
  };
  if (WorldRank() > 1) return;
  EXPECT_EQ(transfer(5, 6, ACL_INT32), ERROR_RANK_MISMATCH);
  EXPECT_EQ(LastErrorMessage(),
            "mpi Send/Recv: rank 0 sends 5 elements of int32 to rank 1, which expects 6 elements "
            "of int32 from rank 0");
  EXPECT_EQ(transfer(5, 5, ACL_FLOAT), ERROR_RANK_MISMATCH);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("which expects 5 elements of float"));
  EXPECT_EQ(transfer(5, 5, ACL_INT32), NO_ERROR) << LastErrorMessage();
  EXPECT_EQ(buf[4], 7);
  EXPECT_EQ(buf[5], WorldRank() == 0 ? 7 : 0);
}

/// Groups of sends and receives (exchange_cases.h): rings where every rank sends first, every
/// pair twice in one group, a group against blocking Send/Recv, a mismatch inside a group.
TEST(MpiExchange, GroupsNeverDeadlockAndMismatchesFailOnBothSides) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  Status status;
  std::string message;
  auto comm = TryCreate(MpiParam("exchange", WorldRank(), WorldSize()), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  ExchangeEveryCase(*comm, WorldRank(), WorldSize());
}

/// The movement primitives on the 1-byte types the suite does not cover (bool, uint8, int8).
/// Run only by ctest's MpiWatchdog.R2 (COLLOPS_TIMEOUT=2), which passes when the output carries
/// the watchdog's message: rank 1 never makes the AllReduce that rank 0 blocks in, so rank 0's
/// watchdog must end it naming the op and the rank, and mpirun then ends the job (no hang).
TEST(MpiWatchdogStandalone, BlockedCallEndsTheJobNamingOpAndRank) {
  const int R = WorldSize(), me = WorldRank();
  Status status;
  std::string message;
  auto comm = TryCreate(MpiParam("watchdog", me, R), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  if (me != 0) {
    sleep(60);  // killed by mpirun long before this ends
    return;
  }
  int32_t in = 1, out = 0;
  comm->AllReduce(&in, &out, 1, ACL_INT32, ReduceOp::kSum);
  ADD_FAILURE() << "AllReduce returned although rank 1 never called it";
}

/// A rank table that splits this one machine into two servers, under a plain `mpirun -np 4`:
/// the hierarchical communicator over the mpi engine, with no COLLOPS_ENGINE needed: mpirun's
/// environment is enough to pick the engine.
TEST(MpiRankTable, TwoServersUnderMpirunOnOneNodeRunHierarchicallyOverMpi) {
  if (WorldSize() != 4 || TestBackend() != "mpi") GTEST_SKIP() << "needs mpirun -np 4";
  CommParam param;
  param.rank = WorldRank();
  param.rankSize = 4;
  param.backend = "hccl";
  param.commDomain = "two-servers";
  param.rankTableFile = COLLOPS_SOURCE_DIR "/tests/cases/rank_tables/two_servers.json";
  std::shared_ptr<Communicator> comm;
  try {
    comm = DefaultContext().Communicators().Get(param);
  } catch (const Error& e) {
    FAIL() << StatusName(e.status()) << ": " << e.what();
  }
  EXPECT_EQ(comm->BackendName(), "hccl(lccl+mpi)");
  int32_t in = WorldRank() + 1, out = 0;
  comm->AllReduce(&in, &out, 1, ACL_INT32, ReduceOp::kSum);
  EXPECT_EQ(out, 10);
}

/// Run only by ctest's MpiAfterFinalize.R1 (the application initialises MPI): an operation on a
/// communicator made before the application's MPI_Finalize must fail with
/// ERROR_BACKEND_UNAVAILABLE, not call into MPI (which aborts the process).
TEST(MpiAfterFinalizeStandalone, AnOperationAfterTheApplicationsFinalizeIsRefused) {
  ASSERT_TRUE(ApplicationInitialisedMpi());
  OperationPtr op = MakeOperation(
      "BarrierOperation",
      {{"backend", "mpi"}, {"rank", 0}, {"rankSize", 1}, {"commDomain", "after-finalize"}});
  std::vector<HostTensor> none;
  ASSERT_EQ(RunOperation(*op, Tensors(none), Tensors(none)), NO_ERROR) << LastErrorMessage();
  FinaliseMpiAsTheApplication();
  EXPECT_EQ(RunOperation(*op, Tensors(none), Tensors(none)), ERROR_BACKEND_UNAVAILABLE);
  EXPECT_THAT(LastErrorMessage(), ::testing::HasSubstr("MPI has been finalised in this process"));
}

/// Every rank of a call must take the same path (one MPI collective, or chunked point to point),
/// though only the counts are shared: displacements and the counts of other pairs are each rank's
/// own. Under MpiChunked (COLLOPS_MPI_MAX_COUNT=1000) the last rank's output places its pieces
/// beyond one int while the others' do not, and only some ranks move large pieces; a choice that
/// rested on those hung every rank until the watchdog.
TEST(MpiMovement, RanksWithOtherDisplacementsOrCountsTakeTheSamePath) {
  const int R = WorldSize(), me = WorldRank();
  Status status;
  std::string message;
  auto comm = TryCreate(MpiParam("same-path", me, R), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  const int64_t far = me == R - 1 ? 5000 : 0;  // beyond COLLOPS_MPI_MAX_COUNT=1000
  std::vector<int64_t> counts(R, 10), displs(R);
  for (int r = 0; r < R; ++r) displs[r] = far + 10 * r;
  std::vector<int32_t> in(10, me), out(far + 10 * R, -1);
  comm->AllGatherV(in.data(), 10, out.data(), counts.data(), displs.data(), ACL_INT32);
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(std::vector<int32_t>(out.begin() + displs[r], out.begin() + displs[r] + 10),
              std::vector<int32_t>(10, r))
        << "AllGatherV piece of rank " << r;
  }
  EXPECT_EQ(std::count(out.begin(), out.end(), -1), far) << "AllGatherV wrote outside its pieces";
  // AllToAllV: rank 0 sends 3000 elements to itself, every other piece is 2 elements.
  std::vector<int64_t> sendCounts(R, 2), recvCounts(R, 2), sdispls(R), rdispls(R);
  if (me == 0) sendCounts[0] = recvCounts[0] = 3000;
  for (int r = 1; r < R; ++r) {
    sdispls[r] = sdispls[r - 1] + sendCounts[r - 1];
    rdispls[r] = rdispls[r - 1] + recvCounts[r - 1];
  }
  std::vector<int32_t> send(sdispls[R - 1] + sendCounts[R - 1]);
  for (int r = 0; r < R; ++r) {
    for (int64_t k = 0; k < sendCounts[r]; ++k) send[sdispls[r] + k] = me * 100000 + r * 10000 + k;
  }
  std::vector<int32_t> recv(rdispls[R - 1] + recvCounts[R - 1], -1);
  comm->AllToAllV(send.data(), sendCounts.data(), sdispls.data(), recv.data(), recvCounts.data(),
                  rdispls.data(), ACL_INT32);
  for (int r = 0; r < R; ++r) {
    for (int64_t k = 0; k < recvCounts[r]; ++k) {
      ASSERT_EQ(recv[rdispls[r] + k], r * 100000 + me * 10000 + k)
          << "from rank " << r << " at " << k;
    }
  }
}

/// StartAllToAllV posts the pieces and returns; a collective on another communicator runs before
/// FinishAllToAllV, which completes them (chunked pieces beyond COLLOPS_MPI_MAX_COUNT=1000, empty
/// ones, the rank's own). A second Start before the Finish is refused without touching the first;
/// a Finish with nothing started does nothing.
TEST(MpiMovement, StartedAllToAllVFinishesAroundAnotherCommunicatorsCollective) {
  const int R = WorldSize(), me = WorldRank();
  Status status;
  std::string message;
  auto comm = TryCreate(MpiParam("started", me, R), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  auto other = TryCreate(MpiParam("started-other", me, R), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  auto count = [](int j, int i) { return static_cast<int64_t>((j + 2 * i) % 3) * 1700; };
  std::vector<int64_t> sendCounts(R), recvCounts(R), sdispls(R), rdispls(R);
  for (int r = 0; r < R; ++r) {
    sendCounts[r] = count(me, r);
    recvCounts[r] = count(r, me);
    if (r > 0) {
      sdispls[r] = sdispls[r - 1] + sendCounts[r - 1];
      rdispls[r] = rdispls[r - 1] + recvCounts[r - 1];
    }
  }
  std::vector<int32_t> send(sdispls[R - 1] + sendCounts[R - 1]);
  for (int r = 0; r < R; ++r) {
    for (int64_t k = 0; k < sendCounts[r]; ++k) send[sdispls[r] + k] = me * 100000 + r * 10000 + k;
  }
  std::vector<int32_t> recv(rdispls[R - 1] + recvCounts[R - 1] + 1, -1);
  comm->FinishAllToAllV();  // nothing started: nothing to do
  comm->StartAllToAllV(send.data(), sendCounts.data(), sdispls.data(), recv.data(),
                       recvCounts.data(), rdispls.data(), ACL_INT32);
  try {
    comm->StartAllToAllV(send.data(), sendCounts.data(), sdispls.data(), recv.data(),
                         recvCounts.data(), rdispls.data(), ACL_INT32);
    ADD_FAILURE() << "a second Start before the Finish was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INTERNAL_ERROR) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("was not finished"));
  }
  int32_t sum = me;
  other->AllReduce(&sum, &sum, 1, ACL_INT32, ReduceOp::kSum);
  EXPECT_EQ(sum, R * (R - 1) / 2);
  comm->FinishAllToAllV();
  for (int r = 0; r < R; ++r) {
    for (int64_t k = 0; k < recvCounts[r]; ++k) {
      ASSERT_EQ(recv[rdispls[r] + k], r * 100000 + me * 10000 + k)
          << "from rank " << r << " at " << k;
    }
  }
  EXPECT_EQ(recv.back(), -1) << "written past the last piece";
}

TEST(MpiMovement, ByteTypesMove) {
  const int R = WorldSize(), me = WorldRank();
  Status status;
  std::string message;
  auto comm = TryCreate(MpiParam("movement", me, R), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  for (DataType dtype : {ACL_BOOL, ACL_UINT8, ACL_INT8}) {
    SCOPED_TRACE(DataTypeName(dtype));
    const auto value = [&](int rank, int i) {
      return static_cast<uint8_t>(dtype == ACL_BOOL ? (rank + i) % 2 : rank * 16 + i);
    };
    // AllGatherV: rank r sends r + 1 elements; ranges land back to back.
    std::vector<int64_t> counts(R), displs(R);
    int64_t total = 0;
    for (int r = 0; r < R; ++r) counts[r] = r + 1, displs[r] = total, total += r + 1;
    std::vector<uint8_t> in(me + 1), out(total, 0xEE);
    for (int i = 0; i <= me; ++i) in[i] = value(me, i);
    comm->AllGatherV(in.data(), in.size(), out.data(), counts.data(), displs.data(), dtype);
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i <= r; ++i) EXPECT_EQ(out[displs[r] + i], value(r, i)) << r << "," << i;
    }
    // Broadcast from the last rank.
    std::vector<uint8_t> buf(5);
    for (int i = 0; i < 5; ++i) buf[i] = value(me, i);
    comm->Broadcast(buf.data(), buf.size(), dtype, R - 1);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(buf[i], value(R - 1, i));
    // AllToAllV: one element to each rank, value(sender, receiver).
    std::vector<int64_t> ones(R, 1), iota(R);
    for (int r = 0; r < R; ++r) iota[r] = r;
    std::vector<uint8_t> send(R), recv(R, 0xEE);
    for (int r = 0; r < R; ++r) send[r] = value(me, r);
    comm->AllToAllV(send.data(), ones.data(), iota.data(), recv.data(), ones.data(), iota.data(),
                    dtype);
    for (int r = 0; r < R; ++r) EXPECT_EQ(recv[r], value(r, me));
  }
}

/// OpenMPI over TCP moves a large message only while its sender is inside MPI (weak progress).
/// Hosts {0, 1} and {2} (COLLOPS_HOST_ID, COLLOPS_ENGINE=mpi): rank 0 starts an 8 MiB message to
/// rank 1 and then waits inside its host (the intra step of the hierarchical Barrier, lccl) for
/// rank 1, which is still in MPI_Recv for that very message. Only the lccl waits' idle hook, which
/// the hierarchical communicator points at the engine's Progress(), lets the data through; without
/// it rank 0 times out (COLLOPS_TIMEOUT). Needs TCP between the ranks: ctest MpiProgress.R3 runs
/// it with btl self,tcp (shared memory progresses without the sender).
TEST(MpiProgress, WaitsInsideAHostDriveTheEngine) {
  if (WorldSize() != 3) GTEST_SKIP() << "needs three ranks";
  const int rank = WorldRank();
  ASSERT_EQ(setenv("COLLOPS_HOST_ID", rank < 2 ? "progress-a" : "progress-b", 1), 0);
  ASSERT_EQ(setenv("COLLOPS_ENGINE", "mpi", 1), 0);  // mpirun says one node
  CommParam param;
  param.backend = "hccl";
  param.commDomain = "progress";
  param.rank = rank;
  param.rankSize = 3;
  Status status;
  std::string message;
  auto comm = TryCreate(param, &status, &message);
  unsetenv("COLLOPS_HOST_ID");
  unsetenv("COLLOPS_ENGINE");
  ASSERT_EQ(status, NO_ERROR) << message;
  EXPECT_EQ(comm->BackendName(), "hccl(lccl+mpi)");
  comm->Barrier();  // everything set up: from here on rank 0 calls MPI only through the hook

  std::vector<uint8_t> payload(8 << 20);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  MPI_Request request = MPI_REQUEST_NULL;
  if (rank == 0) {
    ASSERT_EQ(MPI_Isend(payload.data(), static_cast<int>(payload.size()), MPI_BYTE, 1, 77,
                        MPI_COMM_WORLD, &request),
              MPI_SUCCESS);
  }
  std::vector<uint8_t> received;
  if (rank == 1) {
    received.assign(payload.size(), 0);
    ASSERT_EQ(MPI_Recv(received.data(), static_cast<int>(received.size()), MPI_BYTE, 0, 77,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
  }
  status = Guarded([&] { comm->Barrier(); });
  EXPECT_EQ(status, NO_ERROR) << "rank " << rank << ": " << LastErrorMessage();
  if (rank == 0) {
    EXPECT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
  }
  if (rank == 1) {
    EXPECT_TRUE(received == payload);
  }
}

/// Leaves this job's mark "up-<job>" in `dir` and waits up to 60 s for another job's; false when
/// none came (or the mark could not be made).
bool MarkAndAwaitOtherJob(const std::string& dir) {
  std::FILE* mark = std::fopen((dir + "/up-" + JobTag()).c_str(), "w");
  if (mark == nullptr) return false;
  std::fclose(mark);
  for (int tries = 0; tries < 600; ++tries) {
    int marks = 0;
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* entry = readdir(d)) marks += std::string(entry->d_name).rfind("up-", 0) == 0;
      closedir(d);
    }
    if (marks >= 2) return true;
    usleep(100 * 1000);
  }
  return false;
}

/// Run by ctest MpiConcurrentJobs.R2 (concurrent_jobs.sh): two jobs of this test at once, in one
/// lccl domain, without COLLOPS_JOB_ID. Each job's rank 0 marks the directory once its job holds
/// its communicator and then waits for the other job's mark, so both jobs hold theirs at the same
/// time; with one job key for both, the later job's ranks would find their names taken.
TEST(MpiJobKeyStandalone, JobsOfTwoMpirunsHoldOneDomainAtOnce) {
  const char* dir = std::getenv("COLLOPS_TEST_CONCURRENT_JOBS_DIR");
  ASSERT_NE(dir, nullptr) << "run through tests/mpi/concurrent_jobs.sh";
  const char* mpirunJob = std::getenv("PMIX_NAMESPACE");
  ASSERT_NE(mpirunJob, nullptr) << "mpirun sets PMIX_NAMESPACE";
  EXPECT_EQ(shm::JobKeyFromEnv(), std::string("pmix:") + mpirunJob);
  // The job's own coordination goes through MPI (and initialises it).
  Status status;
  std::string message;
  auto job = TryCreate(MpiParam("job-key", WorldRank(), WorldSize()), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  CommParam param;
  param.backend = "lccl";
  param.commMode = COMM_MULTI_PROCESS;
  param.commDomain = "concurrent";
  param.rank = WorldRank();
  param.rankSize = WorldSize();
  auto comm = TryCreate(param, &status, &message);
  // Every rank of this job learns whether all of them got one.
  int32_t failed = status != NO_ERROR, anyFailed = 0;
  job->AllReduce(&failed, &anyFailed, 1, ACL_INT32, ReduceOp::kMax);
  ASSERT_EQ(status, NO_ERROR) << message;
  ASSERT_EQ(anyFailed, 0) << "another rank of this job could not create its communicator";
  int32_t in = WorldRank() + 1, sum = 0;
  comm->AllReduce(&in, &sum, 1, ACL_INT32, ReduceOp::kSum);
  EXPECT_EQ(sum, WorldSize() * (WorldSize() + 1) / 2);
  int32_t bothUp = WorldRank() == 0 ? MarkAndAwaitOtherJob(dir) : 0;
  job->Broadcast(&bothUp, 1, ACL_INT32, 0);
  EXPECT_TRUE(bothUp) << "the other job never held its communicator (or no mark in " << dir << ")";
  comm->AllReduce(&in, &sum, 1, ACL_INT32, ReduceOp::kSum);  // still ours, still whole
  EXPECT_EQ(sum, WorldSize() * (WorldSize() + 1) / 2);
}

TEST(MpiErrors, MpiErrorsBecomeCommFail) {
  Status status;
  std::string message;
  auto comm = TryCreate(MpiParam("errors", WorldRank(), WorldSize()), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  // Every rank passes the same invalid root: MPI rejects it locally, with MPI_ERRORS_RETURN.
  int32_t value = 1;
  EXPECT_EQ(Guarded([&] { comm->Broadcast(&value, 1, ACL_INT32, WorldSize()); }), ERROR_COMM_FAIL);
  EXPECT_THAT(LastErrorMessage(), StartsWith("MPI_Bcast: "));
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(MPI_ERR_COUNT, text, &length);
  EXPECT_EQ(Guarded([] { mpi::CheckMpi(MPI_ERR_COUNT, "MPI_Send"); }), ERROR_COMM_FAIL);
  EXPECT_EQ(LastErrorMessage(), std::string("MPI_Send: ") + std::string(text, length));
  // The communicator is still usable afterwards.
  comm->Barrier();
}

TEST(MpiInit, LibraryInitialisesMpiOnlyIfTheApplicationHasNot) {
  EXPECT_FALSE(MpiInitialisedAtStart());
  Status status;
  std::string message;
  TryCreate(MpiParam("init", WorldRank(), WorldSize()), &status, &message);
  ASSERT_EQ(status, NO_ERROR) << message;
  int initialized = 0;
  MPI_Initialized(&initialized);
  EXPECT_TRUE(initialized);
  // Whether it finalises at exit is checked by main() after the library's atexit handler.
  EXPECT_EQ(mpi::LibraryInitialisedMpi(), !ApplicationInitialisedMpi());
}

}  // namespace
}  // namespace testing
}  // namespace collops
