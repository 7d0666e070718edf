// AllReduce "oneshot" beyond one round (core/comm/shm/shm_policy.h): at R = 2 with a CPU each the
// automatic rule takes it at every size above kTwoRankOneShotFromBytes, and a call larger than
// kOneShotWholeMaxBytes stages its input in rounds of half an rsag chunk. The policy functions are
// checked at their thresholds; the multi-rank tests run calls on both sides of
// kOneShotWholeMaxBytes with a small chunk (many rounds and a ragged last one), automatic and
// forced, in place and not (out of place with the streamed sum), in process ranks (R = 2, 3, 4, 7)
// and thread ranks, and check every rank's output. Values are small integers, so the sums are exact
// in float32, bfloat16 and int32.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "collops/comm_params.h"
#include "collops/registry.h"
#include "collops/status.h"
#include "core/comm/shm/cpu_binding.h"
#include "core/comm/shm/process_comm.h"
#include "core/comm/shm/shm_policy.h"
#include "tests/cpp/process_ranks.h"
#include "tests/cpp/thread_comm_test_util.h"
#include "tests/cpp/thread_ranks.h"

namespace collops {
namespace {

using shm::Algo;
using shm::kOneShotWholeMaxBytes;
using shm::OneShotRoundBytes;
using shm::SelectAllReduce;
using shm::ShmPolicy;

constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;

// --- The policy ---

TEST(OneShotRounds, UpToTheWholeCallLimitACallStagesWholeHalves) {
  EXPECT_EQ(OneShotRoundBytes(kOneShotWholeMaxBytes, 1 * kMiB, 2 * kMiB), 2 * kMiB);
  EXPECT_EQ(OneShotRoundBytes(64 * kKiB, 1 * kMiB, 2 * kMiB), 2 * kMiB);
  // A half smaller than the call: rounds of a half.
  EXPECT_EQ(OneShotRoundBytes(kOneShotWholeMaxBytes, 1 * kMiB, 32 * kKiB), 32 * kKiB);
}

TEST(OneShotRounds, BeyondItRoundsAreHalfAnRsagChunkWithinAHalf) {
  EXPECT_EQ(OneShotRoundBytes(kOneShotWholeMaxBytes + 1, 1 * kMiB, 2 * kMiB), 512 * kKiB);
  EXPECT_EQ(OneShotRoundBytes(64 * kMiB, 2 * kMiB, 2 * kMiB), 1 * kMiB);
  EXPECT_EQ(OneShotRoundBytes(64 * kMiB, 4 * kMiB, 1 * kMiB), 1 * kMiB);  // never past a half
  EXPECT_EQ(OneShotRoundBytes(64 * kMiB, 16, 2 * kMiB), 64u);             // at least a line
}

ShmPolicy PolicyFor(int ranks, int cpus) {
  // ChoosePolicy's numbers without its environment and probes.
  ShmPolicy policy;
  policy.rankSize = ranks;
  policy.cpus = cpus;
  policy.oneShotMaxBytes = shm::kOneShotMaxBytes;
  if (ranks == 2 && !policy.Oversubscribed()) {
    policy.largeOneShotFromBytes = shm::kTwoRankOneShotFromBytes;
    policy.largeOneShotToBytes = std::numeric_limits<uint64_t>::max();
  }
  policy.chunkBytes = 1 * kMiB;
  return policy;
}

Algo Select(const ShmPolicy& policy, uint64_t bytes, uint64_t halfBytes = 2 * kMiB) {
  return SelectAllReduce(policy, /*crossMemory=*/false, policy.rankSize, bytes, 4, halfBytes);
}

TEST(OneShotRounds, TwoRanksWithACpuEachTakeOneShotAtEverySize) {
  const ShmPolicy two = PolicyFor(2, 2);
  for (uint64_t bytes : {4 * kKiB, 64 * kKiB, 64 * kKiB + 64, kOneShotWholeMaxBytes,
                         kOneShotWholeMaxBytes + 64, 4 * kMiB, 64 * kMiB, 1024 * kMiB}) {
    EXPECT_EQ(Select(two, bytes), shm::kAlgoOneShot) << bytes;
  }
  // With halves smaller than the call: one-shot only beyond the whole-call limit, where it goes in
  // chunked rounds anyway; up to it, a call that would take several whole halves runs rsag.
  EXPECT_EQ(Select(two, 32 * kKiB, 32 * kKiB), shm::kAlgoOneShot);
  EXPECT_EQ(Select(two, 128 * kKiB, 32 * kKiB), shm::kAlgoReduceScatterAllGather);
  EXPECT_EQ(Select(two, kOneShotWholeMaxBytes, 32 * kKiB), shm::kAlgoReduceScatterAllGather);
  EXPECT_EQ(Select(two, kOneShotWholeMaxBytes + 64, 32 * kKiB), shm::kAlgoOneShot);
}

TEST(OneShotRounds, MoreRanksOrFewerCpusKeepRsagAboveTheSmallRange) {
  for (const ShmPolicy& policy : {PolicyFor(2, 1), PolicyFor(4, 2), PolicyFor(3, 8)}) {
    EXPECT_EQ(Select(policy, 64 * kKiB), shm::kAlgoOneShot) << policy.rankSize;
    EXPECT_EQ(Select(policy, 64 * kKiB + 64), shm::kAlgoReduceScatterAllGather) << policy.rankSize;
    EXPECT_EQ(Select(policy, 64 * kMiB), shm::kAlgoReduceScatterAllGather) << policy.rankSize;
  }
}

// --- Every rank's output, both sides of the whole-call limit ---

/// Elements of `e` bytes: exactly the limit, one cache line past it, and a ragged size past
/// 1 MiB, so that rounds of 32 KiB end in a part-round.
std::vector<size_t> CountsFor(size_t e) {
  return {kOneShotWholeMaxBytes / e, (kOneShotWholeMaxBytes + 64) / e, (1 * kMiB) / e + 37};
}

/// Small integers: every sum over 7 ranks is exact in bfloat16 too.
float Value(int rank, size_t i) { return static_cast<float>((rank * 131 + i * 7) % 13) - 6; }

void Store(DataType dtype, uint8_t* at, float v) {
  if (dtype == ACL_INT32) {
    const int32_t x = static_cast<int32_t>(v);
    std::memcpy(at, &x, 4);
  } else if (dtype == ACL_FLOAT) {
    std::memcpy(at, &v, 4);
  } else {  // bfloat16: the top half of a float32 that has no more bits
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const uint16_t top = static_cast<uint16_t>(bits >> 16);
    std::memcpy(at, &top, 2);
  }
}

/// One rank's AllReduce of every dtype and count (odd counts in place), checked element by
/// element against the sum of every rank's Value.
void RunCalls(Communicator& comm, int rank, int size, const std::string& what) {
  for (DataType dtype : {ACL_FLOAT, ACL_BF16, ACL_INT32}) {
    const size_t e = DataTypeSize(dtype);
    for (size_t count : CountsFor(e)) {
      std::vector<uint8_t> in(count * e), out(count * e), want(count * e);
      for (size_t i = 0; i < count; ++i) {
        Store(dtype, &in[i * e], Value(rank, i));
        float sum = 0;
        for (int r = 0; r < size; ++r) sum += Value(r, i);
        Store(dtype, &want[i * e], sum);
      }
      const bool inPlace = count % 2 == 1;
      uint8_t* dst = inPlace ? in.data() : out.data();
      comm.AllReduce(in.data(), dst, count, dtype, ReduceOp::kSum);
      size_t wrong = 0, first = count;
      for (size_t i = 0; i < count; ++i) {
        if (std::memcmp(dst + i * e, &want[i * e], e) != 0 && wrong++ == 0) first = i;
      }
      EXPECT_EQ(wrong, 0u) << what << " rank " << rank << " " << DataTypeName(dtype) << " count "
                           << count << (inPlace ? " in place" : "") << ": first wrong element "
                           << first;
    }
  }
}

class OneShotRoundsProcess : public ::testing::TestWithParam<int> {};

TEST_P(OneShotRoundsProcess, EveryRankSumsExactlyAroundTheWholeCallLimit) {
  const int size = GetParam();
  for (const char* algo : {"auto", "oneshot"}) {
    testing::ProcessRanksOptions options;
    options.env["COLLOPS_ALGO_ALLREDUCE"] = algo;
    options.env["COLLOPS_SHM_CHUNK_BYTES"] = "65536";  // rounds of 32 KiB: many, a ragged last
    // Every out-of-place call here sums into its output with non-temporal stores.
    options.env["COLLOPS_SHM_STREAM_BYTES"] = "65536";
    options.deadlineSeconds = 120;
    testing::RunProcessRanks(
        size,
        [size, algo](int rank) {
          auto comm = testing::MakeLcclComm(rank, size, std::string("oneshot-rounds-") + algo);
          RunCalls(*comm, rank, size, algo);
        },
        options);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, OneShotRoundsProcess, ::testing::Values(2, 3, 4, 7),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "R" + std::to_string(info.param);
                         });

TEST(OneShotRoundsTwoRanks, TheAutomaticRuleRunsOneShotInRoundsOfHalfAChunk) {
  // Whole up to the limit (one round), then rounds of 32 KiB (29 for the limit plus a line), where
  // rsag's 64 KiB chunks would take 15 + 1.
  if (shm::CpusAvailable() < 2) GTEST_SKIP() << "the rule needs a CPU per rank";
  testing::ProcessRanksOptions options;
  options.env["COLLOPS_SHM_CHUNK_BYTES"] = "65536";
  testing::RunProcessRanks(
      2,
      [](int rank) {
        auto comm = testing::MakeProcessComm(rank, 2, "oneshot-rounds-count");
        for (const auto& [bytes, rounds] : {std::pair<uint64_t, uint64_t>{kOneShotWholeMaxBytes, 1},
                                            {kOneShotWholeMaxBytes + 64, 29}}) {
          std::vector<float> in(bytes / 4, 1.0f), out(bytes / 4);
          const uint64_t before = comm->Rounds();
          comm->AllReduce(in.data(), out.data(), in.size(), ACL_FLOAT, ReduceOp::kSum);
          EXPECT_EQ(comm->Rounds() - before, rounds)
              << "rank " << rank << ", " << bytes << " bytes";
          EXPECT_EQ(out.front(), 2.0f);
          EXPECT_EQ(out.back(), 2.0f);
        }
      },
      options);
}

class OneShotRoundsThreads : public ::testing::TestWithParam<int> {};

TEST_P(OneShotRoundsThreads, EveryRankSumsExactlyAtTheSameSizes) {
  const int size = GetParam();
  const std::string domain = testing::UniqueDomain();
  testing::RunThreadRanks(
      size,
      [size, &domain](int rank) {
        auto comm = testing::JoinRank(rank, size, domain);
        RunCalls(*comm, rank, size, "threads");
      },
      120);
}

INSTANTIATE_TEST_SUITE_P(Ranks, OneShotRoundsThreads, ::testing::Values(2, 3, 4, 7),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "R" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace collops
