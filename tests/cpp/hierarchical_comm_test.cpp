// Hierarchical collectives (hierarchical_communicator.h) and backend "hccl" (auto) across
// pretend hosts.
//
// HierarchicalGolden runs the golden op suite (op_suite.h) through a hierarchical communicator
// built from thread-mode lccl communicators (flat over every rank, intra per host, inter over the
// leaders) for several layouts: even, uneven, non-contiguous, one host, one rank per host.
// HcclAuto forks real ranks and lets backend "hccl" find the hosts (rank table or
// COLLOPS_HOST_ID), with COLLOPS_ENGINE=lccl standing in for the engine between hosts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "collops/backend.h"
#include "collops/context.h"
#include "collops/hierarchical_communicator.h"
#include "collops/signature.h"
#include "collops/topology.h"
#include "core/comm/hier/hierarchical_comm.h"
#include "exchange_cases.h"
#include "op_harness.h"
#include "op_suite.h"
#include "p2p_refusal_suite.h"
#include "process_ranks.h"
#include "random_schedule.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

HostLayout Layout(const std::vector<int>& hostOfRank) {
  std::vector<std::string> names;
  for (int h = 0; h < 8; ++h) names.push_back(Concat("host", h));
  return NormalizeLayout(hostOfRank, names);
}

using WrapComm = std::function<std::shared_ptr<Communicator>(std::shared_ptr<Communicator>)>;

/// This rank's hierarchical communicator over thread-mode lccl communicators.
/// `wrapFlat` and `wrapRail` may put a test engine around the flat and rail communicators.
std::shared_ptr<Communicator> ThreadHierarchy(int rank, const HostLayout& layout,
                                              const std::string& domain,
                                              const WrapComm& wrapFlat = nullptr,
                                              const WrapComm& wrapRail = nullptr) {
  const int size = static_cast<int>(layout.hostOfRank.size());
  const int host = layout.hostOfRank[rank];
  auto flat = CreateCommunicator(ThreadRankParam(rank, size, domain + "/flat"));
  if (wrapFlat) flat = wrapFlat(flat);
  auto intra = CreateCommunicator(ThreadRankParam(layout.LocalIndex(rank),
                                                  static_cast<int>(layout.RanksOn(host).size()),
                                                  Concat(domain, "/host", host)));
  const int local = layout.LocalIndex(rank);
  auto rail = CreateCommunicator(ThreadRankParam(layout.RailRank(rank),
                                                 static_cast<int>(layout.HostsOfRail(local).size()),
                                                 Concat(domain, "/rail", local)));
  if (wrapRail) rail = wrapRail(rail);
  return MakeHierarchicalCommunicator(flat, intra, rail, layout);
}

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

/// One uneven AllToAllV of int64 over `size` ranks: block (j -> i) has count(j, i) elements.
/// `reversed`: the received blocks lie in y from the highest rank down.
struct ExchangeCase {
  std::vector<int64_t> sendCounts, sdispls, recvCounts, rdispls, in, golden;

  ExchangeCase(int rank, int size, const std::function<int64_t(int, int)>& count,
               bool reversed = false)
      : sendCounts(size), sdispls(size), recvCounts(size), rdispls(size) {
    for (int i = 0; i < size; ++i) {
      sendCounts[i] = count(rank, i);
      sdispls[i] = static_cast<int64_t>(in.size());
      for (int64_t k = 0; k < sendCounts[i]; ++k) in.push_back(Value(rank, i, k));
    }
    int64_t total = 0;
    for (int n = 0; n < size; ++n) {
      const int j = reversed ? size - 1 - n : n;
      recvCounts[j] = count(j, rank);
      rdispls[j] = total;
      total += recvCounts[j];
    }
    golden.assign(total, -1);
    for (int j = 0; j < size; ++j) {
      for (int64_t k = 0; k < recvCounts[j]; ++k) golden[rdispls[j] + k] = Value(j, rank, k);
    }
  }
  static int64_t Value(int from, int to, int64_t k) { return 1000000 * from + 1000 * to + k; }
  CallSignature Signature() const {
    CallSignature s;
    s.opName = "AllToAllV";
    s.dtype = ACL_INT64;
    s.sendCounts = sendCounts;
    s.recvCounts = recvCounts;
    return s;
  }
  std::vector<int64_t> Run(Communicator& comm) const {
    std::vector<int64_t> out(golden.size(), -1);
    comm.AllToAllV(in.data(), sendCounts.data(), sdispls.data(), out.data(), recvCounts.data(),
                   rdispls.data(), ACL_INT64);
    return out;
  }
};

