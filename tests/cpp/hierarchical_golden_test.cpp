// Hierarchical collectives (hierarchical_communicator.h) across pretend hosts against golden
// results. HierarchicalGolden runs the golden op suite (op_suite.h) through a hierarchical
// communicator built from thread-mode lccl communicators (flat over every rank, intra per host,
// inter over the leaders) for several layouts: even, uneven, non-contiguous, one host, one rank per
// host; HierarchicalGoldenDirect adds exchanges, refusals, random schedules and the exactness of
// sums on every layout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "collops/topology.h"
#include "exchange_cases.h"
#include "hierarchical_test_util.h"
#include "op_harness.h"
#include "op_suite.h"
#include "p2p_refusal_suite.h"
#include "random_schedule.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

std::string MarkerTag() {
  static int counter = 0;
  return Concat("hier-", getpid(), "-", ++counter);
}

struct LayoutCase {
  const char* name;
  std::vector<int> hostOfRank;
};

const std::vector<LayoutCase>& LayoutCases() {
  static const std::vector<LayoutCase> cases = {
      {"TwoByTwo", {0, 0, 1, 1}},      {"Uneven2_1_3", {0, 1, 2, 2, 0, 2}},
      {"NonContiguous", {0, 1, 0, 1}}, {"SingleHost", {0, 0, 0}},
      {"OneRankPerHost", {0, 1, 2}},
  };
  return cases;
}

/// A few dtypes per layout, so the grid takes seconds (TSan runs it): every layout runs reductions
/// and data movement (float16 and bfloat16 take both halves of the suite, and their sums are the
/// wide-accumulation path, so they go to the multi-host layouts; int8 brings the quantised
/// AllReduce, whose AllToAllV and AllGatherV meet the uneven layout).
std::vector<std::tuple<int, DataType>> Grid() {
  const std::vector<std::vector<DataType>> dtypes = {{ACL_FLOAT16, ACL_INT32, ACL_FLOAT},
                                                     {ACL_BF16, ACL_INT8},
                                                     {ACL_FLOAT16, ACL_INT64},
                                                     {ACL_FLOAT},
                                                     {ACL_INT8, ACL_FLOAT}};
  std::vector<std::tuple<int, DataType>> grid;
  for (size_t c = 0; c < dtypes.size(); ++c) {
    for (DataType dtype : dtypes[c]) grid.emplace_back(static_cast<int>(c), dtype);
  }
  return grid;
}

