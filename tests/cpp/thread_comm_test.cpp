// Tests of the multi-thread lccl communicator's data movement: every primitive on R thread ranks
// against golden values computed here with plain loops (0-count chunks, odd lengths, gaps between
// segments, in place). Failure modes (timeouts, mismatches, rendezvous) are in
// thread_comm_fault_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "idle_hook_check.h"
#include "random_schedule.h"
#include "thread_comm_test_util.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {
namespace {

class ThreadCommGolden : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(ThreadComm, ThreadCommGolden, ::testing::Values(1, 2, 3, 4, 7),
                         [](const auto& info) { return Concat("R", info.param); });

TEST_P(ThreadCommGolden, IdentifiesItself) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    EXPECT_EQ(comm->BackendName(), "lccl");
    EXPECT_EQ(comm->Rank(), rank);
    EXPECT_EQ(comm->Size(), size);
    EXPECT_FALSE(comm->Broken());
  });
}

/// Calls of every kind one after another (random_schedule.h).
TEST_P(ThreadCommGolden, RandomScheduleMatchesItsGolden) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    RunRandomSchedule(*comm, 200 + size, 40);
  });
}

TEST_P(ThreadCommGolden, AllGatherBytes) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{13}, size_t{4096 + 3}}) {
      std::vector<uint8_t> in(bytes);
      for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(rank * 31 + i * 7);
      std::vector<uint8_t> out(bytes * size, 0xEE);
      comm->AllGatherBytes(in.data(), out.data(), bytes);
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(out[r * bytes + i], static_cast<uint8_t>(r * 31 + i * 7))
              << "bytes " << bytes << " from rank " << r << " at " << i;
        }
      }
    }
  });
}

// Inputs chosen so that every golden below is exact in int32 (no overflow) and float32.
int32_t IntInput(ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd) return static_cast<int32_t>((rank + i) % 5) - 2;
  return static_cast<int32_t>((rank * 7919 + i * 104729) % 2001) - 1000;
}

TEST_P(ThreadCommGolden, AllReduceInt32EveryOpOutOfPlaceAndInPlace) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  // 10007 int32 elements exceed the whole-array path, so both algorithms run.
  const std::vector<size_t> counts = {0, 1, 7, static_cast<size_t>(size) + 1, 1000, 10007};
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax,
                                     ReduceOp::kMin};
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    for (ReduceOp op : ops) {
      for (size_t count : counts) {
        std::vector<int32_t> golden(count);
        for (size_t i = 0; i < count; ++i) {
          golden[i] = IntInput(op, 0, i);
          for (int r = 1; r < size; ++r) golden[i] = Fold(op, golden[i], IntInput(op, r, i));
        }
        for (bool inPlace : {false, true}) {
          std::vector<int32_t> in(count);
          for (size_t i = 0; i < count; ++i) in[i] = IntInput(op, rank, i);
          std::vector<int32_t> outBuffer(count, -7);
          int32_t* out = inPlace ? in.data() : outBuffer.data();
          comm->AllReduce(in.data(), out, count, ACL_INT32, op);
          const std::vector<int32_t> got(out, out + count);
          ASSERT_EQ(got, golden) << ReduceOpName(op) << " count " << count
                                 << (inPlace ? " in place" : " out of place");
          if (!inPlace) {
            for (size_t i = 0; i < count; ++i) ASSERT_EQ(in[i], IntInput(op, rank, i));
          }
        }
      }
    }
  });
}

// Mixed: some ranks in place, some not; all ranks must still take the same path.
TEST_P(ThreadCommGolden, AllReduceMixedInPlaceRanks) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    for (size_t count : {size_t{5}, size_t{20000}}) {
      std::vector<int32_t> in(count), other(count, 0);
      for (size_t i = 0; i < count; ++i) in[i] = IntInput(ReduceOp::kSum, rank, i);
      int32_t* out = rank % 2 == 0 ? in.data() : other.data();
      comm->AllReduce(in.data(), out, count, ACL_INT32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        int32_t want = 0;
        for (int r = 0; r < size; ++r) want += IntInput(ReduceOp::kSum, r, i);
        ASSERT_EQ(out[i], want) << "count " << count << " element " << i;
      }
    }
  });
}