/// Traffic in one direction only: host 0's ranks send nothing (so they skip gathering to their
/// leader) but receive from everyone; blocks land at rdispls in reverse rank order. Repeated on
/// one communicator at growing then shrinking sizes: its scratch buffers outlive a call. Scale
/// 12000 makes messages between two hosts of ~1 MB, which go directly between ranks instead of
/// through the leaders (kAggregateBelowBytes = 60 KiB); the other scales stay below it.
TEST(HierarchicalGoldenDirect, AllToAllVOneWayTraffic) {
  const HostLayout layout = Layout({0, 1, 0, 1, 2});
  const int size = 5;
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    auto comm = ThreadHierarchy(rank, layout, domain);
    for (int64_t scale : {1, 500, 12000, 3}) {
      const ExchangeCase call(
          rank, size,
          [&](int j, int i) -> int64_t {
            return layout.hostOfRank[j] == 0 ? 0 : scale * ((j + 2 * i) % 4 + (i == 0 ? 1 : 0));
          },
          /*reversed=*/true);
      EXPECT_EQ(call.Run(*comm), call.golden) << "rank " << rank << " scale " << scale;
    }
  });
}

/// The flat engine, counting the AllGatherBytes and Progress calls that reach it.
class CountingEngine final : public Communicator {
 public:
  explicit CountingEngine(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  std::string BackendName() const override { return "counting(" + inner_->BackendName() + ")"; }
  int Rank() const override { return inner_->Rank(); }
  int Size() const override { return inner_->Size(); }
  void AllGatherBytes(const void* in, void* out, size_t bytes) override {
    ++gathers;
    inner_->AllGatherBytes(in, out, bytes);
  }
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override {
    inner_->AllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype);
  }
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override {
    reductions.emplace_back(count, dtype);
    inner_->AllReduce(in, out, count, dtype, op);
  }
  void Exchange(const std::vector<PointToPoint>& ops) override {
    ++exchanges;
    inner_->Exchange(ops);
  }
  void Progress() override { ++progressCalls; }
  int gathers = 0;
  int exchanges = 0;
  int progressCalls = 0;
  std::vector<std::pair<size_t, DataType>> reductions;  ///< (count, dtype) of each AllReduce

 private:
  std::shared_ptr<Communicator> inner_;
};

