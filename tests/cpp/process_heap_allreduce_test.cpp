// AllReduce on the multi-process lccl communicator with inputs and outputs in the ranks' heaps:
// shared inputs read in place, the heap algorithm's three rounds, one-shot AllReduce, the automatic
// choice and COLLOPS_ALGO_ALLREDUCE=heap. Golden sums are rebuilt independently on each rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collops/communicator.h"
#include "process_heap_checks.h"
#include "process_ranks.h"

namespace collops {
namespace testing {
namespace {

/// AllReduce (reduce-scatter + all-gather, several chunks with 64 KiB slots) where some ranks'
/// inputs are shared and read in place by the others, in place or not: every rank gets the
/// rank-order sum, bit for bit.
TEST_P(ProcessHeapCollectives, AllReduceWithSharedInputsMatchesGolden) {
  const int size = GetParam();
  // With process_vm_readv on, the slices of 4 KiB and more move that way, shared inputs or not.
  for (const bool crossMemory : {false, true}) {
    ForEachSharedInputSet(
        size, "heap-allreduce", {20000, 100003},
        [&](auto& comm, int64_t count, unsigned shared) {
          for (const bool inPlace : {false, true}) {
            CheckedAllReduce(comm, count, inPlace, (shared >> comm.Rank()) & 1);
          }
        },
        crossMemory);
  }
}

/// AllReduce with every rank's input and output in its heap ("heap": the peers' buffers are read
/// in place, three rounds whatever the size), and with only some of them there (staged or cma,
/// reading the shared inputs in place): golden in every placement, in place or not, from one
/// chunk of 64 KiB slots to many, with and without process_vm_readv.
TEST_P(ProcessHeapCollectives, AllReduceWithEveryBufferInTheHeapsTakesThreeRounds) {
  const int size = GetParam();
  const unsigned all = (1u << size) - 1;
  const Placement placements[] = {{all, all}, {all, 0}, {0, all}, {all, all & ~1u}, {1u, all}};
  for (const bool crossMemory : {false, true}) {
    RunProcessRanks(
        size,
        [&](int rank) {
          auto comm = MakeProcessComm(rank, size, "heap-allreduce-direct");
          for (const int64_t count : {20000, 100003}) {
            for (const Placement& p : placements) {
              const bool inHeap = (p.inputs >> rank) & 1, outHeap = (p.outputs >> rank) & 1;
              const uint64_t rounds = CheckedAllReduce(*comm, count, false, inHeap, outHeap);
              // rsag takes one round per chunk and one more, cma two.
              EXPECT_EQ(rounds == 3u, p.inputs == all && p.outputs == all)
                  << "rank " << rank << " placement " << p.inputs << "/" << p.outputs << ": "
                  << rounds << " rounds";
            }
            const bool inHeap = true;  // in place: the input is the output
            EXPECT_EQ(CheckedAllReduce(*comm, count, true, inHeap), 3u) << "rank " << rank;
          }
        },
        SmallSlots(crossMemory));
  }
}

/// One-shot AllReduce of one round (forced here, so it never continues with the heap algorithm):
/// from 64 KiB, ranks whose input and output are in their heap stage nothing, their inputs read in
/// place and kept there by one more round (two), in place too; below 64 KiB, one round whatever the
/// buffers.
TEST_P(ProcessHeapCollectives, LargeOneShotAllReduceReadsHeapInputsInPlace) {
  const int size = GetParam();
  const unsigned all = (1u << size) - 1;
  struct Case {
    Placement placement;
    uint64_t rounds;
  };
  const Case cases[] = {{{all, all}, 2}, {{all, 0}, 1},         {{0, all}, 1},
                        {{0, 0}, 1},     {{all, all & ~1u}, 2}, {{1u, all}, 2}};
  const ProcessRanksOptions options = HeapsAnd("COLLOPS_ALGO_ALLREDUCE", "oneshot");
  RunProcessRanks(
      size,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, size, "heap-allreduce-oneshot");
        for (const int64_t count : {20000, 100003}) {  // 80 KB, 400 KB
          for (const Case& c : cases) {
            const bool inHeap = (c.placement.inputs >> rank) & 1;
            const bool outHeap = (c.placement.outputs >> rank) & 1;
            EXPECT_EQ(CheckedAllReduce(*comm, count, false, inHeap, outHeap), c.rounds)
                << "rank " << rank << " count " << count << " placement " << c.placement.inputs
                << "/" << c.placement.outputs;
          }
          // In place, a rank whose buffer is read in place by the others keeps its result until
          // they have read it.
          for (const unsigned inPlace : {all, 1u, all & ~1u}) {
            EXPECT_EQ(CheckedAllReduce(*comm, count, true, (inPlace >> rank) & 1), 2u)
                << "rank " << rank << " count " << count << " in place, shared " << inPlace;
          }
        }
        EXPECT_EQ(CheckedAllReduce(*comm, 4000, false, true, true), 1u) << "rank " << rank;
      },
      options);
}

/// Chosen automatically, a one-shot AllReduce of 64 KiB (rsag where the ranks outnumber the CPUs)
/// whose first round finds every buffer in the heaps continues with the heap algorithm (three
/// rounds); with some buffers elsewhere it reads the shared inputs in place (two).
TEST_P(ProcessHeapCollectives, AutomaticAllReduceContinuesInTheHeaps) {
  const int size = GetParam();
  const unsigned others = ((1u << size) - 1) & ~1u;  // every rank's input but rank 0's shared
  const auto check = [size, others](int rank) {
    auto comm = MakeProcessComm(rank, size, "heap-allreduce-auto");
    const int64_t count = 16384;  // 64 KiB of float
    EXPECT_EQ(CheckedAllReduce(*comm, count, false, true, true), 3u) << "rank " << rank;
    EXPECT_EQ(CheckedAllReduce(*comm, count, true, true), 3u) << "rank " << rank;
    EXPECT_EQ(CheckedAllReduce(*comm, count, false, (others >> rank) & 1, true), 2u)
        << "rank " << rank;
  };
  // Default slots, so that 64 KiB fits one round; no process_vm_readv, so that cma is not picked.
  RunProcessRanks(size, check, HeapsAnd("COLLOPS_SHM_CMA_BYTES", "0"));
}

/// COLLOPS_ALGO_ALLREDUCE=heap: three rounds at any size where every rank's input and output lie
/// in its heap, golden, in place too; elsewhere every rank fails naming the knob and the first
/// rank whose buffers are not in its heap, and the next call works; without heaps every call fails.
TEST_P(ProcessHeapCollectives, ForcedHeapAllReduceNeedsEveryBufferInTheHeaps) {
  const int size = GetParam();
  ProcessRanksOptions options = HeapsAnd("COLLOPS_ALGO_ALLREDUCE", "heap");
  RunProcessRanks(
      size,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, size, "heap-allreduce-forced");
        for (const int64_t count : {1, 1000, 100003}) {
          EXPECT_EQ(CheckedAllReduce(*comm, count, false, true, true), 3u) << "rank " << rank;
          EXPECT_EQ(CheckedAllReduce(*comm, count, true, true), 3u) << "rank " << rank;
          ExpectForcedFails(*comm, "COLLOPS_ALGO_ALLREDUCE=heap",
                            "rank 1's input and output do not both lie in its heap", [&] {
                              std::vector<float> x(count, 1.0f);
                              Placed y(*comm, count * sizeof(float), rank != 1);
                              comm->AllReduce(rank == 1 ? static_cast<void*>(x.data()) : y.data(),
                                              y.data(), count, ACL_FLOAT, ReduceOp::kSum);
                            });
        }
        EXPECT_EQ(CheckedAllReduce(*comm, 1000, false, true, true), 3u) << "rank " << rank;
      },
      options);
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "0";
  RunProcessRanks(
      size,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, size, "heap-allreduce-none");
        ExpectForcedFails(*comm, "COLLOPS_ALGO_ALLREDUCE=heap", "has no heaps", [&] {
          float x = 1;
          comm->AllReduce(&x, &x, 1, ACL_FLOAT, ReduceOp::kSum);
        });
      },
      options);
}

}  // namespace
}  // namespace testing
}  // namespace collops