// Arbitrary floats: every rank must hold the very same bits, close to a double-precision golden.
TEST_P(ThreadCommGolden, AllReduceFloat32IsBitIdenticalOnEveryRank) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  const size_t count = 30011;
  auto input = [](int rank, size_t i) {
    return static_cast<float>(std::sin(0.37 * i + rank) * (1 + rank) * 1.3e3);
  };
  std::vector<std::vector<float>> results(size);
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    for (size_t n : {size_t{3}, count}) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = input(rank, i);
      comm->AllReduce(data.data(), data.data(), n, ACL_FLOAT, ReduceOp::kSum);
      for (size_t i = 0; i < n; ++i) {
        double golden = 0;
        for (int r = 0; r < size; ++r) golden += input(r, i);
        ASSERT_LE(std::abs(data[i] - golden),
                  std::ldexp(1.0, -11) * std::max(1.0, std::abs(golden)))
            << "element " << i;
      }
      results[rank] = data;
    }
  });
  for (int r = 1; r < size; ++r) {
    ASSERT_EQ(std::memcmp(results[r].data(), results[0].data(), count * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
  }
}

TEST_P(ThreadCommGolden, AllReduceFloat16RawBits) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    const size_t count = 1001;
    std::vector<uint16_t> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = HalfFromSmallInt(static_cast<int>(i % 9) + rank);
    comm->AllReduce(in.data(), out.data(), count, ACL_FLOAT16, ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) {
      int sum = 0;
      for (int r = 0; r < size; ++r) sum += static_cast<int>(i % 9) + r;
      ASSERT_EQ(out[i], HalfFromSmallInt(sum)) << "element " << i;
    }
  });
}

TEST_P(ThreadCommGolden, AllGatherVWithGapsZeroCountsAndInPlace) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  for (int64_t scale : {1, 331}) {
    std::vector<int64_t> recvCounts(size), rdispls;
    for (int i = 0; i < size; ++i) recvCounts[i] = scale * ((i * 3 + 1) % 4);
    const int64_t total = Layout(recvCounts, /*reversed=*/true, /*gap=*/2, &rdispls);
    auto value = [](int r, int64_t e) { return static_cast<int32_t>(r * 100000 + e); };
    RunThreadRanks(size, [&](int rank) {
      std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
      for (bool inPlace : {false, true}) {
        std::vector<int32_t> out(total, -1), in(recvCounts[rank]);
        for (int64_t e = 0; e < recvCounts[rank]; ++e) in[e] = value(rank, e);
        const int32_t* src = in.data();
        if (inPlace) {
          std::copy(in.begin(), in.end(), out.begin() + rdispls[rank]);
          src = out.data() + rdispls[rank];
        }
        comm->AllGatherV(src, recvCounts[rank], out.data(), recvCounts.data(), rdispls.data(),
                         ACL_INT32);
        std::vector<int32_t> golden(total, -1);
        for (int r = 0; r < size; ++r) {
          for (int64_t e = 0; e < recvCounts[r]; ++e) golden[rdispls[r] + e] = value(r, e);
        }
        ASSERT_EQ(out, golden) << "scale " << scale << (inPlace ? " in place" : "");
      }
    });
  }
}

TEST_P(ThreadCommGolden, ReduceScatterVSumAndMax) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  for (int64_t scale : {1, 997}) {
    // Rank i receives recvCount[i]; every sender j lays the segments out in its own order.
    std::vector<int64_t> recvCount(size);
    for (int i = 0; i < size; ++i) recvCount[i] = scale * ((i * 5 + 2) % 4);
    std::vector<std::vector<int64_t>> sdispls(size);
    std::vector<int64_t> inSize(size);
    for (int j = 0; j < size; ++j) inSize[j] = Layout(recvCount, j % 2 == 1, 3, &sdispls[j]);
    auto value = [](int j, int64_t e) { return static_cast<int32_t>((j * 37 + e * 11) % 1009); };
    RunThreadRanks(size, [&](int rank) {
      std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
      std::vector<int32_t> in(inSize[rank]);
      for (int64_t e = 0; e < inSize[rank]; ++e) in[e] = value(rank, e);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        std::vector<int32_t> golden(recvCount[rank]);
        for (int64_t e = 0; e < recvCount[rank]; ++e) {
          golden[e] = value(0, sdispls[0][rank] + e);
          for (int j = 1; j < size; ++j)
            golden[e] = Fold(op, golden[e], value(j, sdispls[j][rank] + e));
        }
        std::vector<int32_t> out(recvCount[rank], -5);
        comm->ReduceScatterV(in.data(), recvCount.data(), sdispls[rank].data(), out.data(),
                             recvCount[rank], ACL_INT32, op);
        ASSERT_EQ(out, golden) << ReduceOpName(op) << " scale " << scale;
        // In place: the output is this rank's own segment of its input.
        std::vector<int32_t> copy = in;
        comm->ReduceScatterV(copy.data(), recvCount.data(), sdispls[rank].data(),
                             copy.data() + sdispls[rank][rank], recvCount[rank], ACL_INT32, op);
        ASSERT_TRUE(std::equal(golden.begin(), golden.end(), copy.begin() + sdispls[rank][rank]))
            << ReduceOpName(op) << " in place, scale " << scale;
      }
    });
  }
}