/// With the same number of ranks on every host, each rail reduces one block of an AllReduce across
/// the hosts (blocks as even as can be, local index k owning block k; an empty block crosses no
/// host), float16 sums as float32, and blocks of 8 MiB or more between two hosts as two swaps of
/// halves instead of the engine's AllReduce; with uneven hosts the leaders' rail carries it all.
TEST(HierarchicalGoldenDirect, AllReduceCarriesOneBlockPerRailWhenHostsAreEven) {
  using Calls = std::vector<std::pair<size_t, DataType>>;
  struct Case {
    std::vector<int> hostOfRank;
    size_t count;
    DataType dtype;
    std::vector<Calls> railReductions;  ///< per rank
    int railExchanges;                  ///< on every rank
  };
  const size_t large = (4u << 20) + 3;  // 2 x 2 ranks: blocks of 8 MiB + 8 bytes, 8 MiB + 4
  const std::vector<Case> cases = {
      {{0, 1, 0, 1, 0, 1},
       10,
       ACL_FLOAT,
       {Calls{{4, ACL_FLOAT}}, Calls{{4, ACL_FLOAT}}, Calls{{3, ACL_FLOAT}}, Calls{{3, ACL_FLOAT}},
        Calls{{3, ACL_FLOAT}}, Calls{{3, ACL_FLOAT}}},
       0},
      {{0, 0, 1, 1},
       1,
       ACL_INT32,
       {Calls{{1, ACL_INT32}}, Calls{}, Calls{{1, ACL_INT32}}, Calls{}},
       0},
      {{0, 0, 1, 1},
       7,
       ACL_FLOAT16,
       {Calls{{4, ACL_FLOAT}}, Calls{{3, ACL_FLOAT}}, Calls{{4, ACL_FLOAT}}, Calls{{3, ACL_FLOAT}}},
       0},
      {{0, 0, 1}, 5, ACL_FLOAT, {Calls{{5, ACL_FLOAT}}, Calls{}, Calls{{5, ACL_FLOAT}}}, 0},
      {{0, 0, 1, 1}, large, ACL_FLOAT, {Calls{}, Calls{}, Calls{}, Calls{}}, 2},
  };
  for (const Case& c : cases) {
    const HostLayout layout = Layout(c.hostOfRank);
    const int size = static_cast<int>(c.hostOfRank.size());
    const std::string domain = UniqueDomain();
    std::vector<Calls> seen(size);
    std::vector<int> exchanges(size);
    std::vector<std::vector<double>> results(size);
    RunThreadRanks(size, [&](int rank) {
      std::shared_ptr<CountingEngine> rail;
      auto comm = ThreadHierarchy(rank, layout, domain, nullptr, [&](auto inner) {
        rail = std::make_shared<CountingEngine>(std::move(inner));
        return rail;
      });
      std::vector<double> values(c.count);
      for (size_t i = 0; i < c.count; ++i) values[i] = rank * 10 + static_cast<double>(i);
      const auto n = static_cast<int64_t>(c.count);
      HostTensor in = HostTensor::FromValues(c.dtype, {n}, values), out(c.dtype, {n});
      comm->AllReduce(in.data(), out.data(), c.count, c.dtype, ReduceOp::kSum);
      results[rank] = out.ToDoubles();
      seen[rank] = rail->reductions;
      exchanges[rank] = rail->exchanges;
    });
    for (int rank = 0; rank < size; ++rank) {
      EXPECT_EQ(seen[rank], c.railReductions[rank]) << "rank " << rank << " of " << size;
      EXPECT_EQ(exchanges[rank], c.railExchanges) << "rank " << rank << " of " << size;
      int wrong = 0;
      for (size_t i = 0; i < c.count; ++i) {
        // Every value and partial sum is an integer below 2^24, exact in every dtype here.
        const double golden = 10.0 * size * (size - 1) / 2 + static_cast<double>(size * i);
        if (results[rank][i] != golden && ++wrong <= 3) {
          ADD_FAILURE() << "rank " << rank << " element " << i << ": " << results[rank][i]
                        << ", expected " << golden;
        }
      }
      EXPECT_EQ(wrong, 0) << "rank " << rank << " of " << size << ", count " << c.count;
    }
  }
}

/// After Agree() the records hold every rank's counts: AllToAllV takes the matrix from them (no
/// gather across the hosts), on both of its paths (aggregated at the leaders, and direct); a raw
/// AllToAllV, and one after another primitive's Agree, gather it themselves.
TEST(HierarchicalGoldenDirect, AllToAllVAfterAgreeReusesItsCounts) {
  const HostLayout layout = Layout({0, 1, 0, 1, 1});
  const int size = 5;
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<CountingEngine> engine;
    auto comm = ThreadHierarchy(rank, layout, domain, [&](std::shared_ptr<Communicator> flat) {
      engine = std::make_shared<CountingEngine>(std::move(flat));
      return engine;
    });
    // Scale 1: small blocks (aggregated); 20000 int64: 160 KB blocks (direct).
    for (int64_t scale : {1, 20000}) {
      const ExchangeCase call(rank, size, [&](int j, int i) { return scale * ((j + 2 * i) % 3); });
      int before = engine->gathers;
      comm->Agree(call.Signature());
      EXPECT_EQ(call.Run(*comm), call.golden) << "rank " << rank << " scale " << scale;
      EXPECT_EQ(engine->gathers, before) << "rank " << rank << ": the counts were gathered again";

      before = engine->gathers;
      EXPECT_EQ(call.Run(*comm), call.golden) << "raw, rank " << rank << " scale " << scale;
      EXPECT_EQ(engine->gathers, before + 1) << "rank " << rank << ": a raw call gathers them";

      CallSignature other;
      other.opName = "AllGatherV";
      other.dtype = ACL_INT64;
      other.sendCounts.assign(size, 1);
      other.recvCounts.assign(size, 1);
      comm->Agree(other);
      const int64_t mine = rank;
      std::vector<int64_t> all(size, -1), ones(size, 1), displs(size);
      for (int r = 0; r < size; ++r) displs[r] = r;
      comm->AllGatherV(&mine, 1, all.data(), ones.data(), displs.data(), ACL_INT64);
      before = engine->gathers;
      EXPECT_EQ(call.Run(*comm), call.golden) << "after AllGatherV, rank " << rank;
      EXPECT_EQ(engine->gathers, before + 1) << "rank " << rank << ": stale records were used";
    }
  });
}

