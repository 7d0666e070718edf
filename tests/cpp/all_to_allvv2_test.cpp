// Tests of AllToAllVV2Operation (counts in int64 host tensors) on thread ranks: first the 2-rank
// example of docs/operations.md, then MoE-style token dispatch over every movable dtype × R,
// counts rebound between Setup and Execute, and one negative test per rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <random>
#include <tuple>

#include "op_harness.h"
#include "ops/all_to_allvv2/all_to_allvv2_param.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

/// Where the count tensors carry their values. kHostData also fills deviceData with values that
/// would fail validation, so a pass proves hostData wins; kHostDataOnly leaves deviceData null
/// (ATB's host tensors).
enum class CountsIn { kDeviceData, kHostData, kHostDataOnly };

std::string CountsInName(CountsIn where) {
  switch (where) {
    case CountsIn::kDeviceData:
      return "deviceData";
    case CountsIn::kHostData:
      return "hostData";
    case CountsIn::kHostDataOnly:
      return "hostDataOnly";
  }
  return "?";
}

/// One rank's four count vectors, in input order.
struct Counts {
  std::vector<int64_t> sendCounts, sdispls, recvCounts, rdispls;
};

/// One rank's inputs: x, the four count tensors, tensorForInferShape.
class Inputs {
 public:
  Inputs(HostTensor x, const Counts& counts, std::vector<int64_t> inferShape, DataType inferDtype,
         CountsIn where)
      : host_{counts.sendCounts, counts.sdispls, counts.recvCounts, counts.rdispls}, where_(where) {
    tensors_.push_back(std::move(x));
    for (auto& values : host_) {
      if (where == CountsIn::kDeviceData) {
        tensors_.push_back(HostTensor::Counts(values));
        continue;
      }
      std::vector<int64_t> garbage(values.size());
      for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = i % 2 ? -1 : int64_t{1} << 40;
      HostTensor t = HostTensor::Counts(garbage);
      t.tensor().hostData = values.data();
      tensors_.push_back(t);
    }
    tensors_.emplace_back(inferDtype, std::move(inferShape));
  }
  Inputs(const Inputs&) = delete;

  std::vector<Tensor> tensors() {
    std::vector<Tensor> out = Tensors(tensors_);
    if (where_ == CountsIn::kHostDataOnly) {
      for (size_t k = 1; k <= host_.size(); ++k) out[k].deviceData = nullptr;
    }
    return out;
  }
  HostTensor& at(size_t i) { return tensors_[i]; }
  /// The host values of count input 1..4, rewritable in place between Setup and Execute.
  std::vector<int64_t>& host(size_t input) { return host_[input - 1]; }
  /// Rebinds all four host count vectors in place (same lengths, so hostData stays valid).
  void Rebind(const Counts& counts) {
    const std::vector<int64_t>* from[] = {&counts.sendCounts, &counts.sdispls, &counts.recvCounts,
                                          &counts.rdispls};
    for (size_t k = 0; k < host_.size(); ++k) {
      ASSERT_EQ(from[k]->size(), host_[k].size());
      std::copy(from[k]->begin(), from[k]->end(), host_[k].begin());
    }
  }

 private:
  std::array<std::vector<int64_t>, 4> host_;
  CountsIn where_;
  std::vector<HostTensor> tensors_;
};

AllToAllVV2Param ParamFor(int rank, int rankSize, const std::string& domain,
                          const std::string& backend = "lccl") {
  AllToAllVV2Param p;
  p.rank = rank;
  p.rankSize = rankSize;
  p.commMode = COMM_MULTI_THREAD;
  p.backend = backend;
  p.commDomain = domain;
  return p;
}

OperationPtr Create(const AllToAllVV2Param& param) {
  Operation* raw = nullptr;
  EXPECT_EQ(CreateOperation(param, &raw), NO_ERROR) << LastErrorMessage();
  return OperationPtr(raw);
}

/// Rank `me`'s y by the definition: y[rdispls[j] + k] = x_j[sdispls_j[me] + k].
std::vector<double> Golden(const std::vector<Counts>& counts,
                           const std::vector<std::vector<double>>& xs, int me) {
  const Counts& mine = counts[me];
  std::vector<double> y(
      std::accumulate(mine.recvCounts.begin(), mine.recvCounts.end(), int64_t{0}));
  for (size_t j = 0; j < counts.size(); ++j) {
    for (int64_t k = 0; k < mine.recvCounts[j]; ++k) {
      y[mine.rdispls[j] + k] = xs[j][counts[j].sdispls[me] + k];
    }
  }
  return y;
}

