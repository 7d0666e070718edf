// AllToAllV on the multi-process lccl communicator whose inputs and outputs lie in the ranks'
// heaps, in every mix with ordinary memory (each piece moves directly when its receiver's output
// or its sender's input is shared, staged otherwise; algorithm_table.cpp). Every byte is checked
// against golden values rebuilt independently on each rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>

#include "collops/communicator.h"
#include "process_heap_checks.h"
#include "process_ranks.h"

namespace collops {
namespace testing {
namespace {

/// Every placement with and without process_vm_readv for the pieces of ordinary memory (4 KiB and
/// up with it on, so most pieces of the larger scales take it).
class ProcessHeapPlacement : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ProcessHeapPlacement, AllToAllVInEveryPlacementMatchesGolden) {
  const auto [size, crossMemory] = GetParam();
  RunProcessRanks(
      size,
      [size](int rank) {
        auto comm = MakeProcessComm(rank, size, "heap-a2a");
        const unsigned all = (1u << size) - 1;
        const Placement placements[] = {
            {0, 0}, {all, 0}, {0, all}, {all, all}, {0b0101 & all, 0b0110 & all}, {1, 0}, {0, 2},
        };
        for (const int64_t scale :
             {int64_t{0}, int64_t{1}, int64_t{700}, int64_t{16384}, int64_t{40000}}) {
          for (const Placement placement : placements) CheckedAllToAllV(*comm, scale, placement);
        }
        EXPECT_EQ(comm->SharedBytes(), 0u);
      },
      SmallSlots(crossMemory));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessHeapPlacement,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param),
                                         std::get<1>(info.param) ? "_cma" : "_staged");
                         });

/// With every output shared, a piece many slots long takes two rounds in all (the first carries
/// the tables and the first region, the second keeps the buffers until every copy is done)
/// instead of one per region-full: the direct path is really taken.
TEST_P(ProcessHeapCollectives, SharedBuffersTakeTwoRoundsWhateverTheSize) {
  const int size = GetParam();
  RunProcessRanks(
      size,
      [size](int rank) {
        auto comm = MakeProcessComm(rank, size, "heap-rounds");
        const unsigned all = (1u << size) - 1;
        EXPECT_GT(CheckedAllToAllV(*comm, 40000, {0, 0}), 2u);  // staged: a round per region
        EXPECT_EQ(CheckedAllToAllV(*comm, 40000, {0, all}), 2u);
        EXPECT_EQ(CheckedAllToAllV(*comm, 40000, {all, 0}), 2u);
        EXPECT_EQ(CheckedAllToAllV(*comm, 40000, {all, all}), 2u);
        EXPECT_EQ(CheckedAllToAllV(*comm, 1, {all, all}), 1u);  // fits one round: nothing extra
      },
      SmallSlots());
}

/// With the default slots every piece here fits one round. A shared input's pieces of 64 KiB and
/// more skip the slots (copied whole after the first round, hence a second round); shared
/// outputs alone change nothing, as the first round already carried everything.
TEST_P(ProcessHeapCollectives, LargePiecesOfSharedInputsSkipTheSlots) {
  const int size = GetParam();
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "64M";
  options.env["COLLOPS_SHM_CMA_BYTES"] = "0";  // ordinary pieces stay staged
  RunProcessRanks(
      size,
      [size](int rank) {
        auto comm = MakeProcessComm(rank, size, "heap-whole");
        const unsigned all = (1u << size) - 1;
        const int64_t scale = 30000;  // pieces of 0 to 120000 bytes
        EXPECT_EQ(CheckedAllToAllV(*comm, scale, {0, 0}), 1u);
        EXPECT_EQ(CheckedAllToAllV(*comm, scale, {0, all}), 1u);
        EXPECT_EQ(CheckedAllToAllV(*comm, scale, {all, 0}), 2u);
        EXPECT_EQ(CheckedAllToAllV(*comm, scale, {all, all}), 2u);
        EXPECT_EQ(CheckedAllToAllV(*comm, scale, {1, 2}), 2u);
        EXPECT_EQ(CheckedAllToAllV(*comm, 1000, {all, all}), 1u);  // small pieces stay staged
      },
      options);
}

}  // namespace
}  // namespace testing
}  // namespace collops