/// A rank waiting inside its host keeps its engine moving (the intra waits' idle hook drives the
/// flat engine's Progress), so a cross-host message it queued just before cannot starve the peer
/// it waits for (docs/backends.md, "Send/Recv across hosts"). Rank 1 comes 200 ms late to the
/// intra step of a Barrier that its leader, rank 0, waits in; rank 2 waits for rank 0 in the
/// leaders' step, which is the engine's own wait (this engine counts, it does not wait).
TEST(HierarchicalGoldenDirect, WaitsInsideAHostDriveTheEngine) {
  const HostLayout layout = Layout({0, 0, 1, 1});
  const int size = 4;
  const std::string domain = UniqueDomain();
  std::vector<int> progressCalls(size, -1);
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<CountingEngine> engine;
    auto comm = ThreadHierarchy(rank, layout, domain, [&](std::shared_ptr<Communicator> flat) {
      engine = std::make_shared<CountingEngine>(std::move(flat));
      return engine;
    });
    comm->Barrier();
    if (rank == 1) usleep(200'000);
    comm->Barrier();
    progressCalls[rank] = engine->progressCalls;
  });
  EXPECT_GE(progressCalls[0], 2) << "the leader slept ~10 slices waiting for rank 1";
}

/// Runs `call(comm, rank)` on every rank of a thread hierarchy over `layout`; returns each rank's
/// error message ("" when it did not throw), every thrown status checked to be `expected`.
std::vector<std::string> ErrorsOfEveryRank(
    const HostLayout& layout, Status expected,
    const std::function<void(Communicator& comm, int rank)>& call) {
  const int size = static_cast<int>(layout.hostOfRank.size());
  const std::string domain = UniqueDomain();
  std::vector<std::string> errors(size);
  RunThreadRanks(size, [&](int rank) {
    auto comm = ThreadHierarchy(rank, layout, domain);
    try {
      call(*comm, rank);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), expected) << e.what();
      errors[rank] = e.what();
    }
  });
  return errors;
}

/// Agree() on one exchange then AllToAllV with other counts is a caller's bug: it fails on the
/// spot (every rank here, since every rank makes it) rather than moving data by a wrong matrix.
TEST(HierarchicalErrors, AllToAllVWithOtherCountsThanItsAgreeIsAnInternalError) {
  const int size = 4;
  const std::vector<std::string> errors = ErrorsOfEveryRank(
      Layout({0, 0, 1, 1}), ERROR_INTERNAL_ERROR, [](Communicator& comm, int rank) {
        const ExchangeCase agreed(rank, size, [](int j, int i) { return 1 + (j + i) % 2; });
        const ExchangeCase called(rank, size, [](int j, int i) { return 2 + (j + i) % 2; });
        comm.Agree(agreed.Signature());
        called.Run(comm);
      });
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_THAT(errors[rank], HasSubstr("differ from those of the Agree() before it"))
        << "rank " << rank;
  }
}