class HierarchicalGolden : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(HierarchicalGolden, EveryOpMatchesReference) {
  const auto [caseIndex, dtype] = GetParam();
  const HostLayout layout = Layout(LayoutCases()[caseIndex].hostOfRank);
  const int size = static_cast<int>(layout.hostOfRank.size());
  const std::string domain = UniqueDomain();
  const std::string tag = MarkerTag();
  RunThreadRanks(size, [&, dtype = dtype](int rank) {
    std::shared_ptr<Communicator> comm = ThreadHierarchy(rank, layout, domain);
    EXPECT_EQ(comm->BackendName(), "hccl(lccl+lccl)");
    SuiteJob job = ThreadJob(rank, size, domain, comm.get());
    job.markerTag = tag;
    RunEveryOp(job, dtype);
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, HierarchicalGolden, ::testing::ValuesIn(Grid()),
                         [](const auto& info) {
                           return Concat(LayoutCases()[std::get<0>(info.param)].name, "_",
                                         DtypeTestName(std::get<1>(info.param)));
                         });

/// Runs body(comm, rank, size, domain, c) on the thread ranks of a hierarchical communicator, for
/// every layout LayoutCases()[c] in turn.
void OnEveryLayout(
    const std::function<void(Communicator&, int, int, const std::string&, size_t)>& body) {
  for (size_t c = 0; c < LayoutCases().size(); ++c) {
    SCOPED_TRACE(LayoutCases()[c].name);
    const HostLayout layout = Layout(LayoutCases()[c].hostOfRank);
    const int size = static_cast<int>(layout.hostOfRank.size());
    const std::string domain = UniqueDomain();
    RunThreadRanks(size, [&](int rank) {
      std::shared_ptr<Communicator> comm = ThreadHierarchy(rank, layout, domain);
      body(*comm, rank, size, domain, c);
    });
  }
}

/// Groups of sends and receives (exchange_cases.h) on every layout: ops with peers on the same
/// host and on others in one group, rings where every rank sends first.
TEST(HierarchicalGoldenDirect, ExchangeOnEveryLayout) {
  OnEveryLayout([](Communicator& comm, int rank, int size, const std::string&, size_t) {
    ExchangeEveryCase(comm, rank, size);
  });
}

/// Send/Recv/SendRecv operations where one rank refuses its tensors (p2p_refusal_suite.h) on every
/// layout: ranks 0 and 1 on one host or on two.
TEST(HierarchicalGoldenDirect, PointToPointRefusalsOnEveryLayout) {
  OnEveryLayout([](Communicator& comm, int rank, int size, const std::string& domain, size_t) {
    RunPointToPointRefusals(ThreadJob(rank, size, domain, &comm), /*promptSeconds=*/10);
  });
}

/// Calls of every kind one after another (random_schedule.h) on every layout: the count matrix
/// an Agree leaves for the next AllToAllV must never be read by a later call.
TEST(HierarchicalGoldenDirect, RandomScheduleOnEveryLayout) {
  OnEveryLayout([](Communicator& comm, int, int, const std::string&, size_t c) {
    RunRandomSchedule(comm, 300 + c, 30);
  });
}

/// Float sums whose order matters: every rank must still hold the very same bits, in place.
TEST(HierarchicalGoldenDirect, InPlaceAllReduceIsBitIdenticalOnEveryRank) {
  const HostLayout layout = Layout({0, 1, 1, 0, 2});
  const int size = 5;
  const int64_t n = 1000;
  const std::string domain = UniqueDomain();
  std::vector<std::vector<float>> results(size);
  RunThreadRanks(size, [&](int rank) {
    auto comm = ThreadHierarchy(rank, layout, domain);
    std::vector<float> data(n);
    for (int64_t i = 0; i < n; ++i) data[i] = std::sin(0.37f * i + rank) * 1e3f / (rank + 1);
    comm->AllReduce(data.data(), data.data(), n, ACL_FLOAT, ReduceOp::kSum);
    results[rank] = data;
  });
  for (int64_t i = 0; i < n; ++i) {
    double golden = 0;
    for (int r = 0; r < size; ++r) golden += std::sin(0.37f * i + r) * 1e3f / (r + 1);
    ASSERT_NEAR(results[0][i], golden, 1e-3 * std::max(1.0, std::fabs(golden))) << i;
  }
  for (int r = 1; r < size; ++r) {
    EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), n * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
  }
}

/// A large AllReduce (160 KB, an odd count, in place and not) on even, interleaved and 3-per-host
/// layouts: exact for int32, bit-identical on every rank for float.
TEST(HierarchicalGoldenDirect, LargeAllReduceMatchesReference) {
  for (const std::vector<int>& hosts : {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 0, 1},
                                        std::vector<int>{0, 0, 0, 1, 1, 1}}) {
    const HostLayout layout = Layout(hosts);
    const int size = static_cast<int>(hosts.size());
    const std::string domain = UniqueDomain();
    const int64_t n = 40001;  // 160 KB of int32 or float
    std::vector<std::vector<float>> floats(size);
    RunThreadRanks(size, [&](int rank) {
      auto comm = ThreadHierarchy(rank, layout, domain);
      std::vector<int32_t> x(n), y(n, -1);
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<int32_t>((i * 7 + rank * 13) % 1000);
      comm->AllReduce(x.data(), y.data(), n, ACL_INT32, ReduceOp::kSum);
      for (int64_t i = 0; i < n; ++i) {
        int32_t want = 0;
        for (int r = 0; r < size; ++r) want += static_cast<int32_t>((i * 7 + r * 13) % 1000);
        ASSERT_EQ(y[i], want) << "rank " << rank << " element " << i;
      }
      std::vector<float> f(n);
      for (int64_t i = 0; i < n; ++i) f[i] = std::sin(0.37f * i + rank) * 1e3f / (rank + 1);
      comm->AllReduce(f.data(), f.data(), n, ACL_FLOAT, ReduceOp::kSum);
      floats[rank] = f;
    });
    for (int64_t i = 0; i < n; i += 97) {
      double golden = 0;
      for (int r = 0; r < size; ++r) golden += std::sin(0.37f * i + r) * 1e3f / (r + 1);
      ASSERT_NEAR(floats[0][i], golden, 1e-3 * std::max(1.0, std::fabs(golden))) << i;
    }
    for (int r = 1; r < size; ++r) {
      EXPECT_EQ(std::memcmp(floats[r].data(), floats[0].data(), n * sizeof(float)), 0)
          << "rank " << r << " differs from rank 0 (layout of " << size << ")";
    }
  }
}

