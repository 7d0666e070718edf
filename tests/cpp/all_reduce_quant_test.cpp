// Quantised AllReduce (quantType 1 / 2) on thread ranks and forked processes: the golden suite
// and error rules of quant_suite.h at R in {1, 2, 3, 4, 7} (lccl's own path), each algorithm
// forced at the sizes the automatic choice would not give it (lccl's own on processes, the one
// built from the primitives on threads), what that one hands the engine: int8 for x, never a
// float copy of it, and the workspace each path asks for (none where lccl runs its own).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collops/context.h"
#include "core/comm/shm/process_comm.h"
#include "op_harness.h"
#include "ops/all_reduce/quant_all_reduce.h"
#include "process_ranks.h"
#include "quant_suite.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

SuiteJob ThreadJob(int rank, int rankSize, const std::string& domain) {
  SuiteJob job;
  job.rank = rank;
  job.rankSize = rankSize;
  job.backend = "lccl";
  job.commMode = COMM_MULTI_THREAD;
  job.commDomain = domain;
  return job;
}

class QuantAllReduceGolden : public ::testing::TestWithParam<int> {};

TEST_P(QuantAllReduceGolden, EveryCaseOnThreadRanks) {
  const int rankSize = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize,
                 [&](int rank) { RunQuantAllReduceCases(ThreadJob(rank, rankSize, domain)); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, QuantAllReduceGolden, ::testing::ValuesIn(GoldenRankSizes()),
                         [](const auto& info) { return Concat("R", info.param); });

class QuantAllReduceErrors : public ::testing::TestWithParam<int> {};

TEST_P(QuantAllReduceErrors, EveryRuleGivesItsStatusOnThreadRanks) {
  const int rankSize = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize,
                 [&](int rank) { RunQuantAllReduceErrors(ThreadJob(rank, rankSize, domain)); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, QuantAllReduceErrors, ::testing::ValuesIn(GoldenRankSizes()),
                         [](const auto& info) { return Concat("R", info.param); });

TEST(QuantAllReduceEnvErrors, UnknownAlgorithmNamesTheVariable) {
  ScopedEnv env("COLLOPS_ALGO_QUANTALLREDUCE", "ring");
  Operation* op = nullptr;
  EXPECT_EQ(
      CreateOperation("AllReduceOperation", R"({"rankSize":2,"quantType":1,"outDataType":1})", &op),
      ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("COLLOPS_ALGO_QUANTALLREDUCE=\"ring\""));
  // Unquantised AllReduce does not read it.
  EXPECT_EQ(CreateOperation("AllReduceOperation", R"({"rankSize":2})", &op), NO_ERROR);
  DestroyOperation(op);
}

/// One primitive call as the operation handed it to the engine.
struct WireCall {
  std::string primitive;
  DataType dtype;
  int64_t elementsSent;  ///< elements of this rank's data the call carries
};

/// Forwards every call to a real communicator and records what it was given.
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  std::string BackendName() const override { return inner_->BackendName(); }
  int Rank() const override { return inner_->Rank(); }
  int Size() const override { return inner_->Size(); }
  void Agree(const CallSignature& mine) override { inner_->Agree(mine); }
  void AllGatherBytes(const void* in, void* out, size_t bytes) override {
    Record("AllGatherBytes", ACL_UINT8, static_cast<int64_t>(bytes));
    inner_->AllGatherBytes(in, out, bytes);
  }
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override {
    Record("AllReduce", dtype, static_cast<int64_t>(count));
    inner_->AllReduce(in, out, count, dtype, op);
  }
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype) override {
    Record("AllGatherV", dtype, static_cast<int64_t>(sendCount));
    inner_->AllGatherV(in, sendCount, out, recvCounts, rdispls, dtype);
  }
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override {
    int64_t sent = 0;
    for (int j = 0; j < Size(); ++j) sent += sendCounts[j];
    Record("AllToAllV", dtype, sent);
    inner_->AllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype);
  }
  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op) override {
    Record("ReduceScatterV", dtype, -1);
    inner_->ReduceScatterV(in, sendCounts, sdispls, out, recvCount, dtype, op);
  }
  void Broadcast(void* buf, size_t count, DataType dtype, int root) override {
    Record("Broadcast", dtype, static_cast<int64_t>(count));
    inner_->Broadcast(buf, count, dtype, root);
  }
  void Exchange(const std::vector<PointToPoint>& ops) override {
    Record("Exchange", ACL_DT_UNDEFINED, -1);
    inner_->Exchange(ops);
  }
  void Barrier() override { inner_->Barrier(); }

  std::vector<WireCall> calls;

 private:
  void Record(const char* primitive, DataType dtype, int64_t elements) {
    calls.push_back({primitive, dtype, elements});
  }
  std::shared_ptr<Communicator> inner_;
};

