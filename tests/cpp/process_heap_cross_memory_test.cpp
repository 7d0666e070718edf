// process_vm_readv on the multi-process lccl communicator (docs/backends.md, "Single copy"):
// large pieces of ordinary memory read from (and AllReduce slices written into) the peers'
// memory in two rounds, its interplay with the heaps, and the staged fallback where the kernel
// refuses it. Every byte is checked against golden values rebuilt independently on each rank.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "core/comm/shm/process_comm.h"
#include "process_heap_checks.h"
#include "process_ranks.h"

namespace collops {
namespace testing {
namespace {

/// Large pieces of ordinary memory skip the slots: the receivers read them from the senders'
/// memory after the first round, and a second round keeps the inputs until they have. So an
/// exchange many regions long takes two rounds instead of one per region (every piece here of
/// 4 KiB and more moves so; smaller ones fit a region), and matches golden (CheckedAllToAllV
/// checks every byte, gaps included); with COLLOPS_SHM_CMA_BYTES=0 it is staged again.
TEST_P(ProcessHeapCollectives, LargeOrdinaryPiecesMoveByProcessVmReadv) {
  const int size = GetParam();
  for (const bool on : {true, false}) {
    const ProcessRanksOptions options = SmallSlots(on);
    RunProcessRanks(
        size,
        [size, on](int rank) {
          auto comm = MakeProcessComm(rank, size, "cma-rounds");
          EXPECT_EQ(comm->CrossMemory(), on) << "rank " << rank;
          const uint64_t large = CheckedAllToAllV(*comm, 40000, {0, 0});  // pieces up to 160 KB
          if (on) {
            EXPECT_EQ(large, 2u) << "rank " << rank;
          } else {
            EXPECT_GT(large, 2u) << "rank " << rank;
          }
          EXPECT_EQ(CheckedAllToAllV(*comm, 1000, {0, 0}), 1u);  // small pieces: one round
        },
        options);
  }
}

/// An AllReduce whose slices reach the threshold reads them from the peers' memory and writes the
/// reduced slices into theirs: two rounds whatever the size (and in place too), where the staged
/// reduce-scatter + all-gather takes two per half-slot chunk; golden either way. R=2 by the
/// automatic rule (it takes this path on any number of CPUs); R>2 forced, since with more than two
/// ranks per CPU the rule keeps the staged path.
TEST_P(ProcessHeapCollectives, LargeAllReducesMoveByProcessVmReadvInTwoRounds) {
  const int size = GetParam();
  for (const bool on : {true, false}) {
    ProcessRanksOptions options = SmallSlots(on);
    if (size > 2) options.env["COLLOPS_ALGO_ALLREDUCE"] = "cma";
    RunProcessRanks(
        size,
        [size, on](int rank) {
          auto comm = MakeProcessComm(rank, size, "cma-allreduce");
          if (size > 2 && !on) {  // forced where it cannot run
            ExpectForcedFails(*comm, "COLLOPS_ALGO_ALLREDUCE=cma", "COLLOPS_SHM_CMA_BYTES=0",
                              [&] { CheckedAllReduce(*comm, 100003, false); });
            return;
          }
          for (const bool inPlace : {false, true}) {
            const uint64_t rounds = CheckedAllReduce(*comm, 100003, inPlace);  // 400 KB
            if (on) {
              EXPECT_EQ(rounds, 2u) << "rank " << rank;
            } else {
              EXPECT_GT(rounds, 2u) << "rank " << rank;
            }
          }
        },
        options);
  }
}

/// A raw AllReduce (no agreement check before it) whose counts differ across ranks would write past
/// the smaller outputs of the peers: every rank fails with ERROR_RANK_MISMATCH before moving any
/// data (the outputs keep their poison), and the next, agreeing call works.
TEST_P(ProcessHeapCollectives, RawProcessVmWritevAllReduceWithDisagreeingCountsFailsBeforeWriting) {
  const int size = GetParam();
  ProcessRanksOptions options = SmallSlots(true);
  options.env["COLLOPS_ALGO_ALLREDUCE"] = "cma";
  RunProcessRanks(
      size,
      [size](int rank) {
        auto comm = MakeProcessComm(rank, size, "cma-mismatch");
        const size_t count = rank == 1 ? 30000 : 20000;
        std::vector<float> in(count, 1.0f), out(count, -7.0f);
        try {
          comm->AllReduce(in.data(), out.data(), count, ACL_FLOAT, ReduceOp::kSum);
          ADD_FAILURE() << "rank " << rank << ": disagreeing counts were accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH) << e.what();
          EXPECT_NE(std::string(e.what()).find("no data moved"), std::string::npos) << e.what();
        }
        EXPECT_EQ(std::count(out.begin(), out.end(), -7.0f), static_cast<int64_t>(count))
            << "rank " << rank << ": output written";
        EXPECT_FALSE(comm->Broken());
        CheckedAllReduce(*comm, 20000, /*inPlace=*/false);
      },
      options);
}

/// AllGatherBytes of `bytes` per rank, then Broadcast of as many from every root, on ordinary
/// memory: checks every byte; returns the most rounds any of the calls took.
uint64_t CheckedGatherAndBroadcast(shm::ProcessCommunicator& comm, size_t bytes) {
  const int rank = comm.Rank(), size = comm.Size();
  std::vector<uint8_t> in(bytes), out(bytes * size, 0xee), want(bytes * size);
  for (size_t i = 0; i < bytes; ++i) in[i] = ValueAt(rank, static_cast<int64_t>(i));
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < bytes; ++i) want[r * bytes + i] = ValueAt(r, static_cast<int64_t>(i));
  }
  uint64_t before = comm.Rounds();
  comm.AllGatherBytes(in.data(), out.data(), bytes);
  uint64_t most = comm.Rounds() - before;
  EXPECT_TRUE(out == want) << "rank " << rank << ": AllGatherBytes of " << bytes;
  for (int root = 0; root < size; ++root) {
    std::vector<uint8_t> buf(bytes);
    for (size_t i = 0; i < bytes; ++i) buf[i] = ValueAt(rank, static_cast<int64_t>(i));
    before = comm.Rounds();
    comm.Broadcast(buf.data(), bytes, ACL_UINT8, root);
    most = std::max(most, comm.Rounds() - before);
    EXPECT_TRUE(std::equal(buf.begin(), buf.end(), want.begin() + root * bytes))
        << "rank " << rank << ": Broadcast of " << bytes << " from " << root;
  }
  return most;
}

/// AllGather and Broadcast (forced to process_vm_readv, as the automatic rule keeps them staged
/// on an oversubscribed host): receivers read every input of 4 KiB and more from its rank's
/// process, so a call many slots long takes two rounds; golden. Forced where it is off, every
/// call fails naming the knob.
TEST_P(ProcessHeapCollectives, LargeGathersAndBroadcastsMoveByProcessVmReadvInTwoRounds) {
  const int size = GetParam();
  for (const bool on : {true, false}) {
    ProcessRanksOptions options = SmallSlots(on);
    options.env["COLLOPS_ALGO_ALLGATHER"] = "cma";
    options.env["COLLOPS_ALGO_BROADCAST"] = "cma";
    RunProcessRanks(
        size,
        [size, on](int rank) {
          auto comm = MakeProcessComm(rank, size, "cma-gather");
          if (!on) {
            ExpectForcedFails(*comm, "COLLOPS_ALGO_ALLGATHER=cma", "COLLOPS_SHM_CMA_BYTES=0",
                              [&] { CheckedGatherAndBroadcast(*comm, 1000); });
            return;
          }
          EXPECT_EQ(CheckedGatherAndBroadcast(*comm, 100003), 2u) << "rank " << rank;
          EXPECT_EQ(CheckedGatherAndBroadcast(*comm, 1000), 1u);  // below the threshold
        },
        options);
  }
}

/// A root whose buffer lies in its heap publishes no process_vm_readv address, and its peers must
/// not read the one it published for an earlier call: a Broadcast by process_vm_readv takes two
/// rounds, so the next call's first round reuses its slot. The old buffer still holds other
/// values; a peer that read it would get them instead of the heap buffer's.
TEST_P(ProcessHeapCollectives, SharedBroadcastAfterProcessVmReadvOneReadsOnlyTheHeap) {
  const int size = GetParam();
  ProcessRanksOptions options = SmallSlots(true);
  options.env["COLLOPS_ALGO_BROADCAST"] = "cma";
  options.env["COLLOPS_ALGO_ALLGATHER"] = "cma";
  RunProcessRanks(
      size,
      [size](int rank) {
        auto comm = MakeProcessComm(rank, size, "stale-cma");
        ASSERT_TRUE(comm->CrossMemory()) << "process_vm_readv refused: the test needs it";
        const int root = size - 1;
        const size_t count = 16384;  // 64 KiB of int32: above every threshold
        for (const bool gather : {false, true}) {
          SCOPED_TRACE(gather ? "AllGather first" : "Broadcast first");
          std::vector<int32_t> ordinary(count, rank == root ? 7 : 0);
          if (gather) {
            std::vector<int32_t> all(count * size);
            std::vector<int64_t> counts(size, count), displs(size);
            for (int r = 0; r < size; ++r) displs[r] = r * static_cast<int64_t>(count);
            comm->AllGatherV(ordinary.data(), count, all.data(), counts.data(), displs.data(),
                             ACL_INT32);
          } else {
            comm->Broadcast(ordinary.data(), count, ACL_INT32, root);
            EXPECT_EQ(ordinary, std::vector<int32_t>(count, 7)) << "rank " << rank;
          }
          std::fill(ordinary.begin(), ordinary.end(), -1);  // what a stale read would copy
          auto* shared = static_cast<int32_t*>(comm->AllocateShared(count * sizeof(int32_t)));
          ASSERT_NE(shared, nullptr);
          std::fill(shared, shared + count, rank == root ? 3 : 0);
          comm->Broadcast(shared, count, ACL_INT32, root);
          EXPECT_EQ(std::vector<int32_t>(shared, shared + count), std::vector<int32_t>(count, 3))
              << "rank " << rank << " of " << size;
          comm->FreeShared(shared);
          comm->Barrier();  // the root's ordinary buffer outlives every peer's read
        }
      },
      options);
}

/// Drops CAP_SYS_PTRACE (root has it), without which this process may read only the memory of
/// dumpable processes of its user; `closed`: makes this process not dumpable.
void RefuseCrossMemory(bool closed = true) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  ASSERT_EQ(syscall(SYS_capget, &header, data), 0);
  data[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  ASSERT_EQ(syscall(SYS_capset, &header, data), 0);
  if (closed) {
    ASSERT_EQ(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), 0);
  }
}

