// AllocateShared on the multi-process lccl communicator: the heap allocator itself, and
// AllToAllV whose inputs and outputs lie in the ranks' heaps, in every mix with ordinary memory
// (each piece moves directly when its receiver's output or its sender's input is shared, staged
// otherwise; algorithm_table.cpp). Golden values are rebuilt independently on each rank.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "collops/verified_communicator.h"
#include "core/comm/shm/process_comm.h"
#include "core/comm/shm/process_fd.h"
#include "core/comm/shm/process_heap.h"
#include "piece_layout.h"
#include "process_ranks.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace testing {
namespace {

constexpr uint64_t kPage = 4096;

/// A heap over a memfd of its own, so the test can see the pages come and go.
class SharedHeap : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_.Reset(memfd_create("heap-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    ASSERT_TRUE(fd_.Valid());
    ASSERT_EQ(ftruncate(fd_.Get(), kBytes + kPage), 0);
    void* base = mmap(nullptr, kBytes + kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.Get(), 0);
    ASSERT_NE(base, MAP_FAILED);
    base_ = static_cast<uint8_t*>(base);
    ResetWithCache(0);  // the fixture's heap caches nothing
  }
  /// Starts over with a cache of `cacheBytes`. The heap starts a page into the file, as a rank's
  /// heap starts inside the segment.
  void ResetWithCache(uint64_t cacheBytes) {
    heap_.Reset(fd_.Get(), base_ + kPage, kPage, kBytes, cacheBytes);
  }
  void TearDown() override {
    if (base_ != nullptr) munmap(base_, kBytes + kPage);
  }
  uint64_t ResidentBytes() const {
    struct stat st{};
    fstat(fd_.Get(), &st);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  static constexpr uint64_t kBytes = 64 * kPage;
  shm::UniqueFd fd_;
  uint8_t* base_ = nullptr;
  shm::SharedHeap heap_;
};

TEST_F(SharedHeap, WithoutACacheFreedPagesGoBackToTheSystem) {
  EXPECT_EQ(ResidentBytes(), 0u);
  auto* a = static_cast<uint8_t*>(heap_.Allocate(10 * kPage + 1));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kPage, 0u);
  EXPECT_EQ(heap_.AllocatedBytes(), 11 * kPage);
  EXPECT_EQ(ResidentBytes(), 11 * kPage);  // allocated up front: no SIGBUS on first touch
  std::memset(a, 0x5a, 11 * kPage);
  EXPECT_TRUE(heap_.Free(a));
  EXPECT_EQ(ResidentBytes(), 0u);
  EXPECT_EQ(heap_.AllocatedBytes(), 0u);
  auto* again = static_cast<uint8_t*>(heap_.Allocate(kPage));
  ASSERT_EQ(again, a);  // first fit: the freed range comes back, zeroed
  for (uint64_t i = 0; i < kPage; ++i) ASSERT_EQ(again[i], 0) << i;
}

TEST_F(SharedHeap, FreedPagesStayUpToTheCacheLimit) {
  ResetWithCache(16 * kPage);
  auto* a = static_cast<uint8_t*>(heap_.Allocate(11 * kPage));
  ASSERT_NE(a, nullptr);
  std::memset(a, 0x5a, 11 * kPage);
  EXPECT_TRUE(heap_.Free(a));
  EXPECT_EQ(heap_.CachedBytes(), 11 * kPage);
  EXPECT_EQ(ResidentBytes(), 11 * kPage);  // kept: no unmapping, no faulting in again
  // A range partly cached: its first 11 pages are reused as they are, 5 more are allocated.
  auto* b = static_cast<uint8_t*>(heap_.Allocate(16 * kPage));
  ASSERT_EQ(b, a);
  EXPECT_EQ(b[0], 0x5a);  // not cleared: the data is this rank's own, as malloc's would be
  EXPECT_EQ(b[11 * kPage], 0);
  EXPECT_EQ(heap_.CachedBytes(), 0u);
  EXPECT_EQ(ResidentBytes(), 16 * kPage);
  // A middle piece of a cached range: the cached pieces on either side stay cached.
  EXPECT_TRUE(heap_.Free(b));
  auto* c = static_cast<uint8_t*>(heap_.Allocate(4 * kPage));
  ASSERT_EQ(c, b);
  EXPECT_EQ(heap_.CachedBytes(), 12 * kPage);
  EXPECT_EQ(ResidentBytes(), 16 * kPage);
  EXPECT_TRUE(heap_.Free(c));
  EXPECT_EQ(heap_.CachedBytes(), 16 * kPage);
  // Beyond the limit a freed range goes back to the system.
  auto* d = static_cast<uint8_t*>(heap_.Allocate(40 * kPage));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(heap_.CachedBytes(), 0u);
  EXPECT_EQ(ResidentBytes(), 40 * kPage);
  EXPECT_TRUE(heap_.Free(d));
  EXPECT_EQ(heap_.CachedBytes(), 0u);
  EXPECT_EQ(ResidentBytes(), 0u);
}

TEST_F(SharedHeap, RangeTheSystemCannotBackGivesNullAndKeepsNoPages) {
  // The file ends 8 pages into the heap and may not grow: pages past that cannot be allocated,
  // as when the system is out of memory. The cache is let go first, then the range itself.
  ASSERT_EQ(ftruncate(fd_.Get(), 9 * kPage), 0);
  ASSERT_EQ(fcntl(fd_.Get(), F_ADD_SEALS, F_SEAL_GROW), 0);
  ResetWithCache(kBytes);
  void* a = heap_.Allocate(6 * kPage);
  ASSERT_NE(a, nullptr);
  void* b = heap_.Allocate(kPage);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(heap_.Free(a));
  EXPECT_EQ(heap_.CachedBytes(), 6 * kPage);
  EXPECT_EQ(heap_.Allocate(10 * kPage), nullptr);  // offset 7: 3 pages past the end
  EXPECT_EQ(heap_.CachedBytes(), 0u);
  EXPECT_EQ(ResidentBytes(), kPage);        // b only
  EXPECT_EQ(heap_.Allocate(6 * kPage), a);  // the freed range still works
  EXPECT_EQ(ResidentBytes(), 7 * kPage);
}

TEST_F(SharedHeap, FullHeapGivesNullAndFreedNeighboursMerge) {
  void* a = heap_.Allocate(16 * kPage);
  void* b = heap_.Allocate(16 * kPage);
  void* c = heap_.Allocate(32 * kPage);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(heap_.Allocate(1), nullptr);
  EXPECT_TRUE(heap_.Free(a));
  EXPECT_TRUE(heap_.Free(b));
  EXPECT_EQ(heap_.Allocate(33 * kPage), nullptr);
  void* ab = heap_.Allocate(32 * kPage);  // needs a and b merged
  EXPECT_EQ(ab, a);
  EXPECT_FALSE(heap_.Free(static_cast<uint8_t*>(c) + 1));  // not an allocation
  int local = 0;
  EXPECT_FALSE(heap_.Free(&local));
  EXPECT_TRUE(heap_.Free(c));
  EXPECT_FALSE(heap_.Free(c));  // twice
}

/// In a child of fork() the heap does nothing: the child shares the heap's pages with its parent
/// (the memfd is mapped MAP_SHARED), so its frees would punch them out of the parent's buffers (a
/// torch tensor's deleter at the child's exit zeroing the parent's tensor) and its allocations
/// would be the parent's next ones.
TEST_F(SharedHeap, AForkedChildNeitherFreesNorAllocatesTheParentsPages) {
  auto* a = static_cast<uint8_t*>(heap_.Allocate(2 * kPage));
  ASSERT_NE(a, nullptr);
  std::memset(a, 0x5a, 2 * kPage);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool freed = heap_.Free(a);  // nothing happens, but `a` is the heap's
    const void* got = heap_.Allocate(kPage);
    _exit(freed && got == nullptr ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's heap refused the free or handed out memory";
  EXPECT_EQ(ResidentBytes(), 2 * kPage);
  uint64_t changed = 0;
  for (uint64_t i = 0; i < 2 * kPage; ++i) changed += a[i] != 0x5a;
  EXPECT_EQ(changed, 0u) << "the child's free reached the parent's pages";
  EXPECT_EQ(heap_.Allocate(kPage), a + 2 * kPage);  // the parent's heap carries on
  EXPECT_TRUE(heap_.Free(a));
}

TEST_F(SharedHeap, OffsetOfAcceptsOnlyRangesInside) {
  auto* a = static_cast<uint8_t*>(heap_.Allocate(kPage));
  EXPECT_EQ(heap_.OffsetOf(a, kPage), 0);
  EXPECT_EQ(heap_.OffsetOf(a + 100, 8), 100);
  EXPECT_EQ(heap_.OffsetOf(a, kBytes), 0);
  EXPECT_EQ(heap_.OffsetOf(a, kBytes + 1), -1);
  EXPECT_EQ(heap_.OffsetOf(base_, 1), -1);  // the page before the heap
  EXPECT_EQ(heap_.OffsetOf(a + kBytes, 0), static_cast<int64_t>(kBytes));
  EXPECT_EQ(heap_.OffsetOf(a + kBytes, 1), -1);
}

uint8_t ValueAt(int rank, int64_t i) { return static_cast<uint8_t>((rank * 37 + i * 11) % 251); }

/// Memory of `bytes` from the communicator's heap (shared) or the C++ heap, freed on scope exit.
class Placed {
 public:
  Placed(Communicator& comm, size_t bytes, bool shared) : comm_(comm) {
    if (shared) {
      data_ = static_cast<uint8_t*>(comm.AllocateShared(bytes));
      if (data_ == nullptr) Fail(ERROR_INTERNAL_ERROR, "AllocateShared(", bytes, ") gave null");
    } else {
      own_.resize(bytes);
      data_ = own_.data();
    }
  }
  ~Placed() {
    if (own_.empty() && data_ != nullptr) comm_.FreeShared(data_);
  }
  uint8_t* data() { return data_; }

 private:
  Communicator& comm_;
  std::vector<uint8_t> own_;
  uint8_t* data_ = nullptr;
};

/// Where each rank's input and output live in one case: bit 0 of inputs / outputs for rank r
/// is (mask >> r) & 1.
struct Placement {
  unsigned inputs;
  unsigned outputs;
};

/// One AllToAllV of int8 pieces PieceCount(.., scale) with the placement; checks every byte of the
/// output, including the gaps between pieces that nobody may write. Returns the rounds it took.
uint64_t CheckedAllToAllV(shm::ProcessCommunicator& comm, int64_t scale, Placement placement) {
  const int rank = comm.Rank(), size = comm.Size();
  const PieceLayout l(rank, size, scale);
  Placed in(comm, l.sendEnd, (placement.inputs >> rank) & 1);
  Placed out(comm, l.recvEnd, (placement.outputs >> rank) & 1);
  for (int64_t i = 0; i < l.sendEnd; ++i) in.data()[i] = static_cast<uint8_t>(ValueAt(rank, i));
  std::memset(out.data(), 0xee, l.recvEnd);
  std::vector<uint8_t> want(l.recvEnd, 0xee);
  for (int r = 0; r < size; ++r) {
    const int64_t theirDispl = PieceLayout::SendDispl(r, rank, scale);
    for (int64_t i = 0; i < l.recvCounts[r]; ++i) {
      want[l.rdispls[r] + i] = static_cast<uint8_t>(ValueAt(r, theirDispl + i));
    }
  }
  const uint64_t before = comm.Rounds();
  comm.AllToAllV(in.data(), l.sendCounts.data(), l.sdispls.data(), out.data(), l.recvCounts.data(),
                 l.rdispls.data(), ACL_INT8);
  const uint64_t rounds = comm.Rounds() - before;
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < l.recvEnd; ++i) {
    if (out.data()[i] != want[i] && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0) << "rank " << rank << " of " << size << ", scale " << scale << ", inputs "
                      << placement.inputs << ", outputs " << placement.outputs << ": first at "
                      << first << " got " << int{out.data()[first >= 0 ? first : 0]} << " want "
                      << int{want[first >= 0 ? first : 0]};
  // Both sides must be done with the shared memory when the call returns: the next iteration
  // frees and reuses it.
  return rounds;
}

/// `crossMemory`: whether large pieces of ordinary memory may move by process_vm_readv; off where
/// a test counts the rounds of staged pieces.
ProcessRanksOptions SmallSlots(bool crossMemory = false) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BYTES"] = "64K";  // many staged rounds for the larger pieces
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "64M";
  options.env["COLLOPS_SHM_CMA_BYTES"] = crossMemory ? "4096" : "0";
  return options;
}

/// Heaps of 64 MiB per rank, default slots, and the environment variable `name` = `value`.
ProcessRanksOptions HeapsAnd(const std::string& name, const std::string& value) {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_HEAP_BYTES"] = "64M";
  options.env[name] = value;
  return options;
}

class ProcessHeapCollectives : public ::testing::TestWithParam<int> {};

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

/// Runs check(comm, scale, shared) on every rank of a `size`-rank job with 64 KiB slots, for each
/// scale and each set of ranks whose inputs are shared (bit r: rank r): none, all, rank 0 alone,
/// rank 1 alone.
void ForEachSharedInputSet(int size, const char* domain, const std::vector<int64_t>& scales,
                           const std::function<void(shm::ProcessCommunicator& comm, int64_t scale,
                                                    unsigned shared)>& check,
                           bool crossMemory = false) {
  RunProcessRanks(
      size,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, size, domain);
        const unsigned all = (1u << size) - 1;
        for (const int64_t scale : scales) {
          for (const unsigned shared : {0u, all, 1u, 2u & all}) check(*comm, scale, shared);
        }
      },
      SmallSlots(crossMemory));
}