class QuantAllReduceWire : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(QuantAllReduceWire, XCrossesAsInt8) {
  const auto [algo, rankSize] = GetParam();
  ScopedEnv env("COLLOPS_ALGO_QUANTALLREDUCE", algo);
  const std::string domain = UniqueDomain();
  const int64_t rows = 64, n = 1024, count = rows * n;
  const QuantCase c = MakeQuantCase(rankSize, 2, ACL_FLOAT16, {rows, n}, false, 7);
  RunThreadRanks(rankSize, [&, algo = std::string(algo), rankSize = rankSize](int rank) {
    auto recorder = std::make_shared<RecordingCommunicator>(
        DefaultContext().Communicators().Get(ThreadRankParam(rank, rankSize, domain)));
    SuiteJob job = ThreadJob(rank, rankSize, domain);
    job.comm = recorder.get();
    RunQuantCase(job, c);
    const std::vector<WireCall>& calls = recorder->calls;
    ASSERT_FALSE(calls.empty()) << "rank " << rank;
    // x goes out first, as int8, all of it (oneshot: to every peer; rsag: a slice to each).
    EXPECT_EQ(calls[0].dtype, ACL_INT8) << "rank " << rank << ": " << calls[0].primitive;
    EXPECT_EQ(calls[0].elementsSent, count) << "rank " << rank << ": " << calls[0].primitive;
    int64_t floatElements = 0;
    for (size_t i = 1; i < calls.size(); ++i) {
      EXPECT_NE(calls[i].primitive, "AllReduce") << "rank " << rank;
      EXPECT_NE(calls[i].dtype, ACL_INT8) << "rank " << rank << ": x crossed twice";
      floatElements += calls[i].elementsSent;
    }
    if (algo == "oneshot") {
      EXPECT_EQ(calls.size(), 1u) << "rank " << rank;
      EXPECT_EQ(calls[0].primitive, "AllGatherV") << "rank " << rank;
    } else {
      ASSERT_EQ(calls.size(), 2u) << "rank " << rank;
      EXPECT_EQ(calls[0].primitive, "AllToAllV") << "rank " << rank;
      EXPECT_EQ(calls[1].primitive, "AllGatherV") << "rank " << rank;
      EXPECT_EQ(calls[1].dtype, ACL_FLOAT16) << "rank " << rank;
      // Only this rank's dequantised slice leaves it as float16: about count / R elements.
      EXPECT_LE(floatElements, count / rankSize + 64) << "rank " << rank;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, QuantAllReduceWire,
                         ::testing::Combine(::testing::Values("oneshot", "rsag"),
                                            ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return Concat(std::get<0>(info.param), "_R", std::get<1>(info.param));
                         });

/// Each algorithm where the automatic choice would take the other: rsag at R = 2 and at small
/// sizes, oneshot at large sizes and R > 2.
std::vector<QuantCase> ForcedCases(int rankSize) {
  return {
      MakeQuantCase(rankSize, 1, ACL_FLOAT16, {3, 48}, false, 91),
      MakeQuantCase(rankSize, 2, ACL_BF16, {67, 1024}, true, 92),
      MakeQuantCase(rankSize, 2, ACL_FLOAT, {5, 16}, false, 93),  // rsag: slices of 0 elements
  };
}

using AlgorithmAndRanks = std::tuple<const char*, int>;

std::string AlgorithmAndRanksName(const ::testing::TestParamInfo<AlgorithmAndRanks>& info) {
  return Concat(std::get<0>(info.param), "_R", std::get<1>(info.param));
}

const auto kAlgorithmsAndRanks =
    ::testing::Combine(::testing::Values("oneshot", "rsag"), ::testing::Values(2, 3, 4));

/// lccl's thread engine runs its own quantised AllReduce: Setup asks for no workspace at any size
/// (the path built from the primitives would gather R·N or R·slice bytes), and the results stay
/// the goldens'.
class QuantAllReduceWorkspace : public ::testing::TestWithParam<int> {};

TEST_P(QuantAllReduceWorkspace, NoneWhereLcclQuantisesOnThreadRanks) {
  const int rankSize = GetParam();
  const std::vector<QuantCase> cases = ForcedCases(rankSize);
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize, [&](int rank) {
    const SuiteJob job = ThreadJob(rank, rankSize, domain);
    for (const QuantCase& c : cases) {
      EXPECT_EQ(QuantWorkspaceBytes(job, c), 0u) << c.Name() << ", rank " << rank;
      RunQuantCase(job, c);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, QuantAllReduceWorkspace, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return Concat("R", info.param); });

/// The algorithms built from the primitives, as the engines without a quantised AllReduce of
/// their own (mpi, hccl, c10d) run them: thread ranks behind a RecordingCommunicator, which has
/// none either.
class QuantAllReducePrimitivesGolden : public ::testing::TestWithParam<AlgorithmAndRanks> {};

TEST_P(QuantAllReducePrimitivesGolden, ForcedOnThreadRanks) {
  const auto [algo, rankSize] = GetParam();
  const std::vector<QuantCase> cases = ForcedCases(rankSize);
  ScopedEnv env("COLLOPS_ALGO_QUANTALLREDUCE", algo);
  const std::string domain = UniqueDomain();
  RunThreadRanks(rankSize, [&, rankSize = rankSize](int rank) {
    RecordingCommunicator recorder(
        DefaultContext().Communicators().Get(ThreadRankParam(rank, rankSize, domain)));
    SuiteJob job = ThreadJob(rank, rankSize, domain);
    job.comm = &recorder;
    for (const QuantCase& c : cases) {
      // The int8 blocks the primitives gather: R·N bytes (oneshot), R·slice (rsag).
      const int64_t count = NumElements(MakeDims(c.shape));
      const uint64_t blocks =
          PlanQuantAllReduce(QuantAlgoFromEnv(), rankSize, rank, count).workspaceBytes;
      if (std::string(algo) == "oneshot") {
        EXPECT_EQ(blocks, uint64_t(rankSize * count));
      }
      EXPECT_EQ(QuantWorkspaceBytes(job, c), blocks) << c.Name() << ", rank " << rank;
      RunQuantCase(job, c);
    }
    ASSERT_FALSE(recorder.calls.empty()) << "rank " << rank;
    EXPECT_EQ(recorder.calls[0].primitive,
              std::string(algo) == "oneshot" ? "AllGatherV" : "AllToAllV")
        << "rank " << rank;
  });
}

INSTANTIATE_TEST_SUITE_P(Forced, QuantAllReducePrimitivesGolden, kAlgorithmsAndRanks,
                         AlgorithmAndRanksName);

/// The lccl process engine's own algorithms (quant_allreduce.h), forced by the same knob.
class ProcessQuantAllReduceAlgorithm : public ::testing::TestWithParam<AlgorithmAndRanks> {};

TEST_P(ProcessQuantAllReduceAlgorithm, ForcedMatchesGolden) {
  const auto [algo, rankSize] = GetParam();
  const std::vector<QuantCase> cases = ForcedCases(rankSize);
  ProcessRanksOptions options;
  options.env["COLLOPS_ALGO_QUANTALLREDUCE"] = algo;
  options.env["COLLOPS_SHM_BYTES"] = std::to_string(kSuiteShmBytes);
  options.deadlineSeconds = 90;
  RunProcessRanks(
      rankSize,
      [&, rankSize = rankSize](int rank) {
        SuiteJob job;
        job.rank = rank;
        job.rankSize = rankSize;
        job.backend = "lccl";
        job.commDomain = "quant-forced";
        for (const QuantCase& c : cases) {
          // The engine stages the int8 data in its own segment: no workspace.
          EXPECT_EQ(QuantWorkspaceBytes(job, c), 0u) << c.Name() << ", rank " << rank;
          RunQuantCase(job, c);
        }
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Forced, ProcessQuantAllReduceAlgorithm, kAlgorithmsAndRanks,
                         AlgorithmAndRanksName);

/// lccl's process "rsag" publishes a chunk's staged int8 slices with the round that publishes the
/// previous chunk's dequantised ones: K chunks take K + 1 rounds, and every rank gets the exact
/// sum. With 64 KiB slots a chunk's output is at most a half, 32 KiB: 2048 float32 elements per
/// rank at R = 4, so 40960 elements are 5 chunks, 6 rounds (two rounds per chunk would be 10).
TEST(ProcessQuantAllReduceRounds, RsagTakesOneRoundPerChunkAndOneMore) {
  constexpr int kRanks = 4;
  constexpr size_t kCount = 40960;
  ProcessRanksOptions options;
  options.env["COLLOPS_ALGO_QUANTALLREDUCE"] = "rsag";
  options.env["COLLOPS_SHM_BYTES"] = "64K";
  options.deadlineSeconds = 90;
  RunProcessRanks(
      kRanks,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, kRanks, "quant-rounds");
        std::vector<int8_t> in(kCount);
        std::vector<float> out(kCount, -1), want(kCount, 0);
        for (size_t i = 0; i < kCount; ++i) {
          in[i] = static_cast<int8_t>(static_cast<int>((rank * 37 + i) % 255) - 127);
          for (int r = 0; r < kRanks; ++r) want[i] += static_cast<int>((r * 37 + i) % 255) - 127;
        }
        const uint16_t one = 0x3c00;  // float16 1.0: y is the plain sum
        QuantScale quant;
        quant.scale = &one;
        const uint64_t before = comm->Rounds();
        ASSERT_TRUE(comm->AllReduceQuantised(in.data(), out.data(), kCount, quant, ACL_FLOAT));
        EXPECT_EQ(comm->Rounds() - before, 6u) << "rank " << rank;
        for (size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(out[i], want[i]) << "rank " << rank << ", element " << i;
        }
      },
      options);
}

/// lccl's process "oneshot" stages per round the int8 elements of one rsag chunk of output
/// (COLLOPS_SHM_CHUNK_BYTES), not a whole half: with 4 KiB chunks, 1024 elements of float32 output
/// or 2048 of float16 per round, so a call of N elements takes ceil(N / per) rounds (one when N is
/// 0), every rank gets the exact sum, and counts on either side of a round's edge stay exact.
class ProcessQuantOneShotRounds : public ::testing::TestWithParam<int> {};

/// The float16 bits of an integer of magnitude below 2048 (exact: 11 significant bits).
uint16_t SmallIntegerHalfBits(int v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  const unsigned a = static_cast<unsigned>(v < 0 ? -v : v);
  int top = 0;
  while ((a >> (top + 1)) != 0) ++top;
  return static_cast<uint16_t>(sign | (top + 15) << 10 | ((a << (10 - top)) & 0x3ff));
}

/// The calls of OneRoundPerChunkOfOutput on `ranks` processes, with COLLOPS_SHM_STREAM_BYTES =
/// `streamBytes`.
void RunOneShotRounds(int ranks, const std::string& streamBytes) {
  constexpr size_t kChunkBytes = 4096;
  ProcessRanksOptions options;
  options.env["COLLOPS_ALGO_QUANTALLREDUCE"] = "oneshot";
  options.env["COLLOPS_SHM_BYTES"] = "64K";
  options.env["COLLOPS_SHM_CHUNK_BYTES"] = std::to_string(kChunkBytes);
  options.env["COLLOPS_SHM_STREAM_BYTES"] = streamBytes;
  options.deadlineSeconds = 90;
  RunProcessRanks(
      ranks,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, ranks, "quant-oneshot-rounds");
        const uint16_t one = 0x3c00;  // float16 1.0: y is the plain sum
        QuantScale quant;
        quant.scale = &one;
        for (const DataType dtype : {ACL_FLOAT, ACL_FLOAT16}) {
          const size_t per = kChunkBytes / DataTypeSize(dtype);
          for (const size_t count : {size_t{0}, per - 1, per, per + 1, 3 * per + 64}) {
            std::vector<int8_t> in(count);
            std::vector<int> want(count, 0);
            for (size_t i = 0; i < count; ++i) {
              in[i] = static_cast<int8_t>(static_cast<int>((rank * 37 + i) % 255) - 127);
              for (int r = 0; r < ranks; ++r) want[i] += static_cast<int>((r * 37 + i) % 255) - 127;
            }
            std::vector<float> out(count, -1);
            std::vector<uint16_t> half(count, 0xffff);
            void* dst = dtype == ACL_FLOAT ? static_cast<void*>(out.data()) : half.data();
            const uint64_t before = comm->Rounds();
            ASSERT_TRUE(comm->AllReduceQuantised(in.data(), dst, count, quant, dtype));
            EXPECT_EQ(comm->Rounds() - before, std::max<size_t>(1, (count + per - 1) / per))
                << DataTypeName(dtype) << ", " << count << " elements, rank " << rank;
            for (size_t i = 0; i < count; ++i) {
              // Sums of at most 7 int8 values are exact in float16 too.
              if (dtype == ACL_FLOAT) {
                ASSERT_EQ(out[i], static_cast<float>(want[i]))
                    << count << " elements, rank " << rank << ", element " << i;
              } else {
                ASSERT_EQ(half[i], SmallIntegerHalfBits(want[i]))
                    << count << " elements, rank " << rank << ", element " << i;
              }
            }
          }
        }
      },
      options);
}

TEST_P(ProcessQuantOneShotRounds, OneRoundPerChunkOfOutput) {
  RunOneShotRounds(GetParam(), "0");  // ordinary stores
}

// From 4 KiB of output every call of several rounds is dequantised with non-temporal stores.
TEST_P(ProcessQuantOneShotRounds, StreamedOutputsAreExact) { RunOneShotRounds(GetParam(), "4096"); }

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessQuantOneShotRounds, ::testing::Values(2, 3, 4, 7),
                         [](const auto& info) { return Concat("R", info.param); });

}  // namespace
}  // namespace testing
}  // namespace collops