/// Where the kernel refuses process_vm_readv, the probe at creation finds out on every rank and
/// every piece is staged: the same results, no error. Forced to process_vm_readv there, every
/// call fails naming the knob.
TEST_P(ProcessHeapCollectives, RefusedProcessVmReadvFallsBackToStagedCopies) {
  const int size = GetParam();
  ProcessRanksOptions options = SmallSlots(true);
  RunProcessRanks(
      size,
      [size](int rank) {
        RefuseCrossMemory();
        auto comm = MakeProcessComm(rank, size, "cma-refused");
        EXPECT_FALSE(comm->CrossMemory()) << "rank " << rank;
        EXPECT_GT(CheckedAllToAllV(*comm, 40000, {0, 0}), 2u);
        EXPECT_GT(CheckedAllReduce(*comm, 100003, /*inPlace=*/false), 2u);
        EXPECT_GT(CheckedGatherAndBroadcast(*comm, 100003), 2u);
        // Point to point is staged as well.
        std::vector<uint8_t> message(100003);
        for (size_t i = 0; i < message.size(); ++i) message[i] = ValueAt(0, i);
        if (rank == 0) comm->Send(message.data(), message.size(), ACL_UINT8, 1);
        if (rank == 1) {
          std::vector<uint8_t> got(message.size());
          comm->Recv(got.data(), got.size(), ACL_UINT8, 0);
          EXPECT_TRUE(got == message);
        }
        for (const char* knob :
             {"COLLOPS_ALGO_ALLREDUCE", "COLLOPS_ALGO_ALLGATHER", "COLLOPS_ALGO_BROADCAST",
              "COLLOPS_ALGO_ALLTOALL", "COLLOPS_ALGO_SENDRECV"}) {
          setenv(knob, "cma", 1);
        }
        auto forced = MakeProcessComm(rank, size, "cma-refused-forced");
        const std::string why = "the kernel refused it at creation";
        ExpectForcedFails(*forced, "COLLOPS_ALGO_ALLREDUCE=cma", why,
                          [&] { CheckedAllReduce(*forced, 1000, false); });
        ExpectForcedFails(*forced, "COLLOPS_ALGO_ALLGATHER=cma", why, [&] {
          std::vector<uint8_t> out(size);
          forced->AllGatherBytes("x", out.data(), 1);
        });
        ExpectForcedFails(*forced, "COLLOPS_ALGO_BROADCAST=cma", why, [&] {
          char x = 0;
          forced->Broadcast(&x, 1, ACL_INT8, 0);
        });
        ExpectForcedFails(*forced, "COLLOPS_ALGO_ALLTOALL=cma", why,
                          [&] { CheckedAllToAllV(*forced, 1000, {0, 0}); });
        if (rank < 2) {
          ExpectForcedFails(*forced, "COLLOPS_ALGO_SENDRECV=cma", why, [&] {
            char x = 0;
            if (rank == 0) forced->Send(&x, 1, ACL_INT8, 1);
            if (rank == 1) forced->Recv(&x, 1, ACL_INT8, 0);
          });
        }
      },
      options);
}

/// Only the reads of rank 1's memory are refused (it is not dumpable, and no rank may override
/// that): still every rank stages, since a piece must move the same way on both of its sides.
TEST(ProcessHeap, OneRankRefusingProcessVmReadvTurnsItOffForAll) {
  RunProcessRanks(
      3,
      [](int rank) {
        RefuseCrossMemory(/*closed=*/rank == 1);
        auto comm = MakeProcessComm(rank, 3, "cma-one-refuses");
        EXPECT_FALSE(comm->CrossMemory()) << "rank " << rank;
        EXPECT_GT(CheckedAllToAllV(*comm, 40000, {0, 0}), 2u);
        EXPECT_GT(CheckedAllReduce(*comm, 100003, /*inPlace=*/true), 2u);
      },
      SmallSlots(true));
}

TEST(ProcessHeap, RejectsBadCrossMemoryThresholdByName) {
  for (const char* value : {"-1", "abc", "64KB"}) {
    ExpectEnvRejected("COLLOPS_SHM_CMA_BYTES", value);
  }
}

}  // namespace
}  // namespace testing
}  // namespace collops
