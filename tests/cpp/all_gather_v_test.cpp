// Golden and error tests of AllGatherVOperation on thread ranks: every movable dtype × R ×
// layout (packed ranges with a zero tail, gaps between ranges, zero counts, nothing sent).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <tuple>

#include "op_harness.h"
#include "ops/all_gather_v/all_gather_v_param.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

AllGatherVParam ThreadParam(int rank, int rankSize, const std::string& domain) {
  AllGatherVParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.commMode = COMM_MULTI_THREAD;
  param.commDomain = domain;
  return param;
}

OperationPtr MakeAllGatherV(const AllGatherVParam& param) {
  Operation* raw = nullptr;
  EXPECT_EQ(CreateOperation(param, &raw), NO_ERROR) << LastErrorMessage();
  return OperationPtr(raw);
}

/// One rank's inputs: x, sendCount, recvCounts, rdispls, y_shape (a float16 carrier of length m).
std::vector<HostTensor> Inputs(HostTensor x, int64_t sendCount,
                               const std::vector<int64_t>& recvCounts,
                               const std::vector<int64_t>& rdispls, int64_t m) {
  std::vector<HostTensor> ins = {std::move(x), HostTensor::Counts({sendCount}),
                                 HostTensor::Counts(recvCounts), HostTensor::Counts(rdispls),
                                 HostTensor(ACL_FLOAT16, {m})};
  return ins;
}

enum class Kind { kPackedWithTail, kGaps, kZeroCounts, kNothingSent };

/// Where every rank's contribution lands, per receiving rank.
struct Layout {
  std::vector<int64_t> sendCount;             // [i]: what rank i sends
  std::vector<int64_t> xRows;                 // [i]: dim 0 of rank i's x (numel >= sendCount)
  std::vector<std::vector<int64_t>> rdispls;  // [j][i]: where rank j puts rank i's elements
  int64_t m = 0;                              // dim 0 of out
};

Layout MakeLayout(Kind kind, int rankSize, int64_t rowWidth, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  Layout l;
  for (int i = 0; i < rankSize; ++i) {
    int64_t count = uniform(1, 9);
    if (kind == Kind::kZeroCounts && i % 2 == 0) count = 0;
    if (kind == Kind::kNothingSent) count = 0;
    l.sendCount.push_back(count);
    // Odd ranks hold one spare row, so x may be longer than what it sends.
    l.xRows.push_back((count + rowWidth - 1) / rowWidth + i % 2);
  }
  int64_t maxEnd = 0;
  for (int j = 0; j < rankSize; ++j) {
    std::vector<int64_t> displs(rankSize);
    int64_t cursor = kind == Kind::kGaps ? uniform(1, 3) : 0;
    for (int step = 0; step < rankSize; ++step) {
      // Packed ranges follow rank order; the others start at the receiver's own range and, for
      // zero counts, run backwards, so ranges are out of rank order and differ between ranks.
      int i = step;
      if (kind == Kind::kGaps) i = (j + step) % rankSize;
      if (kind == Kind::kZeroCounts) i = rankSize - 1 - step;
      displs[i] = cursor;
      cursor += l.sendCount[i];
      if (kind != Kind::kPackedWithTail) cursor += uniform(0, 3);
    }
    maxEnd = std::max(maxEnd, cursor);
    l.rdispls.push_back(displs);
  }
  const int64_t tail = kind == Kind::kPackedWithTail ? 5 : 0;
  l.m = std::max<int64_t>(1, (maxEnd + tail + rowWidth - 1) / rowWidth);
  return l;
}