// ---- The 2-rank example of docs/operations.md (examples/json/all_to_allvv2_seed.json) --------

class AllToAllVV2SeedGolden : public ::testing::TestWithParam<std::tuple<DataType, CountsIn>> {};

TEST_P(AllToAllVV2SeedGolden, MatchesTheSeedsExample) {
  const auto [dtype, where] = GetParam();
  struct SeedRank {
    std::vector<int64_t> xShape;
    std::vector<double> x;
    Counts counts;
    int64_t outElements;
    std::vector<double> y;
  };
  const SeedRank seed[2] = {
      {{2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}, {{2, 4}, {0, 2}, {2, 2}, {0, 2}}, 4, {0, 1, 0, 1}},
      {{2, 3}, {0, 1, 2, 3, 4, 6}, {{2, 1}, {0, 2}, {4, 1}, {0, 4}}, 5, {2, 3, 4, 5, 2}},
  };
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    const SeedRank& s = seed[rank];
    // As the example: ATB's default backend "hccl" (auto).
    OperationPtr op = Create(ParamFor(rank, 2, domain, "hccl"));
    ASSERT_NE(op, nullptr);
    Inputs in(HostTensor::FromValues(dtype, s.xShape, s.x), s.counts, {s.outElements}, ACL_INT8,
              where);
    std::vector<HostTensor> outs = AllocateOutputs(*op, in.tensors());
    ASSERT_EQ(outs[0].shape(), (std::vector<int64_t>{1, s.outElements}));
    ASSERT_EQ(outs[0].dtype(), dtype);
    ASSERT_EQ(RunOperation(*op, in.tensors(), Tensors(outs)), NO_ERROR) << LastErrorMessage();
    ExpectExactly(outs[0], s.y, Concat("rank ", rank));
  });
}

// The dtypes docs/operations.md lists for the example.
INSTANTIATE_TEST_SUITE_P(
    SeedExample, AllToAllVV2SeedGolden,
    ::testing::Combine(::testing::Values(ACL_INT8, ACL_INT16, ACL_INT32, ACL_INT64, ACL_FLOAT,
                                         ACL_FLOAT16, ACL_BF16),
                       ::testing::Values(CountsIn::kDeviceData, CountsIn::kHostData)),
    [](const auto& info) {
      return Concat(DtypeTestName(std::get<0>(info.param)), "_",
                    CountsInName(std::get<1>(info.param)));
    });

// ---- MoE token dispatch over the grid -------------------------------------------------------

/// Rank r holds a few tokens of `hidden` elements and routes each to a rank drawn from a seeded
/// RNG (its first token to itself, so every rank receives something). Tokens are grouped by
/// destination: in rank order and packed, or (gapped) in reverse rank order with an unused token
/// before each group; receive blocks are packed in rank order, or in reverse order when gapped.
/// Every rank can compute every rank's counts from the seed, as a real dispatcher does.
std::vector<Counts> Dispatch(int rankSize, int64_t hidden, uint64_t seed, bool gapped,
                             std::vector<int64_t>* xRows) {
  std::mt19937_64 rng(seed * 7919 + rankSize);
  std::vector<std::vector<int64_t>> tokens(rankSize, std::vector<int64_t>(rankSize, 0));
  for (int r = 0; r < rankSize; ++r) {
    const int n = 1 + static_cast<int>(rng() % 9);
    ++tokens[r][r];
    for (int t = 1; t < n; ++t) ++tokens[r][rng() % rankSize];
  }
  std::vector<Counts> counts(rankSize);
  xRows->assign(rankSize, 0);
  for (int r = 0; r < rankSize; ++r) {
    Counts& c = counts[r];
    c.sdispls.assign(rankSize, 0);
    c.rdispls.assign(rankSize, 0);
    for (int j = 0; j < rankSize; ++j) {
      c.sendCounts.push_back(tokens[r][j] * hidden);
      c.recvCounts.push_back(tokens[j][r] * hidden);
    }
    int64_t row = 0;
    int64_t offset = 0;
    for (int k = 0; k < rankSize; ++k) {
      const int j = gapped ? rankSize - 1 - k : k;
      if (gapped) ++row;
      c.sdispls[j] = row * hidden;
      row += tokens[r][j];
      c.rdispls[j] = offset;
      offset += c.recvCounts[j];
    }
    (*xRows)[r] = row;
  }
  return counts;
}

