// Golden and negative tests of AllToAllVOperation (counts in the params) on thread ranks: every
// movable dtype × R × exchange pattern (packed, zero counts to some peers, gapped and out-of-order
// displacements, overlapping send ranges, empty inputs, seeded random counts).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>

#include "op_harness.h"
#include "ops/all_to_allv/all_to_allv_param.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::HasSubstr;

/// One rank's side of an exchange.
struct Layout {
  std::vector<int64_t> sendCounts, sdispls, recvCounts, rdispls;
  int64_t xNumel = 0;
};

/// counts[i][j] = elements rank i sends to rank j, and every rank's layout.
struct Exchange {
  std::vector<std::vector<int64_t>> counts;
  std::vector<Layout> ranks;
};

/// Lays out `counts`. seed 0: blocks packed in rank order. Otherwise each rank's send blocks come
/// in a shuffled order with 0..3 unused elements before each (and after the last), and its
/// receive blocks in another shuffled order (packed: they must tile y).
Exchange Lay(std::vector<std::vector<int64_t>> counts, uint64_t seed) {
  const int r = static_cast<int>(counts.size());
  // Every rank must receive something: y is [1, sum(recvCounts)].
  for (int dst = 0; dst < r; ++dst) {
    int64_t total = 0;
    for (int src = 0; src < r; ++src) total += counts[src][dst];
    if (total == 0) counts[dst][dst] = 1;
  }
  std::mt19937_64 rng(seed);
  Exchange ex;
  ex.counts = counts;
  for (int me = 0; me < r; ++me) {
    Layout l;
    l.sendCounts = counts[me];
    l.sdispls.assign(r, 0);
    l.rdispls.assign(r, 0);
    for (int src = 0; src < r; ++src) l.recvCounts.push_back(counts[src][me]);
    std::vector<int> sendOrder(r), recvOrder(r);
    std::iota(sendOrder.begin(), sendOrder.end(), 0);
    std::iota(recvOrder.begin(), recvOrder.end(), 0);
    if (seed != 0) {
      std::shuffle(sendOrder.begin(), sendOrder.end(), rng);
      std::shuffle(recvOrder.begin(), recvOrder.end(), rng);
    }
    int64_t offset = 0;
    for (const int j : sendOrder) {
      if (seed != 0) offset += static_cast<int64_t>(rng() % 4);
      l.sdispls[j] = offset;
      offset += l.sendCounts[j];
    }
    l.xNumel = offset + (seed != 0 ? static_cast<int64_t>(rng() % 4) : 0);
    offset = 0;
    for (const int j : recvOrder) {
      l.rdispls[j] = offset;
      offset += l.recvCounts[j];
    }
    ex.ranks.push_back(l);
  }
  return ex;
}

std::vector<std::vector<int64_t>> Matrix(int r, const std::function<int64_t(int, int)>& f) {
  std::vector<std::vector<int64_t>> m(r, std::vector<int64_t>(r));
  for (int i = 0; i < r; ++i) {
    for (int j = 0; j < r; ++j) m[i][j] = f(i, j);
  }
  return m;
}

/// The named exchange patterns every golden test runs.
std::vector<std::pair<std::string, Exchange>> Patterns(int r) {
  std::vector<std::pair<std::string, Exchange>> out;
  out.emplace_back("packed", Lay(Matrix(r, [](int i, int j) { return 1 + (i + 2 * j) % 4; }), 0));
  out.emplace_back(
      "zeros_gapped_shuffled",
      Lay(Matrix(r, [](int i, int j) { return (i + j) % 3 == 1 ? 0 : 1 + (3 * i + j) % 5; }), 7));
  out.emplace_back("self_only", Lay(Matrix(r, [](int i, int j) { return i == j ? 3 : 0; }), 0));
  // Ranks other than 0 send nothing and have an empty x.
  out.emplace_back("one_sender",
                   Lay(Matrix(r, [](int i, int j) { return i == 0 ? 2 + j : 0; }), 0));
  out.emplace_back("large_odd",
                   Lay(Matrix(r, [](int i, int j) { return 1001 + 37 * i + 11 * j; }), 3));
  for (const uint64_t seed : {11u, 12u}) {
    // Counts from a seeded RNG: every rank computing them gets the same matrix.
    std::mt19937_64 rng(seed * 100 + r);
    out.emplace_back(
        Concat("random", seed),
        Lay(Matrix(r, [&](int, int) { return static_cast<int64_t>(rng() % 7); }), seed));
  }
  // Every rank sends the same range, x.flat[0 : 5 + rank], to every peer.
  Exchange same = Lay(Matrix(r, [](int i, int) { return 5 + i; }), 0);
  for (int i = 0; i < r; ++i) {
    same.ranks[i].sdispls.assign(r, 0);
    same.ranks[i].xNumel = 6 + i;
  }
  out.emplace_back("overlapping_sends", same);
  return out;
}

/// x's shape: 2-D when the count allows, to show that only x.flat matters.
std::vector<int64_t> XShape(int64_t n) {
  if (n > 0 && n % 2 == 0) return {2, n / 2};
  return {n};
}