class AllGatherVGolden : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(AllGatherVGolden, MatchesReference) {
  const auto [rankSize, dtype] = GetParam();
  const std::string domain = UniqueDomain();
  uint64_t seed = rankSize * 131 + static_cast<uint64_t>(dtype);
  for (const Kind kind :
       {Kind::kPackedWithTail, Kind::kGaps, Kind::kZeroCounts, Kind::kNothingSent}) {
    for (const std::vector<int64_t>& rowShape :
         std::vector<std::vector<int64_t>>{{}, {3}, {2, 2}}) {
      int64_t rowWidth = 1;
      for (const int64_t d : rowShape) rowWidth *= d;
      const Layout l = MakeLayout(kind, rankSize, rowWidth, ++seed);
      std::vector<std::vector<double>> inputs;
      for (int i = 0; i < rankSize; ++i) {
        inputs.push_back(TestValues(dtype, l.xRows[i] * rowWidth, seed, i));
      }
      const int64_t outNumel = l.m * rowWidth;
      std::vector<int64_t> outShape = {l.m};
      outShape.insert(outShape.end(), rowShape.begin(), rowShape.end());
      RunThreadRanks(rankSize, [&](int rank) {
        // Golden: zeros, then each rank's first sendCount elements at this rank's rdispls.
        std::vector<double> golden(outNumel, 0.0);
        for (int i = 0; i < rankSize; ++i) {
          for (int64_t k = 0; k < l.sendCount[i]; ++k) {
            golden[l.rdispls[rank][i] + k] = inputs[i][k];
          }
        }
        std::vector<int64_t> xShape = {l.xRows[rank]};
        xShape.insert(xShape.end(), rowShape.begin(), rowShape.end());
        OperationPtr op = MakeAllGatherV(ThreadParam(rank, rankSize, domain));
        ASSERT_NE(op, nullptr);
        std::vector<HostTensor> ins = Inputs(HostTensor::FromValues(dtype, xShape, inputs[rank]),
                                             l.sendCount[rank], l.sendCount, l.rdispls[rank], l.m);
        std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
        ASSERT_EQ(outs.size(), 1u);
        ASSERT_EQ(outs[0].shape(), outShape);
        // Non-zero garbage, so uncovered elements prove they were zeroed.
        outs[0] = HostTensor::FromValues(dtype, outShape, std::vector<double>(outNumel, 3.0));
        ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
        ExpectExactly(outs[0], golden,
                      Concat("rank ", rank, " layout ", static_cast<int>(kind), " out ",
                             DimsToString(MakeDims(outShape))));
      });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllGatherV, AllGatherVGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(MovableDtypes())),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         DtypeTestName(std::get<1>(info.param)));
                         });

TEST(AllGatherVShape, OutIsXWithDim0FromYShape) {
  OperationPtr op = MakeOperation("AllGatherVOperation", {{"rank", 0}, {"rankSize", 2}});
  std::vector<TensorDesc> in(5);
  in[0].dtype = ACL_BF16;
  in[0].shape = MakeDims({5, 3, 2});
  for (int k = 1; k <= 3; ++k) in[k].dtype = ACL_INT64;
  in[1].shape = MakeDims({1});
  in[2].shape = MakeDims({2});
  in[3].shape = MakeDims({2});
  in[4].dtype = ACL_INT8;
  in[4].shape = MakeDims({7});
  std::vector<TensorDesc> out;
  ASSERT_EQ(op->InferShape(in, out), NO_ERROR) << LastErrorMessage();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype, ACL_BF16);
  EXPECT_EQ(out[0].shape, MakeDims({7, 3, 2}));
}

TEST(AllGatherVShape, HostDataWinsOverDeviceData) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeAllGatherV(ThreadParam(rank, 2, domain));
    const std::vector<double> x = {rank * 10.0 + 1, rank * 10.0 + 2, rank * 10.0 + 3};
    // deviceData says "send everything packed"; the bound host counts say rank 0 sends 1 and
    // rank 1 sends 2, placed in reverse order with a gap.
    std::vector<HostTensor> ins =
        Inputs(HostTensor::FromValues(ACL_INT32, {3}, x), 3, {3, 3}, {0, 3}, 6);
    std::vector<int64_t> sendCount = {rank == 0 ? 1 : 2};
    std::vector<int64_t> recvCounts = {1, 2};
    std::vector<int64_t> rdispls = {4, 1};
    ins[1].tensor().hostData = sendCount.data();
    ins[2].tensor().hostData = recvCounts.data();
    ins[3].tensor().hostData = rdispls.data();
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR) << LastErrorMessage();
    ExpectExactly(outs[0], {0, 11, 12, 0, 1, 0}, Concat("rank ", rank));
  });
}