class AllToAllVV2Golden : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(AllToAllVV2Golden, MatchesReference) {
  const auto [rankSize, dtype] = GetParam();
  const std::string domain = UniqueDomain();
  for (const CountsIn where :
       {CountsIn::kDeviceData, CountsIn::kHostData, CountsIn::kHostDataOnly}) {
    for (const bool gapped : {false, true}) {
      for (const int64_t hidden : {1, 3, 16}) {
        const uint64_t seed = 100 + hidden + (gapped ? 1 : 0);
        const std::string what =
            Concat(CountsInName(where), gapped ? " gapped" : " packed", " hidden ", hidden);
        std::vector<int64_t> rows;
        const std::vector<Counts> counts = Dispatch(rankSize, hidden, seed, gapped, &rows);
        std::vector<std::vector<double>> xs;
        for (int r = 0; r < rankSize; ++r) {
          xs.push_back(TestValues(dtype, rows[r] * hidden, seed, r));
        }
        RunThreadRanks(rankSize, [&](int rank) {
          OperationPtr op = Create(ParamFor(rank, rankSize, domain));
          ASSERT_NE(op, nullptr);
          const std::vector<double> golden = Golden(counts, xs, rank);
          const int64_t outRows = static_cast<int64_t>(golden.size()) / hidden;
          Inputs in(HostTensor::FromValues(dtype, {rows[rank], hidden}, xs[rank]), counts[rank],
                    {outRows, hidden}, dtype, where);
          std::vector<HostTensor> outs = AllocateOutputs(*op, in.tensors());
          ASSERT_EQ(RunOperation(*op, in.tensors(), Tensors(outs)), NO_ERROR)
              << what << ": " << LastErrorMessage();
          ExpectExactly(outs[0], golden, Concat(what, ", rank ", rank));
        });
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllToAllVV2, AllToAllVV2Golden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(MovableDtypes())),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         DtypeTestName(std::get<1>(info.param)));
                         });

TEST(AllToAllVV2Rebind, ExecuteUsesTheCountsBoundAfterSetup) {
  // Same sum(recvCounts) per rank, so the tensors keep their shapes; the blocks move entirely.
  const std::vector<Counts> atSetup = {{{2, 2}, {0, 2}, {2, 1}, {0, 2}},
                                       {{1, 3}, {0, 1}, {2, 3}, {0, 2}}};
  const std::vector<Counts> atExecute = {{{1, 4}, {5, 0}, {1, 2}, {2, 0}},
                                         {{2, 1}, {3, 0}, {4, 1}, {1, 0}}};
  std::vector<std::vector<double>> xs = {TestValues(ACL_INT16, 6, 9, 0),
                                         TestValues(ACL_INT16, 6, 9, 1)};
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = Create(ParamFor(rank, 2, domain));
    ASSERT_NE(op, nullptr);
    const int64_t outElements = rank == 0 ? 3 : 5;
    Inputs in(HostTensor::FromValues(ACL_INT16, {6}, xs[rank]), atSetup[rank], {outElements},
              ACL_FLOAT, CountsIn::kHostData);
    std::vector<HostTensor> outs = AllocateOutputs(*op, in.tensors());
    VariantPack pack{in.tensors(), Tensors(outs)};
    uint64_t workspaceSize = 0;
    ASSERT_EQ(op->Setup(pack, workspaceSize, nullptr), NO_ERROR) << LastErrorMessage();
    in.Rebind(atExecute[rank]);
    std::vector<uint8_t> workspace(workspaceSize);
    ASSERT_EQ(op->Execute(pack, workspace.data(), workspaceSize, nullptr), NO_ERROR)
        << LastErrorMessage();
    ExpectExactly(outs[0], Golden(atExecute, xs, rank), Concat("rank ", rank));
    // And again through a fresh Setup with the first counts, on the same operation.
    in.Rebind(atSetup[rank]);
    ASSERT_EQ(RunOperation(*op, in.tensors(), Tensors(outs)), NO_ERROR) << LastErrorMessage();
    ExpectExactly(outs[0], Golden(atSetup, xs, rank), Concat("rank ", rank, ", second run"));
  });
}

// ---- Errors -------------------------------------------------------------------------------

const char* const kCountNames[] = {"", "sendCounts", "sdispls", "recvCounts", "rdispls"};