/// Rank `me`'s y, from every rank's x values, by the definition.
std::vector<double> Golden(const Exchange& ex, const std::vector<std::vector<double>>& xs, int me) {
  // The receive blocks tile y (Lay packs them), so every element is assigned below.
  const Layout& mine = ex.ranks[me];
  std::vector<double> y(
      std::accumulate(mine.recvCounts.begin(), mine.recvCounts.end(), int64_t{0}));
  for (size_t j = 0; j < ex.ranks.size(); ++j) {
    for (int64_t k = 0; k < mine.recvCounts[j]; ++k) {
      y[mine.rdispls[j] + k] = xs[j][ex.ranks[j].sdispls[me] + k];
    }
  }
  return y;
}

AllToAllVParam ParamFor(const Layout& l, int rank, int rankSize, const std::string& domain) {
  AllToAllVParam p;
  p.rank = rank;
  p.rankSize = rankSize;
  p.commMode = COMM_MULTI_THREAD;
  p.backend = "lccl";
  p.commDomain = domain;
  p.sendCounts = l.sendCounts;
  p.sdispls = l.sdispls;
  p.recvCounts = l.recvCounts;
  p.rdispls = l.rdispls;
  return p;
}

class AllToAllVGolden : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(AllToAllVGolden, MatchesReference) {
  const auto [rankSize, dtype] = GetParam();
  const std::string domain = UniqueDomain();
  for (const auto& [name, ex] : Patterns(rankSize)) {
    std::vector<std::vector<double>> xs;
    for (int r = 0; r < rankSize; ++r) {
      xs.push_back(TestValues(dtype, ex.ranks[r].xNumel, 5, r));
    }
    RunThreadRanks(rankSize, [&](int rank) {
      const Layout& l = ex.ranks[rank];
      Operation* raw = nullptr;
      ASSERT_EQ(CreateOperation(ParamFor(l, rank, rankSize, domain), &raw), NO_ERROR)
          << name << ": " << LastErrorMessage();
      OperationPtr op(raw);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, XShape(l.xNumel), xs[rank])};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      ASSERT_EQ(outs[0].shape(),
                (std::vector<int64_t>{1, static_cast<int64_t>(Golden(ex, xs, rank).size())}));
      ASSERT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), NO_ERROR)
          << name << ": " << LastErrorMessage();
      ExpectExactly(outs[0], Golden(ex, xs, rank), Concat(name, ", rank ", rank));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(AllToAllV, AllToAllVGolden,
                         ::testing::Combine(::testing::ValuesIn(GoldenRankSizes()),
                                            ::testing::ValuesIn(MovableDtypes())),
                         [](const auto& info) {
                           return Concat("R", std::get<0>(info.param), "_",
                                         DtypeTestName(std::get<1>(info.param)));
                         });

// ---- Errors -------------------------------------------------------------------------------

/// A valid 2-rank param for rank 0: sends 2 to itself and 3 to rank 1, receives 2 and 4.
nlohmann::json ValidJson() {
  return {{"rank", 0},         {"rankSize", 2},        {"commMode", 1},    {"sendCounts", {2, 3}},
          {"sdispls", {0, 2}}, {"recvCounts", {2, 4}}, {"rdispls", {0, 2}}};
}

Status CreateWith(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = ValidJson();
  if (value.is_null()) {
    j.erase(key);
  } else {
    j[key] = value;
  }
  Operation* op = nullptr;
  const Status s = CreateOperation("AllToAllVOperation", j, &op);
  DestroyOperation(op);
  return s;
}

TEST(AllToAllVErrors, AcceptsTheValidBaseline) {
  EXPECT_EQ(CreateWith("rank", 0), NO_ERROR) << LastErrorMessage();
}

TEST(AllToAllVErrors, RejectsMissingCountVector) {
  for (const char* field : {"sendCounts", "sdispls", "recvCounts", "rdispls"}) {
    EXPECT_EQ(CreateWith(field, nullptr), ERROR_INVALID_PARAM) << field;
    EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat(field, " has 0 entries")));
  }
}

TEST(AllToAllVErrors, RejectsWrongLengthCountVector) {
  for (const char* field : {"sendCounts", "sdispls", "recvCounts", "rdispls"}) {
    EXPECT_EQ(CreateWith(field, {0, 0, 0}), ERROR_INVALID_PARAM) << field;
    EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat(field, " has 3 entries; rankSize = 2")));
  }
}

TEST(AllToAllVErrors, RejectsNegativeEntry) {
  for (const char* field : {"sendCounts", "sdispls", "recvCounts", "rdispls"}) {
    EXPECT_EQ(CreateWith(field, {0, -1}), ERROR_INVALID_PARAM) << field;
    EXPECT_THAT(LastErrorMessage(), HasSubstr(Concat(field, "[1] = -1 must be >= 0")));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("AllToAllVOperation (rank 0)"));
  }
}

TEST(AllToAllVErrors, RejectsZeroRecvTotal) {
  nlohmann::json j = ValidJson();
  j["sendCounts"] = {0, 3};
  j["recvCounts"] = {0, 0};
  j["rdispls"] = {0, 0};
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllToAllVOperation", j, &op), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("recvCounts sum to 0"));
}

