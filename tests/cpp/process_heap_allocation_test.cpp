// AllocateShared on the multi-process lccl communicator: the heap's size and cache knobs, a
// forked child (a DataLoader worker) leaving its parent's shared memory alone, counts that
// disagree on shared buffers, page faults of reused ranges, and no heap in thread mode.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "collops/verified_communicator.h"
#include "core/comm/shm/process_comm.h"
#include "process_heap_checks.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace testing {
namespace {

TEST(ProcessHeap, HeapSizeBoundsAllocationsAndZeroDisablesIt) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "1M";
  RunProcessRanks(
      2,
      [](int rank) {
        auto comm = MakeProcessComm(rank, 2, "heap-size");
        void* half = comm->AllocateShared(512 << 10);
        ASSERT_NE(half, nullptr);
        EXPECT_EQ(comm->AllocateShared(1 << 20), nullptr);  // no room: null, not an error
        EXPECT_TRUE(comm->FreeShared(half));
        void* whole = comm->AllocateShared(1 << 20);
        EXPECT_NE(whole, nullptr);
        // Through the wrapper the torch.distributed backend uses, too.
        VerifiedCommunicator verified(comm, "test");
        EXPECT_EQ(verified.AllocateShared(1), nullptr);
        EXPECT_TRUE(verified.FreeShared(whole));
      },
      options);
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "0";
  RunProcessRanks(
      2,
      [](int rank) {
        auto comm = MakeProcessComm(rank, 2, "heap-none");
        EXPECT_EQ(comm->AllocateShared(4096), nullptr);
        std::vector<int32_t> in(4, rank), out(4, -1);
        comm->AllReduce(in.data(), out.data(), 4, ACL_INT32, ReduceOp::kSum);
        EXPECT_EQ(out[0], 1);
      },
      options);
}

/// The same through the communicator, as a DataLoader worker forked from a torch rank meets it:
/// the child frees what it inherited (its tensors' deleters), asks for shared memory, stops the
/// communicator and destroys it; the parent's buffers, its next allocation and its collectives
/// are untouched. The child's AllocateShared is refused naming the creator, as its calls are.
TEST(ProcessHeap, AForkedChildLeavesItsParentsSharedMemoryAlone) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_HEAP_CACHE_BYTES"] = "0";  // every free gives its pages back
  options.env["COLLOPS_TIMEOUT"] = "20";
  RunProcessRanks(
      2,
      [](int rank) {
        std::shared_ptr<shm::ProcessCommunicator> comm = MakeProcessComm(rank, 2, "heap-fork");
        const size_t count = 1 << 14;
        auto* mine = static_cast<int32_t*>(comm->AllocateShared(count * sizeof(int32_t)));
        ASSERT_NE(mine, nullptr);
        std::fill(mine, mine + count, rank + 1);
        const pid_t child = fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
          bool ok = comm->FreeShared(mine);
          std::string message;
          ok = ok && CaughtStatus([&] { comm->AllocateShared(4096); }, &message) == ERROR_COMM_FAIL;
          ok = ok && message.find(Concat("belongs to pid ", getppid())) != std::string::npos &&
               message.find("a child of fork() cannot use it") != std::string::npos;
          if (!ok) std::fprintf(stderr, "child of rank %d: %s\n", rank, message.c_str());
          comm->Abort(ERROR_COMM_FAIL, "a child of fork() stops what is not its own");
          comm.reset();
          _exit(ok ? 0 : 1);
        }
        int status = 0;
        ASSERT_EQ(waitpid(child, &status, 0), child);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "the child freed, got shared memory or was not told why it cannot";
        size_t changed = 0;
        for (size_t i = 0; i < count; ++i) changed += mine[i] != rank + 1;
        EXPECT_EQ(changed, 0u) << "the child's free reached the parent's buffer";
        auto* next = static_cast<int32_t*>(comm->AllocateShared(count * sizeof(int32_t)));
        ASSERT_NE(next, nullptr);
        comm->AllReduce(mine, next, count, ACL_INT32, ReduceOp::kSum);
        changed = 0;
        for (size_t i = 0; i < count; ++i) changed += next[i] != 3 || mine[i] != rank + 1;
        EXPECT_EQ(changed, 0u);
        EXPECT_TRUE(comm->FreeShared(mine));
        EXPECT_TRUE(comm->FreeShared(next));
      },
      options);
}

