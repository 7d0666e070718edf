// The benchmarks' sizes and layouts (bench/bench_common.h): sizes parse strictly (a probe's -b 0,
// -b abc and -e 9e18 sent Sizes() into an endless loop of allocations), the size sweep stops at
// -e without overflowing, and AllGatherV's blocks are uneven like ReduceScatterV's, as
// docs/performance.md says and bench/gloo_worker.py measures. The tools themselves, run with
// each bad option, are tests/python/bench/test_bench_options.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_common.h"

namespace collops_bench {
namespace {

int64_t Bytes(const std::string& text) {
  int64_t bytes = -1;
  const std::string why = ParseBytes(text, &bytes);
  EXPECT_EQ(why, "") << text;
  return bytes;
}

std::string WhyNot(const std::string& text) {
  int64_t bytes = -1;
  const std::string why = ParseBytes(text, &bytes);
  EXPECT_EQ(bytes, -1) << text << " must leave the size alone";
  return why;
}

TEST(BenchOptions, SizesAreIntegersWithAnOptionalSuffixOfEitherCase) {
  EXPECT_EQ(Bytes("8"), 8);
  EXPECT_EQ(Bytes("64k"), 64 << 10);
  EXPECT_EQ(Bytes("64K"), 64 << 10);
  EXPECT_EQ(Bytes("3m"), 3 << 20);
  EXPECT_EQ(Bytes("3M"), 3 << 20);
  EXPECT_EQ(Bytes("2g"), int64_t{2} << 30);
  EXPECT_EQ(Bytes("2G"), int64_t{2} << 30);
  EXPECT_EQ(Bytes("9223372036854775807"), INT64_MAX);
}

TEST(BenchOptions, AnythingElseIsNotASize) {
  for (const char* bad :
       {"", "0", "0K", "-5", "+5", "abc", "1e30", "9e18", "1.5K", "4KB", "4 K", " 4", "4T", "K"}) {
    EXPECT_NE(WhyNot(bad).find("not a size"), std::string::npos) << bad;
  }
  for (const char* huge : {"9223372036854775808", "99999999999999999999", "8589934592G"}) {
    EXPECT_NE(WhyNot(huge).find("too large"), std::string::npos) << huge;
  }
}

TEST(BenchOptions, TheSizeSweepStopsAtMaxWithoutOverflowing) {
  Options o;
  o.minBytes = 1 << 30;
  o.maxBytes = INT64_MAX;
  o.factor = 1 << 20;
  EXPECT_EQ(Sizes(o), (std::vector<int64_t>{int64_t{1} << 30, int64_t{1} << 50}));
  o.minBytes = 8, o.maxBytes = 64, o.factor = 4;
  EXPECT_EQ(Sizes(o), (std::vector<int64_t>{8, 32}));
  o.minBytes = o.maxBytes = 7;
  EXPECT_EQ(Sizes(o), (std::vector<int64_t>{7}));
}

TEST(BenchOptions, SendRecvNeedsTwoRanksInEveryTool) {
  EXPECT_EQ(RankCountError(Op::kSendRecv, 2), "");
  EXPECT_EQ(RankCountError(Op::kAllReduce, 1), "");
  EXPECT_NE(RankCountError(Op::kSendRecv, 1).find("sendrecv needs at least 2 ranks"),
            std::string::npos);
}

TEST(BenchLayout, AllGatherVGathersUnevenBlocksLikeReduceScatterVSegments) {
  const int ranks = 3;
  const int64_t bytes = 3000 * 4;
  for (int rank = 0; rank < ranks; ++rank) {
    const Layout gv = MakeLayout(Op::kAllGatherV, ranks, rank, bytes, 4);
    const Layout rsv = MakeLayout(Op::kReduceScatterV, ranks, rank, bytes, 4);
    EXPECT_EQ(gv.recvCounts, (std::vector<int64_t>{750, 1500, 750}));
    EXPECT_EQ(gv.recvCounts, rsv.sendCounts);
    EXPECT_EQ(gv.rdispls, (std::vector<int64_t>{0, 750, 2250}));
    EXPECT_EQ(gv.inCount, gv.recvCounts[rank]);
    EXPECT_EQ(gv.outCount, 3000);
    EXPECT_EQ(gv.bytes, bytes);
  }
}

TEST(BenchLayout, GoldenValuesOfTheGathersFollowTheirBlocks) {
  // Two ranks, 2 elements: AllGatherV's blocks are 0 and 2 elements, so both come from rank 1.
  const Layout tiny = MakeLayout(Op::kAllGatherV, 2, 0, 8, 4);
  ASSERT_EQ(tiny.recvCounts, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(Golden(Op::kAllGatherV, 2, 0, tiny, 0), Value(1, 0));
  EXPECT_EQ(Golden(Op::kAllGatherV, 2, 0, tiny, 1), Value(1, 1));
  for (Op op : {Op::kAllGather, Op::kAllGatherV}) {
    const Layout l = MakeLayout(op, 3, 2, 3000 * 4, 4);
    for (int j = 0; j < 3; ++j) {
      for (int64_t k : {int64_t{0}, l.recvCounts[j] - 1}) {
        EXPECT_EQ(Golden(op, 3, 2, l, l.rdispls[j] + k), Value(j, k)) << InfoOf(op).name;
      }
    }
  }
}

}  // namespace
}  // namespace collops_bench