// The host's lccl numbers its ranks 0..k-1; the error must also say which job ranks those are,
// or "rank 0 sends 5 elements" points the user at a rank on the other host.
TEST(HierarchicalErrors, ErrorsInsideAHostNameTheJobRanks) {
  const std::vector<std::string> errors = ErrorsOfEveryRank(
      Layout({0, 0, 1, 1}), ERROR_RANK_MISMATCH, [](Communicator& comm, int rank) {
        std::vector<float> buf(6);
        if (rank == 2) comm.Send(buf.data(), 5, ACL_FLOAT, 3);
        if (rank == 3) comm.Recv(buf.data(), 6, ACL_FLOAT, 2);
      });
  for (int rank : {2, 3}) {
    EXPECT_THAT(errors[rank], AllOf(HasSubstr("sends 5 elements"),
                                    HasSubstr("[rank numbers above are within host 1's lccl "
                                              "communicator; in the job: 0 = 2, 1 = 3]")))
        << "rank " << rank;
  }
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(HierarchicalErrors, CommunicatorsMustMatchTheLayout) {
  const std::string domain = UniqueDomain();
  auto one = [&](const std::string& name) {
    return CreateCommunicator(ThreadRankParam(0, 1, domain + name));
  };
  auto expectInvalid = [](const std::function<void()>& make, const std::string& text) {
    try {
      make();
      ADD_FAILURE() << "accepted; expected: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  expectInvalid([&] { MakeHierarchicalCommunicator(one("a"), one("b"), one("c"), Layout({0, 0})); },
                "the host layout has 2 ranks but the flat communicator has 1");
  expectInvalid([&] { MakeHierarchicalCommunicator(one("d"), one("e"), nullptr, Layout({0})); },
                "the rail communicator is null");
  expectInvalid([&] { MakeHierarchicalCommunicator(one("f"), nullptr, one("g"), Layout({0})); },
                "the intra communicator is null");
  EXPECT_EQ(MakeHierarchicalCommunicator(one("h"), one("i"), one("j"), Layout({0}))->Size(), 1);

  // Two hosts of one rank each: every rank's rail (the leaders) spans both hosts.
  std::vector<std::string> errors(2);
  RunThreadRanks(2, [&](int rank) {
    auto flat = CreateCommunicator(ThreadRankParam(rank, 2, domain + "/flat"));
    try {
      MakeHierarchicalCommunicator(flat, one(Concat("/host", rank)), one(Concat("/rail", rank)),
                                   Layout({0, 1}));
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
      errors[rank] = e.what();
    }
  });
  EXPECT_THAT(errors[1], HasSubstr("its rail is rank 0 of 1 but local index 0 exists on 2 hosts, "
                                   "this one (host 1) at position 1"));
}

/// A heap that hands out new[] memory and keeps count, standing in for lccl's AllocateShared.
class CountingHeap final : public Communicator {
 public:
  std::string BackendName() const override { return "counting-heap"; }
  int Rank() const override { return 0; }
  int Size() const override { return 1; }
  void AllGatherBytes(const void*, void*, size_t) override {}
  void* AllocateShared(size_t bytes) override {
    if (bytes > room) return nullptr;
    ++allocated;
    return new uint8_t[bytes];
  }
  bool FreeShared(void* p) override {
    ++freed;
    delete[] static_cast<uint8_t*>(p);
    return true;
  }
  size_t room = 1 << 20;
  int allocated = 0;
  int freed = 0;
};

/// The hierarchical communicator's scratch comes from its host's heap while that has room (so the
/// host's collectives read it in place), from new[] when not, and every heap buffer goes back.
TEST(HierarchicalScratch, DrawsFromTheHostHeapWhileItHasRoom) {
  CountingHeap heap;
  {
    hier::ScratchPool pool(&heap);
    uint8_t* small = pool.Get(0, 100);
    EXPECT_EQ(heap.allocated, 1);
    EXPECT_EQ(pool.Get(0, 50), small) << "a smaller request reuses the buffer";
    pool.Get(0, 1000);  // grows: the old heap buffer goes back first
    EXPECT_EQ(heap.allocated, 2);
    EXPECT_EQ(heap.freed, 1);
    pool.Get(1, 2 << 20);  // more than the heap's room: new[]
    EXPECT_EQ(heap.allocated, 2);
    std::memset(pool.Get(1, 2 << 20), 1, 2 << 20);
  }
  EXPECT_EQ(heap.freed, 2) << "the pool returns its heap buffers when it ends";
}

// ---- backend "hccl" (auto) over forked processes ----

std::string Table(const std::string& name) {
  return std::string(COLLOPS_SOURCE_DIR) + "/tests/cases/rank_tables/" + name;
}

ProcessRanksOptions AcrossPretendHosts() {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BYTES"] = std::to_string(kSuiteShmBytes);
  options.env["COLLOPS_TIMEOUT"] = "30";
  options.env["COLLOPS_ENGINE"] = "lccl";
  options.deadlineSeconds = 90;
  return options;
}

CommParam HcclParam(int rank, int size, const std::string& table, const std::string& domain) {
  CommParam param;
  param.rank = rank;
  param.rankSize = size;
  param.backend = "hccl";
  param.commMode = COMM_MULTI_PROCESS;
  param.commDomain = domain;
  param.rankTableFile = table;
  return param;
}

/// Gets this rank's communicator for `param` from the default pool (as every op does), checks its
/// backend, then runs the suite through the pool (ops name backend "hccl" and the domain only).
void ExpectBackendAndRunSuite(const CommParam& param, const std::string& backend,
                              const std::vector<DataType>& dtypes) {
  std::shared_ptr<Communicator> comm = DefaultContext().Communicators().Get(param);
  EXPECT_EQ(comm->BackendName(), backend) << "rank " << param.rank;
  SuiteJob job;
  job.rank = param.rank;
  job.rankSize = param.rankSize;
  job.backend = "hccl";
  job.commDomain = param.commDomain;
  job.markerTag = std::getenv("COLLOPS_JOB_ID");
  for (DataType dtype : dtypes) RunEveryOp(job, dtype);
}

TEST(HcclAuto, RankTableOnTwoServersRunsHierarchicalEveryOp) {
  RunProcessRanks(
      4,
      [](int rank) {
        ExpectBackendAndRunSuite(HcclParam(rank, 4, Table("two_servers.json"), "hier-table"),
                                 "hccl(lccl+lccl)", {ACL_FLOAT16});
      },
      AcrossPretendHosts());
}

TEST(HcclAuto, RandomScheduleAcrossPretendHosts) {
  RunProcessRanks(
      4,
      [](int rank) {
        std::shared_ptr<Communicator> comm = DefaultContext().Communicators().Get(
            HcclParam(rank, 4, Table("two_servers.json"), "hier-schedule"));
        EXPECT_EQ(comm->BackendName(), "hccl(lccl+lccl)") << "rank " << rank;
        RunRandomSchedule(*comm, 400, 40);
      },
      AcrossPretendHosts());
}

TEST(HcclAuto, HostIdentitiesFindUnevenNonContiguousHosts) {
  const std::vector<int> hostOfRank = {0, 1, 1, 0, 2};
  RunProcessRanks(
      5,
      [&](int rank) {
        setenv("COLLOPS_HOST_ID", Concat("pretend-", hostOfRank[rank]).c_str(), 1);
        ExpectBackendAndRunSuite(HcclParam(rank, 5, "", "hier-ids"), "hccl(lccl+lccl)",
                                 {ACL_FLOAT});
      },
      AcrossPretendHosts());
}

TEST(HcclAuto, OneHostIsPlainLccl) {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "30";
  RunProcessRanks(
      2,
      [](int rank) {
        unsetenv("COLLOPS_ENGINE");
        auto comm = DefaultContext().Communicators().Get(HcclParam(rank, 2, "", "one-host"));
        EXPECT_EQ(comm->BackendName(), "lccl");
        // A table of one server needs no engine, even when one is named.
        setenv("COLLOPS_ENGINE", "lccl", 1);
        comm = DefaultContext().Communicators().Get(
            HcclParam(rank, 2, Table("one_server.json"), "one-server"));
        EXPECT_EQ(comm->BackendName(), "lccl");
        comm->Barrier();
      },
      options);
}

TEST(HcclAuto, TableServerSpanningHostsIsInvalidOnEveryRank) {
  RunProcessRanks(
      4,
      [](int rank) {
        setenv("COLLOPS_HOST_ID", Concat("alone-", rank).c_str(), 1);
        try {
          DefaultContext().Communicators().Get(
              HcclParam(rank, 4, Table("two_servers.json"), "spanning"));
          ADD_FAILURE() << "rank " << rank << ": a server spanning hosts was accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
          EXPECT_THAT(e.what(), AllOf(HasSubstr("two_servers.json"),
                                      HasSubstr("ranks 0 and 2 are both on server \"10.231.0.1\""),
                                      HasSubstr("run on different hosts")));
        }
      },
      AcrossPretendHosts());
}

/// Runs `body` with environment variable `name` set to `value` (unset when null), then restores
/// it.
void WithEnv(const char* name, const char* value, const std::function<void()>& body) {
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  auto set = [name](const char* v) { v ? setenv(name, v, 1) : unsetenv(name); };
  set(value);
  body();
  set(old ? saved.c_str() : nullptr);
}

void WithEngineEnv(const char* engine, const std::function<void()>& body) {
  WithEnv("COLLOPS_ENGINE", engine, body);
}

TEST(HcclAuto, MultiHostTableWithoutEngineSaysWhatToDo) {
  WithEngineEnv(nullptr, [] {
    Context context;
    try {
      context.Communicators().Get(HcclParam(0, 4, Table("two_servers.json"), "no-engine"));
      ADD_FAILURE() << "a multi-host table without an engine was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_BACKEND_UNAVAILABLE);
      EXPECT_THAT(e.what(), AllOf(HasSubstr("on 2 hosts"), HasSubstr("mpirun"),
                                  HasSubstr("torch.distributed"), HasSubstr("COLLOPS_ENGINE")));
    }
  });
}

TEST(HcclAuto, UnknownEngineIsInvalid) {
  WithEngineEnv("gloo", [] {
    Context context;
    try {
      context.Communicators().Get(HcclParam(0, 2, "", "bad-engine"));
      ADD_FAILURE() << "COLLOPS_ENGINE=gloo was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), ERROR_INVALID_PARAM);
      EXPECT_THAT(e.what(), HasSubstr("COLLOPS_ENGINE=\"gloo\" is not one of mpi, c10d, lccl"));
    }
  });
}

// No engine fits (no mpirun, no torch group) and no table: hccl takes the domain to be on this
// host. When torchrun says the job spans hosts, the rendezvous timing out most likely means the
// domain does not: the error says so instead of only "did not arrive".
TEST(HcclAuto, NoEngineInAJobSpanningHostsHintsWhyTheRendezvousTimedOut) {
  WithEngineEnv(nullptr, [] {
    WithEnv("WORLD_SIZE", "4", [] {
      WithEnv("LOCAL_WORLD_SIZE", "2", [] {
        Context context;
        CommParam param = HcclParam(0, 2, "", UniqueDomain());
        param.timeoutSeconds = 0.5;
        try {
          context.Communicators().Get(param);
          ADD_FAILURE() << "a rendezvous without its peer succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), ERROR_TIMEOUT);
          EXPECT_THAT(e.what(), AllOf(HasSubstr("did not arrive"),
                                      HasSubstr("the launcher says the job spans hosts "
                                                "(WORLD_SIZE=4, LOCAL_WORLD_SIZE=2)"),
                                      HasSubstr("mpirun")));
        }
      });
    });
  });
}

/// A bad table reaches the op's caller as ERROR_INVALID_PARAM before any rank communicates.
TEST(HcclAuto, BadTableFailsTheOperation) {
  Context context;
  OperationPtr op =
      MakeOperation("AllReduceOperation", {{"rank", 0},
                                           {"rankSize", 4},
                                           {"commDomain", "bad-table"},
                                           {"rankTableFile", Table("duplicate_rank_id.json")}});
  std::vector<HostTensor> ins = {HostTensor::FromValues(ACL_FLOAT, {2}, {1, 2})};
  std::vector<HostTensor> outs = {HostTensor(ACL_FLOAT, {2})};
  EXPECT_EQ(RunOperation(*op, Tensors(ins), Tensors(outs), &context), ERROR_INVALID_PARAM);
  EXPECT_THAT(LastErrorMessage(),
              AllOf(HasSubstr("duplicate_rank_id.json"), HasSubstr("rank_id 1 appears twice")));
}

}  // namespace
}  // namespace testing
}  // namespace collops