/// 2048 + 1 rounds to 2048 in float16 (ties to even), so a host-level partial rounded to float16
/// would lose both ones: 2048 + 1 + 1 + 0 must come out 2050, rounded once.
TEST(HierarchicalGoldenDirect, Float16SumsRoundOnce) {
  const HostLayout layout = Layout({0, 0, 1, 1});
  const std::string domain = UniqueDomain();
  const std::vector<double> value = {2048, 1, 1, 0};
  RunThreadRanks(4, [&](int rank) {
    auto comm = ThreadHierarchy(rank, layout, domain);
    HostTensor x = HostTensor::FromValues(ACL_FLOAT16, {4}, std::vector<double>(4, value[rank]));
    HostTensor y(ACL_FLOAT16, {4});
    comm->AllReduce(x.data(), y.data(), 4, ACL_FLOAT16, ReduceOp::kSum);
    EXPECT_EQ(y.ToDoubles(), std::vector<double>(4, 2050)) << "AllReduce rank " << rank;
    const std::vector<int64_t> counts(4, 1), displs = {0, 1, 2, 3};
    HostTensor z(ACL_FLOAT16, {1});
    comm->ReduceScatterV(x.data(), counts.data(), displs.data(), z.data(), 1, ACL_FLOAT16,
                         ReduceOp::kSum);
    EXPECT_EQ(z.ToDoubles(), std::vector<double>(1, 2050)) << "ReduceScatterV rank " << rank;
  });
}

/// AllGatherV writes only the received ranges: a sentinel in every hole survives.
TEST(HierarchicalGoldenDirect, AllGatherVLeavesHolesUntouched) {
  const HostLayout layout = Layout({1, 0, 1, 2, 0});
  const int size = 5;
  const std::string domain = UniqueDomain();
  const std::vector<int64_t> counts = {3, 0, 2, 4, 1};
  const std::vector<int64_t> displs = {12, 0, 1, 5, 10};  // out of rank order, holes between
  const int64_t m = 16;
  RunThreadRanks(size, [&](int rank) {
    auto comm = ThreadHierarchy(rank, layout, domain);
    std::vector<int32_t> in(counts[rank]);
    for (int64_t k = 0; k < counts[rank]; ++k) in[k] = 100 * rank + static_cast<int32_t>(k);
    std::vector<int32_t> out(m, -7);
    comm->AllGatherV(in.data(), counts[rank], out.data(), counts.data(), displs.data(), ACL_INT32);
    std::vector<int32_t> golden(m, -7);
    for (int r = 0; r < size; ++r) {
      for (int64_t k = 0; k < counts[r]; ++k) golden[displs[r] + k] = 100 * r + k;
    }
    EXPECT_EQ(out, golden) << "rank " << rank;
  });
}

}  // namespace
}  // namespace testing
}  // namespace collops
