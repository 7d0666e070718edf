// How the hierarchical communicator moves data between pretend hosts: AllToAllV through the
// leaders or directly, AllReduce one block per rail, the count matrix an Agree leaves, and waits
// inside a host that keep the engine between hosts moving (a counting engine watches the calls).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collops/signature.h"
#include "collops/topology.h"
#include "hierarchical_test_util.h"
#include "op_harness.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

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

}  // namespace
}  // namespace testing
}  // namespace collops