TEST(AllGatherVErrors, RankDefaultsToMinusOneAndIsRequired) {
  EXPECT_EQ(AllGatherVParam().rank, -1);
  AllGatherVParam param;
  param.rankSize = 2;
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation(param, &op), ERROR_INVALID_PARAM);
  EXPECT_EQ(op, nullptr);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("AllGatherVOperation"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rank = -1"));
  EXPECT_EQ(CreateOperation("AllGatherVOperation", R"({"rankSize":2})", &op), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rank = -1"));
}

/// Setup of rank 0 of 1 with x = [xNumel] int8 and out = [m]; every rule below fails in Setup,
/// before any communication.
Status SetupOneRank(int64_t xNumel, const std::vector<int64_t>& sendCount,
                    const std::vector<int64_t>& recvCounts, const std::vector<int64_t>& rdispls,
                    int64_t m) {
  OperationPtr op = MakeAllGatherV(ThreadParam(0, 1, UniqueDomain()));
  std::vector<HostTensor> ins = {HostTensor(ACL_INT8, {xNumel}), HostTensor::Counts(sendCount),
                                 HostTensor::Counts(recvCounts), HostTensor::Counts(rdispls),
                                 HostTensor(ACL_INT8, {m})};
  std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
  VariantPack pack{Tensors(ins), Tensors(outs)};
  uint64_t workspaceSize = 0;
  return op->Setup(pack, workspaceSize, nullptr);
}

TEST(AllGatherVErrors, RejectsNegativeSendCount) {
  EXPECT_EQ(SetupOneRank(4, {-1}, {0}, {0}, 4), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCount = -1"));
}

TEST(AllGatherVErrors, RejectsSendCountBeyondX) {
  EXPECT_EQ(SetupOneRank(4, {5}, {5}, {0}, 8), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCount = 5"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("x.numel() = 4"));
}

TEST(AllGatherVErrors, RejectsSendCountWithTwoEntries) {
  EXPECT_EQ(SetupOneRank(4, {1, 1}, {1}, {0}, 4), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCount has 2 entries"));
}

TEST(AllGatherVErrors, RejectsRecvCountsOfWrongLength) {
  EXPECT_EQ(SetupOneRank(4, {1}, {1, 0}, {0}, 4), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("recvCounts has 2 entries"));
}

TEST(AllGatherVErrors, RejectsRdisplsOfWrongLength) {
  EXPECT_EQ(SetupOneRank(4, {1}, {1}, {}, 4), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rdispls has 0 entries"));
}

TEST(AllGatherVErrors, RejectsNegativeRecvCount) {
  EXPECT_EQ(SetupOneRank(4, {0}, {-2}, {0}, 4), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("recvCounts[0] = -2"));
}

TEST(AllGatherVErrors, RejectsNegativeRdispl) {
  EXPECT_EQ(SetupOneRank(4, {1}, {1}, {-3}, 4), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rdispls[0] = -3"));
}

TEST(AllGatherVErrors, RejectsRangeBeyondOut) {
  EXPECT_EQ(SetupOneRank(4, {3}, {3}, {6}, 8), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("recvCounts[0] + rdispls[0] = 3 + 6"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr("out.numel() = 8"));
}

TEST(AllGatherVErrors, RejectsRangeThatOverflows) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(SetupOneRank(4, {3}, {3}, {huge}, 8), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rdispls[0]"));
  EXPECT_THAT(LastErrorMessage(), HasSubstr(std::to_string(huge)));
}

TEST(AllGatherVErrors, RejectsCountsThatAreNotInt64) {
  OperationPtr op = MakeOperation("AllGatherVOperation", {{"rank", 0}, {"rankSize", 1}});
  std::vector<TensorDesc> in(5);
  for (auto& d : in) {
    d.dtype = ACL_INT64;
    d.shape = MakeDims({1});
  }
  in[1].dtype = ACL_INT32;
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape(in, out), ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCount"));
}

TEST(AllGatherVErrors, RejectsOwnRecvCountOtherThanSendCount) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = MakeAllGatherV(ThreadParam(rank, 2, domain));
    std::vector<int64_t> recvCounts = {2, 2};
    recvCounts[rank] = 3;
    std::vector<HostTensor> ins = Inputs(HostTensor(ACL_INT16, {4}), 2, recvCounts, {0, 4}, 8);
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_INVALID_PARAM);
    EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat("recvCounts[", rank, "] = 3")));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCount = 2"));
  });
}

TEST(AllGatherVErrors, RanksThatDisagreeOnCountsGetRankMismatch) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(3, [&](int rank) {
    OperationPtr op = MakeAllGatherV(ThreadParam(rank, 3, domain));
    // Rank 2 sends 3 elements, but ranks 0 and 1 expect 2 from it.
    const int64_t sendCount = rank == 2 ? 3 : 2;
    std::vector<int64_t> recvCounts = {2, 2, 2};
    recvCounts[rank] = sendCount;
    std::vector<HostTensor> ins =
        Inputs(HostTensor::FromValues(ACL_FLOAT, {3}, TestValues(ACL_FLOAT, 3, 5, rank)), sendCount,
               recvCounts, {0, 3, 6}, 9);
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(),
                HasSubstr("rank 2 sends 3 elements to rank 0 (sendCount) but rank 0 expects 2 "
                          "from rank 2 (recvCounts)"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