/// AllReduce of `count` floats, from and into ordinary memory unless `sharedInput` /
/// `sharedOutput`: checks every element against the sum over ranks; returns the rounds it took.
uint64_t CheckedAllReduce(shm::ProcessCommunicator& comm, int64_t count, bool inPlace,
                          bool sharedInput = false, bool sharedOutput = false) {
  const int rank = comm.Rank(), size = comm.Size();
  Placed in(comm, count * sizeof(float), sharedInput);
  Placed other(comm, count * sizeof(float), sharedOutput);
  auto* x = reinterpret_cast<float*>(in.data());
  auto* y = inPlace ? x : reinterpret_cast<float*>(other.data());
  for (int64_t i = 0; i < count; ++i) x[i] = static_cast<float>((rank + 1) * (i % 97));
  const uint64_t before = comm.Rounds();
  comm.AllReduce(x, y, count, ACL_FLOAT, ReduceOp::kSum);
  const uint64_t rounds = comm.Rounds() - before;
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    wrong += y[i] != static_cast<float>(size * (size + 1) / 2 * (i % 97));
  }
  EXPECT_EQ(wrong, 0) << "rank " << rank << ": count " << count << " shared " << sharedInput
                      << sharedOutput << " in place " << inPlace << " (" << rounds << " rounds)";
  return rounds;
}

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