template <class T>
void AllToAllVCase(int size, const std::string& domain, DataType dtype, int64_t scale) {
  // Rank j sends count(j, i) elements to rank i.
  auto count = [&](int j, int i) { return scale * ((j + 2 * i + 1) % 4); };
  auto value = [](int j, int64_t e) { return static_cast<T>((j * 41 + e * 3) % 127); };
  std::vector<std::vector<int64_t>> sendCounts(size), sdispls(size), recvCounts(size),
      rdispls(size);
  std::vector<int64_t> inSize(size), outSize(size);
  for (int r = 0; r < size; ++r) {
    for (int p = 0; p < size; ++p) {
      sendCounts[r].push_back(count(r, p));
      recvCounts[r].push_back(count(p, r));
    }
    inSize[r] = Layout(sendCounts[r], r % 2 == 1, 1, &sdispls[r]);
    outSize[r] = Layout(recvCounts[r], false, 2, &rdispls[r]);
  }
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    std::vector<T> in(inSize[rank]);
    for (int64_t e = 0; e < inSize[rank]; ++e) in[e] = value(rank, e);
    std::vector<T> out(outSize[rank], static_cast<T>(-1));
    comm->AllToAllV(in.data(), sendCounts[rank].data(), sdispls[rank].data(), out.data(),
                    recvCounts[rank].data(), rdispls[rank].data(), dtype);
    std::vector<T> golden(outSize[rank], static_cast<T>(-1));
    for (int j = 0; j < size; ++j) {
      for (int64_t e = 0; e < recvCounts[rank][j]; ++e) {
        golden[rdispls[rank][j] + e] = value(j, sdispls[j][rank] + e);
      }
    }
    ASSERT_EQ(out, golden) << DataTypeName(dtype) << " scale " << scale;
  });
}

TEST_P(ThreadCommGolden, AllToAllVEveryElementSize) {
  const std::string domain = UniqueDomain();
  for (int64_t scale : {1, 257}) {
    AllToAllVCase<int8_t>(GetParam(), domain, ACL_INT8, scale);
    AllToAllVCase<int16_t>(GetParam(), domain, ACL_INT16, scale);
    AllToAllVCase<int32_t>(GetParam(), domain, ACL_INT32, scale);
    AllToAllVCase<int64_t>(GetParam(), domain, ACL_INT64, scale);
  }
}

TEST_P(ThreadCommGolden, BroadcastFromEveryRoot) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    for (int root = 0; root < size; ++root) {
      for (size_t count : {size_t{0}, size_t{37}, size_t{50001}}) {
        std::vector<float> buf(count);
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(rank * 1000 + i) + 0.5f;
        comm->Broadcast(buf.data(), count, ACL_FLOAT, root);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(buf[i], static_cast<float>(root * 1000 + i) + 0.5f)
              << "root " << root << " count " << count << " element " << i;
        }
      }
    }
  });
}