/// Rank 0 of 2, valid: sends 2 to itself and 3 to rank 1 out of x [8], receives 2 and 4.
Counts ValidCounts() { return {{2, 3}, {0, 2}, {2, 4}, {0, 2}}; }

/// Setup on rank 0 of 2 (fails before any communication when the inputs break a rule).
Status SetupRank0(Inputs& in, int64_t outElements) {
  const LoneRank lone;
  OperationPtr op =
      MakeOperation("AllToAllVV2Operation", {{"rank", 0}, {"rankSize", 2}, {"commMode", 1}});
  std::vector<HostTensor> outs = {HostTensor(in.at(0).dtype(), {1, outElements})};
  VariantPack pack{in.tensors(), Tensors(outs)};
  uint64_t workspaceSize = 0;
  return op->Setup(pack, workspaceSize, nullptr);
}

Status SetupWith(const Counts& counts, int64_t outElements, int64_t xNumel = 8) {
  Inputs in(HostTensor(ACL_INT32, {xNumel}), counts, {outElements}, ACL_INT8, CountsIn::kHostData);
  return SetupRank0(in, outElements);
}

TEST(AllToAllVV2Errors, RequiresRank) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllToAllVV2Operation", R"({"rankSize": 2})", &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rank = -1"));
  EXPECT_EQ(AllToAllVV2Param().rank, -1);
}

TEST(AllToAllVV2Errors, RejectsUnknownParamKey) {
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllToAllVV2Operation", R"({"rank": 0, "rankSize": 2,
                            "sendCounts": [1, 1]})",
                            &op),
            ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCounts"));
}

TEST(AllToAllVV2Errors, RejectsWrongInputCount) {
  OperationPtr op = MakeOperation("AllToAllVV2Operation", {{"rank", 0}, {"rankSize", 2}});
  TensorDesc d;
  d.dtype = ACL_INT64;
  d.shape = MakeDims({2});
  std::vector<TensorDesc> out;
  EXPECT_EQ(op->InferShape({d, d, d, d, d}, out), ERROR_INVALID_IN_TENSOR_NUM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("tensorForInferShape"));
}

TEST(AllToAllVV2Errors, InfersOutputFromTensorForInferShapeElementCountOnly) {
  OperationPtr op = MakeOperation("AllToAllVV2Operation", {{"rank", 0}, {"rankSize", 2}});
  TensorDesc x, counts, infer;
  x.dtype = ACL_BF16;
  x.shape = MakeDims({3, 5});
  counts.dtype = ACL_INT64;
  counts.shape = MakeDims({2});
  infer.dtype = ACL_DOUBLE;
  infer.shape = MakeDims({2, 3, 2});
  std::vector<TensorDesc> out;
  ASSERT_EQ(op->InferShape({x, counts, counts, counts, counts, infer}, out), NO_ERROR)
      << LastErrorMessage();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype, ACL_BF16);
  EXPECT_EQ(out[0].shape, MakeDims({1, 12}));
}

TEST(AllToAllVV2Errors, RejectsInt32CountTensor) {
  for (size_t input = 1; input <= 4; ++input) {
    Inputs in(HostTensor(ACL_INT32, {8}), ValidCounts(), {6}, ACL_INT8, CountsIn::kDeviceData);
    in.at(input) = HostTensor::FromValues(ACL_INT32, {2}, {2, 2});
    EXPECT_EQ(SetupRank0(in, 6), ERROR_INVALID_TENSOR_DTYPE) << kCountNames[input];
    EXPECT_THAT(LastErrorMessage(),
                HasSubstr(Concat("(", kCountNames[input], ") has dtype int32")));
  }
}

TEST(AllToAllVV2Errors, RejectsCountTensorWithoutData) {
  Inputs in(HostTensor(ACL_INT32, {8}), ValidCounts(), {6}, ACL_INT8, CountsIn::kDeviceData);
  in.at(3).tensor().deviceData = nullptr;
  EXPECT_EQ(SetupRank0(in, 6), ERROR_INVALID_TENSOR_ADDR);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("recvCounts"));
}

TEST(AllToAllVV2Errors, RejectsWrongLengthCountTensor) {
  for (size_t input = 1; input <= 4; ++input) {
    Inputs in(HostTensor(ACL_INT32, {8}), ValidCounts(), {6}, ACL_INT8, CountsIn::kHostData);
    in.at(input) = HostTensor::Counts({0, 0, 0});
    EXPECT_EQ(SetupRank0(in, 6), ERROR_INVALID_PARAM) << kCountNames[input];
    EXPECT_THAT(LastErrorMessage(),
                HasSubstr(Concat(kCountNames[input], " has 3 entries; rankSize = 2")));
  }
}