/// Expects call() to fail on this rank because COLLOPS_ALGO_<...> = `knob` forced an algorithm
/// that cannot run it: ERROR_INVALID_PARAM naming the knob and the algorithm, and `why` in the
/// message; the communicator stays usable.
void ExpectForcedFails(shm::ProcessCommunicator& comm, const std::string& knob,
                       const std::string& why, const std::function<void()>& call) {
  try {
    call();
    ADD_FAILURE() << "rank " << comm.Rank() << ": " << knob << " ran a call it cannot run";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
    EXPECT_NE(std::string(e.what()).find(knob + " (rank 0's environment) cannot run this call"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  EXPECT_FALSE(comm.Broken()) << "rank " << comm.Rank();
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

/// AllGatherV (uneven, gaps between the pieces) and Broadcast from every root, with the inputs
/// of some ranks shared: the others read those in place. Pieces from below the whole-piece size
/// to many slots long. Checks every byte, and that a large shared exchange takes two rounds.
TEST_P(ProcessHeapCollectives, AllGatherVAndBroadcastWithSharedInputsMatchGolden) {
  const int size = GetParam();
  ForEachSharedInputSet(
      size, "heap-gather", {1, 3000, 40000}, [&](auto& comm, int64_t scale, unsigned shared) {
        const int rank = comm.Rank();
        const bool mine = (shared >> rank) & 1;
        std::vector<int64_t> counts(size), displs(size);
        int64_t end = 0;
        for (int r = 0; r < size; ++r) {
          counts[r] = PieceCount(r, (r + 1) % size, scale);
          displs[r] = end + 3;
          end = displs[r] + counts[r];
        }
        Placed in(comm, counts[rank] + 1, mine);
        for (int64_t i = 0; i < counts[rank]; ++i) in.data()[i] = ValueAt(rank, i);
        std::vector<uint8_t> out(end, 0xee), want(end, 0xee);
        for (int r = 0; r < size; ++r) {
          for (int64_t i = 0; i < counts[r]; ++i) want[displs[r] + i] = ValueAt(r, i);
        }
        const uint64_t before = comm.Rounds();
        comm.AllGatherV(in.data(), counts[rank], out.data(), counts.data(), displs.data(),
                        ACL_INT8);
        EXPECT_EQ(out, want) << "AllGatherV scale " << scale << " shared " << shared;
        if (scale == 40000 && shared == (1u << size) - 1) {
          EXPECT_EQ(comm.Rounds() - before, 2u);
        }

        for (int root = 0; root < size; ++root) {
          const int64_t n = 5 * scale + root;
          Placed buf(comm, n, mine);
          for (int64_t i = 0; i < n; ++i) buf.data()[i] = rank == root ? ValueAt(root, i) : 0xee;
          comm.Broadcast(buf.data(), n, ACL_INT8, root);
          int64_t wrong = 0;
          for (int64_t i = 0; i < n; ++i) wrong += buf.data()[i] != ValueAt(root, i);
          EXPECT_EQ(wrong, 0) << "Broadcast root " << root << " n " << n << " shared " << shared;
        }
      });
}

/// ReduceScatterV (uneven pieces, gaps in the input) with the inputs of some ranks shared: their
/// pieces of 8 KiB and more are reduced in place by their receivers. Every rank's result must be
/// the rank-order sum, bit for bit; a fully shared exchange takes two rounds whatever its size.
TEST_P(ProcessHeapCollectives, ReduceScatterVWithSharedInputsMatchesGolden) {
  const int size = GetParam();
  ForEachSharedInputSet(
      size, "heap-rs", {1, 1000, 12000}, [&](auto& comm, int64_t scale, unsigned shared) {
        const int rank = comm.Rank();
        // counts[r] = what every rank contributes to r: the same vector everywhere.
        std::vector<int64_t> counts(size), displs(size);
        int64_t end = 0;
        for (int r = 0; r < size; ++r) {
          counts[r] = (r % 3 + 1) * scale;  // 4 to 144000 bytes
          displs[r] = end + 1;
          end = displs[r] + counts[r];
        }
        Placed in(comm, (end + 1) * sizeof(float), (shared >> rank) & 1);
        auto* x = reinterpret_cast<float*>(in.data());
        for (int64_t i = 0; i < end; ++i) x[i] = static_cast<float>((rank + 1) * (i % 89));
        std::vector<float> out(counts[rank] + 1, -1.0f);
        const uint64_t before = comm.Rounds();
        comm.ReduceScatterV(x, counts.data(), displs.data(), out.data(), counts[rank], ACL_FLOAT,
                            ReduceOp::kSum);
        int64_t wrong = 0;
        for (int64_t i = 0; i < counts[rank]; ++i) {
          wrong += out[i] != static_cast<float>(size * (size + 1) / 2 * ((displs[rank] + i) % 89));
        }
        wrong += out[counts[rank]] != -1.0f;  // nothing written past the piece
        EXPECT_EQ(wrong, 0) << "scale " << scale << " shared " << shared;
        if (scale == 12000 && shared == (1u << size) - 1) {
          EXPECT_EQ(comm.Rounds() - before, 2u);
        }
      });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessHeapCollectives, ::testing::Values(2, 3, 4));

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

// --- process_vm_readv (docs/backends.md, "Single copy") ---

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