TEST_P(ThreadCommGolden, SendRecvRingAndManyToOneInOrder) {
  const int size = GetParam();
  if (size == 1) GTEST_SKIP() << "point to point needs a peer";
  const std::string domain = UniqueDomain();
  auto value = [](int src, int message, size_t i) {
    return static_cast<int32_t>(src * 1000000 + message * 1000 + i);
  };
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    // Ring: even ranks send first, odd ranks receive first, so blocking sends cannot deadlock.
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    std::vector<int32_t> mine(101), got(101, -1);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = value(rank, 0, i);
    if (rank % 2 == 0) comm->Send(mine.data(), mine.size(), ACL_INT32, next);
    comm->Recv(got.data(), got.size(), ACL_INT32, prev);
    if (rank % 2 == 1) comm->Send(mine.data(), mine.size(), ACL_INT32, next);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], value(prev, 0, i));

    // Many to one: messages of different lengths (0 included) arrive in the order sent.
    const std::vector<size_t> lengths = {3, 0, 1, 4099};
    if (rank == 0) {
      for (int src = 1; src < size; ++src) {
        for (size_t m = 0; m < lengths.size(); ++m) {
          std::vector<int32_t> buf(lengths[m], -1);
          comm->Recv(buf.data(), buf.size(), ACL_INT32, src);
          for (size_t i = 0; i < buf.size(); ++i) {
            ASSERT_EQ(buf[i], value(src, static_cast<int>(m), i)) << "from " << src << " #" << m;
          }
        }
      }
    } else {
      for (size_t m = 0; m < lengths.size(); ++m) {
        std::vector<int32_t> buf(lengths[m]);
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = value(rank, static_cast<int>(m), i);
        comm->Send(buf.data(), buf.size(), ACL_INT32, 0);
      }
    }
  });
}

TEST_P(ThreadCommGolden, BarrierSeparatesPhases) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  constexpr int kPhases = 200;
  std::vector<std::atomic<int>> arrived(kPhases);
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    for (int phase = 0; phase < kPhases; ++phase) {
      arrived[phase].fetch_add(1);
      comm->Barrier();
      ASSERT_EQ(arrived[phase].load(), size) << "phase " << phase;
    }
  });
}

// Late ranks in turn, so that waiters end in every phase of the wait (spin, yield, futex sleep:
// WaitBudget), a Send waits for its Recv in each too, and every result is still right.
TEST_P(ThreadCommGolden, StaggeredArrivalsEndEveryWaitPhase) {
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  const std::chrono::microseconds lateness[] = {
      std::chrono::microseconds(0), std::chrono::microseconds(20), std::chrono::microseconds(400),
      std::chrono::microseconds(3000)};
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    for (int i = 0; i < 8; ++i) {
      if (rank == i % size) std::this_thread::sleep_for(lateness[i % 4]);
      std::vector<int32_t> in(1000 + i, rank + 1), out(in.size(), 0);
      comm->AllReduce(in.data(), out.data(), in.size(), ACL_INT32, ReduceOp::kSum);
      ASSERT_EQ(std::count(out.begin(), out.end(), size * (size + 1) / 2),
                static_cast<int64_t>(out.size()))
          << "call " << i;
      if (size > 1 && rank < 2) {
        int32_t message = i * 10 + rank;
        if (rank == 0) comm->Send(&message, 1, ACL_INT32, 1);
        if (rank == 1) {
          std::this_thread::sleep_for(lateness[i % 4]);
          comm->Recv(&message, 1, ACL_INT32, 0);
          ASSERT_EQ(message, i * 10) << "call " << i;
        }
      }
      comm->Barrier();
    }
  });
}

TEST(ThreadCommWait, IdleHookRunsWhileAWaitSleeps) {
  const std::string domain = UniqueDomain();
  RunThreadRanks(2, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, 2, domain);
    ExpectIdleHookRunsWhileWaiting(*comm, rank);
  });
}

// Ranks > cores: 7 ranks on a machine of 2 cores must not collapse. A waiter that only spun would
// hold its core for a whole time slice (milliseconds) per sync while the rank it waits for is
// queued behind it; spinning briefly and then sleeping on a futex keeps a sync well under that.
TEST_P(ThreadCommGolden, ManySmallCollectivesStayFast) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr double kLimitSeconds = 60;
#else
  constexpr double kLimitSeconds = 20;
#endif
  constexpr int kIterations = 300;  // 4 syncs each: 3 for the in-place AllReduce, 1 Barrier
  const int size = GetParam();
  const std::string domain = UniqueDomain();
  const auto start = std::chrono::steady_clock::now();
  RunThreadRanks(size, [&](int rank) {
    std::shared_ptr<Communicator> comm = JoinRank(rank, size, domain);
    int32_t x[4] = {rank, 1, 2, 3};
    for (int i = 0; i < kIterations; ++i) {
      comm->AllReduce(x, x, 4, ACL_INT32, ReduceOp::kMax);
      comm->Barrier();
    }
    ASSERT_EQ(x[0], size - 1);
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, kLimitSeconds) << 4 * kIterations << " syncs on " << size << " ranks";
}

}  // namespace
}  // namespace testing
}  // namespace collops