TEST(AllToAllVV2Errors, RejectsNegativeEntry) {
  for (size_t input = 1; input <= 4; ++input) {
    Counts c = ValidCounts();
    std::vector<int64_t>* fields[] = {nullptr, &c.sendCounts, &c.sdispls, &c.recvCounts,
                                      &c.rdispls};
    (*fields[input])[1] = -1;
    EXPECT_EQ(SetupWith(c, 6), ERROR_INVALID_PARAM) << kCountNames[input];
    EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat("AllToAllVV2Operation (rank 0): ",
                                                     kCountNames[input], "[1] = -1 must be >= 0")));
  }
}

TEST(AllToAllVV2Errors, RejectsRecvTotalOtherThanTensorForInferShape) {
  EXPECT_EQ(SetupWith(ValidCounts(), 5), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(),
              HasSubstr("recvCounts sum to 6 but tensorForInferShape has 5 elements"));
}

TEST(AllToAllVV2Errors, RejectsZeroRecvTotal) {
  EXPECT_EQ(SetupWith({{2, 3}, {0, 2}, {0, 0}, {0, 0}}, 0), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("recvCounts sum to 0"));
}

TEST(AllToAllVV2Errors, RejectsSendRangeBeyondX) {
  EXPECT_EQ(SetupWith({{2, 4}, {0, 5}, {2, 4}, {0, 2}}, 6), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(),
              HasSubstr("AllToAllVV2Operation (rank 0): sendCounts[1] + sdispls[1] = 4 + 5 "
                        "exceeds x.numel() = 8"));
}

TEST(AllToAllVV2Errors, RejectsReceiveRangeBeyondOutput) {
  EXPECT_EQ(SetupWith({{2, 3}, {0, 2}, {2, 4}, {0, 3}}, 6), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("recvCounts[1] + rdispls[1] = 4 + 3 exceeds"));
}

TEST(AllToAllVV2Errors, RejectsOverlappingReceiveRanges) {
  EXPECT_EQ(SetupWith({{2, 3}, {0, 2}, {2, 4}, {2, 0}}, 6), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("overlap"));
}

TEST(AllToAllVV2Errors, RejectsCountsReboundToInvalidBeforeExecute) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(1, [&](int rank) {
    OperationPtr op = Create(ParamFor(rank, 1, domain));
    ASSERT_NE(op, nullptr);
    Inputs in(HostTensor(ACL_INT32, {4}), {{3}, {1}, {3}, {0}}, {3}, ACL_INT8, CountsIn::kHostData);
    std::vector<HostTensor> outs = AllocateOutputs(*op, in.tensors());
    VariantPack pack{in.tensors(), Tensors(outs)};
    uint64_t workspaceSize = 0;
    ASSERT_EQ(op->Setup(pack, workspaceSize, nullptr), NO_ERROR) << LastErrorMessage();
    in.host(2)[0] = 2;  // x[2 : 5] is past x's 4 elements
    EXPECT_EQ(op->Execute(pack, nullptr, 0, nullptr), ERROR_INVALID_PARAM);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCounts[0] + sdispls[0] = 3 + 2 exceeds"));
  });
}

TEST(AllToAllVV2Errors, RanksWithDisagreeingCountsGetRankMismatchOnEveryRank) {
  // Valid on each rank alone, but rank 1 expects 3 elements from rank 0, which sends 2.
  const std::vector<Counts> counts = {{{1, 2}, {0, 1}, {1, 2}, {0, 1}},
                                      {{2, 1}, {0, 2}, {3, 1}, {0, 3}}};
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    OperationPtr op = Create(ParamFor(rank, 2, domain));
    ASSERT_NE(op, nullptr);
    const int64_t outElements = rank == 0 ? 3 : 4;
    Inputs in(HostTensor(ACL_FLOAT, {3}), counts[rank], {outElements}, ACL_INT8,
              CountsIn::kHostData);
    std::vector<HostTensor> outs = AllocateOutputs(*op, in.tensors());
    EXPECT_EQ(RunOperation(*op, in.tensors(), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(),
                HasSubstr("rank 0 sends 2 elements to rank 1 (sendCounts) but rank 1 expects 3 "
                          "from rank 0 (recvCounts)"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