/// Counts that disagree are caught by the agreement check that rides with the first round, before
/// any rank reads or writes a peer's heap: every rank gets ERROR_RANK_MISMATCH and its output is
/// untouched, and the communicator stays usable.
TEST(ProcessHeap, DisagreeingCountsOnSharedBuffersFailBeforeAnyCopy) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "64M";
  RunProcessRanks(
      2,
      [](int rank) {
        auto comm = MakeProcessComm(rank, 2, "heap-mismatch");
        VerifiedCommunicator verified(comm, "test");
        const int64_t piece = 1 << 20;
        Placed in(*comm, 2 * piece, true), out(*comm, 2 * piece, true);
        std::memset(out.data(), 0xee, 2 * piece);
        // Rank 1 expects half of what rank 0 sends it.
        std::vector<int64_t> send = {piece, piece}, recv = {rank == 1 ? piece / 2 : piece, piece};
        const std::vector<int64_t> displs = {0, piece};
        try {
          verified.AllToAllV(in.data(), send.data(), displs.data(), out.data(), recv.data(),
                             displs.data(), ACL_INT8);
          ADD_FAILURE() << "rank " << rank << ": disagreeing counts were accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH) << e.what();
        }
        int64_t touched = 0;
        for (int64_t i = 0; i < 2 * piece; ++i) touched += out.data()[i] != 0xee;
        EXPECT_EQ(touched, 0);
        recv[0] = piece;
        verified.AllToAllV(in.data(), send.data(), displs.data(), out.data(), recv.data(),
                           displs.data(), ACL_INT8);
      },
      options);
}

TEST(ProcessHeap, BadHeapSizeIsRejectedByName) {
  for (const char* value : {"-1", "abc", "5X", "2048G"}) {
    ExpectEnvRejected("COLLOPS_SHM_HEAP_BYTES", value);
  }
}

TEST(ProcessHeap, BadHeapCacheSizeIsRejectedByName) {
  for (const char* value : {"-1", "abc", "5X", "2048G"}) {
    ExpectEnvRejected("COLLOPS_SHM_HEAP_CACHE_BYTES", value);
  }
}

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

/// Minor page faults of this rank while it takes a 1 MiB range from the heap again, after freeing
/// one, and writes it, and while its peer writes into it (AllToAllV output in the heap).
void ExpectFaultsOfAReusedRange(bool cached) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_HEAP_CACHE_BYTES"] = cached ? "4M" : "0";
  RunProcessRanks(
      2,
      [cached](int rank) {
        auto comm = MakeProcessComm(rank, 2, "heap-cache");
        const int64_t piece = 512 << 10;
        const std::vector<int64_t> counts = {piece, piece}, displs = {0, piece};
        std::vector<uint8_t> in(2 * piece, static_cast<uint8_t>(rank + 1));
        long faults = 0;
        for (int round = 0; round < 3; ++round) {
          const long before = MinorFaults();
          auto* out = static_cast<uint8_t*>(comm->AllocateShared(2 * piece));
          ASSERT_NE(out, nullptr);
          std::memset(out, 0, piece);
          comm->AllToAllV(in.data(), counts.data(), displs.data(), out, counts.data(),
                          displs.data(), ACL_INT8);
          ASSERT_EQ(out[0], 1);
          ASSERT_EQ(out[piece], 2);
          comm->Barrier();  // the peer is done writing before this rank frees
          EXPECT_TRUE(comm->FreeShared(out));
          if (round > 0) faults += MinorFaults() - before;
        }
        // 256 pages per round come back through faults without the cache; with it none should.
        if (cached) {
          EXPECT_LT(faults, 64) << "rank " << rank;
        } else {
          EXPECT_GE(faults, 2 * 128) << "rank " << rank;
        }
      },
      options);
}

TEST(ProcessHeap, ReusedRangeIsNotFaultedInAgain) { ExpectFaultsOfAReusedRange(true); }

TEST(ProcessHeap, WithoutACacheEveryReuseFaultsItsPagesIn) { ExpectFaultsOfAReusedRange(false); }

TEST(ProcessHeap, ThreadModeHasNoHeap) {
  CommParam param;
  param.rank = 0;
  param.rankSize = 1;
  param.backend = "lccl";
  param.commMode = COMM_MULTI_THREAD;
  param.commDomain = "heap-thread";
  auto comm = CreateCommunicator(param);
  EXPECT_EQ(comm->AllocateShared(64), nullptr);
  int local = 0;
  EXPECT_FALSE(comm->FreeShared(&local));
}

}  // namespace
}  // namespace testing
}  // namespace collops