TEST(AllToAllVErrors, RejectsReceiveRangeBeyondOutput) {
  EXPECT_EQ(CreateWith("rdispls", {0, 3}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(),
              HasSubstr("recvCounts[1] + rdispls[1] = 4 + 3 exceeds y.numel() = "
                        "sum(recvCounts) = 6"));
}

TEST(AllToAllVErrors, RejectsReceiveRangeOverflow) {
  EXPECT_EQ(CreateWith("rdispls", {0, std::numeric_limits<int64_t>::max()}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rdispls[1]"));
}

TEST(AllToAllVErrors, RejectsOverlappingReceiveRanges) {
  // Inside y = [1, 6] each, but they overlap (and leave y[5] unwritten).
  EXPECT_EQ(CreateWith("rdispls", {1, 1}), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 (rdispls[0] = 1, recvCounts[0] = 2) and "
                                            "rank 1 (rdispls[1] = 1, recvCounts[1] = 4) overlap"));
}

TEST(AllToAllVErrors, AcceptsZeroLengthReceiveAnywhereInside) {
  nlohmann::json j = ValidJson();
  j["sendCounts"] = {2, 3};
  j["recvCounts"] = {2, 0};
  j["rdispls"] = {0, 1};
  Operation* op = nullptr;
  EXPECT_EQ(CreateOperation("AllToAllVOperation", j, &op), NO_ERROR) << LastErrorMessage();
  DestroyOperation(op);
}

/// Setup of rank 0 of the valid param with an x of `n` int32 elements.
Status SetupWithX(const nlohmann::json& param, int64_t n) {
  const LoneRank lone;
  OperationPtr op = MakeOperation("AllToAllVOperation", param);
  std::vector<HostTensor> ins = {HostTensor(ACL_INT32, {n})};
  std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
  VariantPack pack{Tensors(ins), Tensors(outs)};
  uint64_t workspaceSize = 0;
  return op->Setup(pack, workspaceSize, nullptr);
}

TEST(AllToAllVErrors, RejectsSendRangeBeyondX) {
  nlohmann::json j = ValidJson();
  j["sendCounts"] = {2, 4};
  j["sdispls"] = {0, 5};
  EXPECT_EQ(SetupWithX(j, 8), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(),
              HasSubstr("AllToAllVOperation (rank 0): sendCounts[1] + sdispls[1] = 4 + 5 exceeds "
                        "x.numel() = 8"));
}

TEST(AllToAllVErrors, RejectsSendRangeOverflow) {
  nlohmann::json j = ValidJson();
  j["sendCounts"] = {2, std::numeric_limits<int64_t>::max()};
  j["sdispls"] = {0, 1};
  EXPECT_EQ(SetupWithX(j, 8), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCounts[1] + sdispls[1]"));
}

TEST(AllToAllVErrors, RejectsWrongTypedField) {
  EXPECT_EQ(CreateWith("sendCounts", "2,3"), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(), HasSubstr("sendCounts"));
}

TEST(AllToAllVErrors, RanksWithDisagreeingCountsGetRankMismatchOnEveryRank) {
  // Each rank is valid on its own, but rank 2 expects 4 elements from rank 1, which sends 1.
  const std::string domain = UniqueDomain();
  const std::vector<Layout> layouts = {
      {{1, 1, 1}, {0, 1, 2}, {1, 1, 1}, {0, 1, 2}, 3},
      {{1, 1, 1}, {0, 1, 2}, {1, 1, 1}, {0, 1, 2}, 3},
      {{1, 1, 1}, {0, 1, 2}, {1, 4, 1}, {0, 1, 5}, 3},
  };
  RunThreadRanks(3, [&](int rank) {
    Operation* raw = nullptr;
    ASSERT_EQ(CreateOperation(ParamFor(layouts[rank], rank, 3, domain), &raw), NO_ERROR)
        << LastErrorMessage();
    OperationPtr op(raw);
    std::vector<HostTensor> ins = {HostTensor(ACL_FLOAT, {3})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(),
                HasSubstr("rank 1 sends 1 elements to rank 2 (sendCounts) but rank 2 expects 4 "
                          "from rank 1 (recvCounts)"));
  });
}

TEST(AllToAllVErrors, RanksWithDifferentDtypesGetRankMismatchOnEveryRank) {
  const std::string domain = UniqueDomain();
  const Layout l = {{1, 1}, {0, 1}, {1, 1}, {0, 1}, 2};
  RunThreadRanks(2, [&](int rank) {
    Operation* raw = nullptr;
    ASSERT_EQ(CreateOperation(ParamFor(l, rank, 2, domain), &raw), NO_ERROR);
    OperationPtr op(raw);
    std::vector<HostTensor> ins = {HostTensor(rank == 0 ? ACL_FLOAT : ACL_INT32, {2})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs)), ERROR_RANK_MISMATCH);
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 0 has float32"));
    EXPECT_THAT(LastErrorMessage(), HasSubstr("rank 1 has int32"));
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
