// Golden tests of the multi-process lccl communicator: every primitive over R in {1,2,3,4,7},
// int32/float32/float16, sizes 0, 1, odd and beyond the shared buffer (COLLOPS_SHM_BYTES=64K
// forces the pipelined paths). Values are small integers, so every reduction is exact in every
// dtype and the comparison is exact.
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/communicator.h"
#include "collops/reduce.h"
#include "op_harness.h"
#include "piece_layout.h"
#include "process_ranks.h"
#include "random_schedule.h"

namespace collops {
namespace {

using testing::FoldPair;
using testing::ProcessRanksOptions;
using testing::RunProcessRanks;
using testing::RunRandomSchedule;

uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if ((x & 0x7fffffff) > 0x7f800000) return sign | 0x7e00;
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, x;
  if (exp == 0 && mant == 0) {
    x = sign;
  } else if (exp == 0) {
    exp = 127 - 15 + 1;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    x = sign | (exp << 23) | ((mant & 0x3ff) << 13);
  } else if (exp == 31) {
    x = sign | 0x7f800000 | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// A typed buffer addressed in doubles.
struct Buffer {
  DataType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DataType type, size_t count) : dtype(type), bytes(count * DataTypeSize(type)) {}
  size_t Count() const { return bytes.size() / DataTypeSize(dtype); }
  void* Data() { return bytes.data(); }
  void Set(size_t i, double v) {
    if (dtype == ACL_INT32) {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(&bytes[i * 4], &x, 4);
    } else if (dtype == ACL_FLOAT) {
      const float x = static_cast<float>(v);
      std::memcpy(&bytes[i * 4], &x, 4);
    } else {
      const uint16_t x = FloatToHalf(static_cast<float>(v));
      std::memcpy(&bytes[i * 2], &x, 2);
    }
  }
  double Get(size_t i) const {
    if (dtype == ACL_INT32) {
      int32_t x;
      std::memcpy(&x, &bytes[i * 4], 4);
      return x;
    }
    if (dtype == ACL_FLOAT) {
      float x;
      std::memcpy(&x, &bytes[i * 4], 4);
      return x;
    }
    uint16_t x;
    std::memcpy(&x, &bytes[i * 2], 2);
    return HalfToFloat(x);
  }
};

/// Small integers, so sums of 7 and products of 7 are exact in float16.
double Value(int rank, size_t i, int seed, ReduceOp op = ReduceOp::kSum) {
  if (op == ReduceOp::kProd) {
    static const double kFactors[] = {1, -1, 2, -2, 1};
    return kFactors[(rank * 3 + i * 7 + seed) % 5];
  }
  return static_cast<double>((rank * 131 + i * 7 + seed) % 13) - 6;
}

const DataType kDtypes[] = {ACL_INT32, ACL_FLOAT, ACL_FLOAT16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin};
/// 33333 int32 = 130 KiB: twice the 64 KiB slot of these tests.
const size_t kSizes[] = {0, 1, 37, 1000, 33333};

using testing::MakeLcclComm;

/// Index of the first element where got != want, or -1.
int64_t FirstDifference(const Buffer& got, const std::vector<double>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got.Get(i) != want[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

#define EXPECT_BUFFER(got, want, what)                                                            \
  do {                                                                                            \
    const Buffer& got_ = (got);                                                                   \
    const int64_t at_ = FirstDifference(got_, want);                                              \
    EXPECT_EQ(at_, -1) << what << ": element " << at_ << " is " << (at_ >= 0 ? got_.Get(at_) : 0) \
                       << ", expected " << (at_ >= 0 ? want[at_] : 0);                            \
  } while (0)

ProcessRanksOptions SmallBuffer() {
  ProcessRanksOptions options;
  options.env["COLLOPS_SHM_BYTES"] = "65536";
  // Outputs from 64 KiB up take the non-temporal copy-out (StreamBytes), smaller ones CopyBytes.
  options.env["COLLOPS_SHM_STREAM_BYTES"] = "65536";
  options.deadlineSeconds = 90;
  return options;
}

/// Forces COLLOPS_ALGO_<knob> = `algo` for the communicators this process makes next, and makes
/// "cma" run whatever the machine's kernel copy costs (COLLOPS_SHM_CMA_BYTES set). Returns the
/// communicator, or null when "cma" was forced where the kernel refuses it: then every call
/// fails, naming the knob, which `probe` (a call) checks.
std::shared_ptr<Communicator> MakeForcedComm(int rank, int size, const char* knob,
                                             const std::string& algo,
                                             const std::function<void(Communicator&)>& probe) {
  setenv(knob, algo.c_str(), 1);
  if (algo == "cma") {
    setenv("COLLOPS_SHM_CMA_BYTES", "4096", 1);
  } else {
    unsetenv("COLLOPS_SHM_CMA_BYTES");
  }
  auto comm = testing::MakeProcessComm(rank, size, Concat(knob, "-", algo));
  if (algo != "cma" || comm->CrossMemory() || size == 1) return comm;  // one rank moves nothing
  try {
    probe(*comm);
    ADD_FAILURE() << knob << "=cma ran where process_vm_readv is refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_PARAM) << e.what();
    EXPECT_NE(std::string(e.what()).find(knob), std::string::npos) << e.what();
  }
  return nullptr;
}

/// Uneven counts[r] = ((r * a + b) % 4) * scale (some 0), each range `gap` elements after the one
/// before; returns where the last ends.
int64_t UnevenRanges(int size, size_t scale, int a, int b, int64_t gap,
                     std::vector<int64_t>& counts, std::vector<int64_t>& displs) {
  counts.assign(size, 0);
  displs.assign(size, 0);
  int64_t end = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = static_cast<int64_t>(((r * a + b) % 4) * scale);
    displs[r] = end + gap;
    end = displs[r] + counts[r];
  }
  return end;
}

class ProcessComm : public ::testing::TestWithParam<int> {};

TEST_P(ProcessComm, AllReduceEveryAlgorithmOpDtypeAndSize) {
  const int size = GetParam();
  RunProcessRanks(
      size,
      [size](int rank) {
        for (const char* algo : {"auto", "oneshot", "rsag", "cma"}) {
          auto comm = MakeForcedComm(rank, size, "COLLOPS_ALGO_ALLREDUCE", algo, [](auto& c) {
            float x = 1;
            c.AllReduce(&x, &x, 1, ACL_FLOAT, ReduceOp::kSum);
          });
          if (comm == nullptr) continue;
          ASSERT_EQ(comm->BackendName(), "lccl");
          ASSERT_EQ(comm->Rank(), rank);
          ASSERT_EQ(comm->Size(), size);
          for (DataType dtype : kDtypes) {
            for (ReduceOp op : kOps) {
              for (size_t n : kSizes) {
                Buffer in(dtype, n), out(dtype, n);
                std::vector<double> want(n);
                for (size_t i = 0; i < n; ++i) {
                  in.Set(i, Value(rank, i, 1, op));
                  want[i] = Value(0, i, 1, op);
                  for (int r = 1; r < size; ++r)
                    want[i] = FoldPair(op, want[i], Value(r, i, 1, op));
                }
                const bool inPlace = n % 2 == 1;
                comm->AllReduce(in.Data(), inPlace ? in.Data() : out.Data(), n, dtype, op);
                EXPECT_BUFFER(inPlace ? in : out, want,
                              Concat(algo, " ", DataTypeName(dtype), " ", ReduceOpName(op),
                                     " n=", n, inPlace ? " in place" : ""));
              }
            }
          }
        }
      },
      SmallBuffer());
}

TEST_P(ProcessComm, AllReduceBeyondDefaultBuffer) {
  const int size = GetParam();
  RunProcessRanks(size, [size](int rank) {
    auto comm = MakeLcclComm(rank, size, "big");
    const size_t n = (5u << 20) / 4 + 3;  // more than the 4 MiB default slot
    Buffer in(ACL_FLOAT, n), out(ACL_FLOAT, n);
    std::vector<double> want(n, 0);
    for (size_t i = 0; i < n; ++i) {
      in.Set(i, Value(rank, i, 2));
      for (int r = 0; r < size; ++r) want[i] += Value(r, i, 2);
    }
    comm->AllReduce(in.Data(), out.Data(), n, ACL_FLOAT, ReduceOp::kSum);
    EXPECT_BUFFER(out, want, "AllReduce 5 MiB");
  });
}

TEST_P(ProcessComm, AllGatherBytesAndAllGatherV) {
  const int size = GetParam();
  RunProcessRanks(
      size,
      [size](int rank) {
        for (const char* algo : {"auto", "staged", "cma"}) {
          auto comm = MakeForcedComm(rank, size, "COLLOPS_ALGO_ALLGATHER", algo, [](auto& c) {
            std::vector<uint8_t> out(c.Size());
            c.AllGatherBytes("x", out.data(), 1);
          });
          if (comm == nullptr) continue;
          for (size_t bytes : {size_t{0}, size_t{5}, size_t{100001}}) {
            std::vector<uint8_t> in(bytes), out(bytes * size, 0xee), want(bytes * size);
            for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(rank * 31 + i);
            for (int r = 0; r < size; ++r) {
              for (size_t i = 0; i < bytes; ++i)
                want[r * bytes + i] = static_cast<uint8_t>(r * 31 + i);
            }
            comm->AllGatherBytes(in.data(), out.data(), bytes);
            EXPECT_EQ(out, want) << algo << " AllGatherBytes of " << bytes << " bytes";
          }
          for (DataType dtype : kDtypes) {
            for (size_t scale : {size_t{1}, size_t{7001}}) {
              // Uneven counts including 0, gaps between the received ranges.
              std::vector<int64_t> counts, displs;
              const int64_t end = UnevenRanges(size, scale, 5, 3, 2, counts, displs);
              Buffer in(dtype, counts[rank]), out(dtype, end + 1);
              std::vector<double> want(end + 1, -1);
              for (size_t i = 0; i < out.Count(); ++i) out.Set(i, -1);
              for (int64_t i = 0; i < counts[rank]; ++i) in.Set(i, Value(rank, i, 3));
              for (int r = 0; r < size; ++r) {
                for (int64_t i = 0; i < counts[r]; ++i) want[displs[r] + i] = Value(r, i, 3);
              }
              comm->AllGatherV(in.Data(), counts[rank], out.Data(), counts.data(), displs.data(),
                               dtype);
              EXPECT_BUFFER(out, want,
                            Concat(algo, " AllGatherV ", DataTypeName(dtype), " scale ", scale));
            }
          }
        }
      },
      SmallBuffer());
}

TEST_P(ProcessComm, ReduceScatterV) {
  const int size = GetParam();
  RunProcessRanks(
      size,
      [size](int rank) {
        for (const char* algo : {"auto", "staged"}) {
          auto comm = MakeForcedComm(rank, size, "COLLOPS_ALGO_REDUCESCATTER", algo, nullptr);
          for (DataType dtype : kDtypes) {
            for (ReduceOp op : kOps) {
              for (size_t scale : {size_t{1}, size_t{9001}}) {
                std::vector<int64_t> counts, displs;
                const int64_t end = UnevenRanges(size, scale, 3, 2, 1, counts, displs);
                Buffer in(dtype, end), out(dtype, counts[rank]);
                for (int64_t i = 0; i < end; ++i) in.Set(i, Value(rank, i, 4, op));
                std::vector<double> want(counts[rank]);
                for (int64_t i = 0; i < counts[rank]; ++i) {
                  const size_t at = displs[rank] + i;
                  want[i] = Value(0, at, 4, op);
                  for (int r = 1; r < size; ++r)
                    want[i] = FoldPair(op, want[i], Value(r, at, 4, op));
                }
                comm->ReduceScatterV(in.Data(), counts.data(), displs.data(), out.Data(),
                                     counts[rank], dtype, op);
                EXPECT_BUFFER(out, want,
                              Concat(algo, " ReduceScatterV ", DataTypeName(dtype), " ",
                                     ReduceOpName(op), " scale ", scale));
              }
            }
          }
        }
      },
      SmallBuffer());
}

TEST_P(ProcessComm, AllToAllV) {
  const int size = GetParam();
  RunProcessRanks(
      size,
      [size](int rank) {
        for (const char* algo : {"auto", "staged", "cma"}) {
          auto comm = MakeForcedComm(rank, size, "COLLOPS_ALGO_ALLTOALL", algo, [](auto& c) {
            const testing::PieceLayout l(c.Rank(), c.Size(), 1);
            std::vector<float> in(l.sendEnd), out(l.recvEnd);
            c.AllToAllV(in.data(), l.sendCounts.data(), l.sdispls.data(), out.data(),
                        l.recvCounts.data(), l.rdispls.data(), ACL_FLOAT);
          });
          if (comm == nullptr) continue;
          for (DataType dtype : kDtypes) {
            for (const int64_t scale : {0, 1, 3001}) {  // up to beyond the buffer
              const testing::PieceLayout l(rank, size, scale);
              Buffer in(dtype, l.sendEnd), out(dtype, l.recvEnd);
              for (int64_t i = 0; i < l.sendEnd; ++i) in.Set(i, Value(rank, i, 5));
              for (int64_t i = 0; i < l.recvEnd; ++i) out.Set(i, -1);
              std::vector<double> want(l.recvEnd, -1);
              for (int r = 0; r < size; ++r) {
                const int64_t theirDispl = testing::PieceLayout::SendDispl(r, rank, scale);
                for (int64_t i = 0; i < l.recvCounts[r]; ++i) {
                  want[l.rdispls[r] + i] = Value(r, theirDispl + i, 5);
                }
              }
              comm->AllToAllV(in.Data(), l.sendCounts.data(), l.sdispls.data(), out.Data(),
                              l.recvCounts.data(), l.rdispls.data(), dtype);
              EXPECT_BUFFER(out, want,
                            Concat(algo, " AllToAllV ", DataTypeName(dtype), " scale ", scale));
            }
          }
        }
      },
      SmallBuffer());
}

TEST_P(ProcessComm, BroadcastFromEveryRoot) {
  const int size = GetParam();
  RunProcessRanks(
      size,
      [size](int rank) {
        for (const char* algo : {"auto", "staged", "cma"}) {
          auto comm = MakeForcedComm(rank, size, "COLLOPS_ALGO_BROADCAST", algo, [](auto& c) {
            char x = 0;
            c.Broadcast(&x, 1, ACL_INT8, 0);
          });
          if (comm == nullptr) continue;
          for (DataType dtype : kDtypes) {
            for (size_t n : kSizes) {
              for (int root = 0; root < size; ++root) {
                Buffer buf(dtype, n);
                std::vector<double> want(n);
                for (size_t i = 0; i < n; ++i) {
                  buf.Set(i, Value(rank, i, 6));
                  want[i] = Value(root, i, 6);
                }
                comm->Broadcast(buf.Data(), n, dtype, root);
                EXPECT_BUFFER(
                    buf, want,
                    Concat(algo, " Broadcast ", DataTypeName(dtype), " n=", n, " root ", root));
              }
            }
          }
        }
      },
      SmallBuffer());
}

TEST_P(ProcessComm, SendRecvEveryPair) {
  const int size = GetParam();
  RunProcessRanks(
      size,
      [size](int rank) {
        // Messages of 16 KiB and more move by process_vm_readv unless it is off (then they are
        // pipelined through the 64 KiB slots); small and large ones alternate on every channel.
        for (const char* crossFrom : {"16384", "0"}) {
          setenv("COLLOPS_SHM_CMA_BYTES", crossFrom, 1);
          auto comm = MakeLcclComm(rank, size, std::string("p2p-") + crossFrom);
          for (DataType dtype : kDtypes) {
            for (size_t n : kSizes) {
              // Every ordered pair in one fixed order: synchronous sends cannot deadlock.
              for (int from = 0; from < size; ++from) {
                for (int to = 0; to < size; ++to) {
                  if (from == to) continue;
                  const int seed = from * 10 + to;
                  if (rank == from) {
                    Buffer buf(dtype, n);
                    for (size_t i = 0; i < n; ++i) buf.Set(i, Value(from, i, seed));
                    comm->Send(buf.Data(), n, dtype, to);
                  } else if (rank == to) {
                    Buffer buf(dtype, n);
                    std::vector<double> want(n);
                    for (size_t i = 0; i < n; ++i) want[i] = Value(from, i, seed);
                    comm->Recv(buf.Data(), n, dtype, from);
                    EXPECT_BUFFER(buf, want,
                                  Concat("Recv ", DataTypeName(dtype), " n=", n, " from ", from,
                                         " (COLLOPS_SHM_CMA_BYTES=", crossFrom, ")"));
                  }
                }
              }
            }
          }
          // A collective after point-to-point traffic still sees consistent slots.
          int32_t mine = rank + 1, sum = 0;
          comm->AllReduce(&mine, &sum, 1, ACL_INT32, ReduceOp::kSum);
          EXPECT_EQ(sum, size * (size + 1) / 2);
        }
      },
      SmallBuffer());
}

TEST_P(ProcessComm, SendRecvMismatchFailsOnBothSidesAndKeepsTheChannel) {
  const int size = GetParam();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  RunProcessRanks(size, [size](int rank) {
    auto comm = MakeLcclComm(rank, size, "mismatch");
    std::vector<int32_t> buf(5, rank);
    if (rank <= 1) {
      try {
        if (rank == 0) comm->Send(buf.data(), 5, ACL_INT32, 1);
        if (rank == 1) comm->Recv(buf.data(), 4, ACL_INT32, 0);
        ADD_FAILURE() << "no ERROR_RANK_MISMATCH on rank " << rank;
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), ERROR_RANK_MISMATCH);
        EXPECT_NE(std::string(e.what()).find("rank 0 sends 5 elements of"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("rank 1, which expects 4 elements"), std::string::npos)
            << e.what();
      }
      EXPECT_FALSE(comm->Broken());
      if (rank == 0) comm->Send(buf.data(), 5, ACL_INT32, 1);
      if (rank == 1) {
        comm->Recv(buf.data(), 5, ACL_INT32, 0);
        EXPECT_EQ(buf, std::vector<int32_t>(5, 0));
      }
    }
    comm->Barrier();
  });
}

TEST_P(ProcessComm, BarrierWaitsForTheLastRank) {
  const int size = GetParam();
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  RunProcessRanks(size, [size, start](int rank) {
    auto comm = MakeLcclComm(rank, size, "barrier");
    comm->Barrier();
    timespec before{};
    clock_gettime(CLOCK_MONOTONIC, &before);
    // The last rank arrives 300 ms after the others; nobody may leave before it arrived.
    if (rank == size - 1) usleep(300'000);
    comm->Barrier();
    timespec after{};
    clock_gettime(CLOCK_MONOTONIC, &after);
    const double waited = (after.tv_sec - before.tv_sec) + (after.tv_nsec - before.tv_nsec) * 1e-9;
    if (size > 1) {
      EXPECT_GE(waited, 0.25) << "rank " << rank << " left the barrier early";
    }
  });
}

TEST_P(ProcessComm, ReductionsAreBitIdenticalOnEveryRank) {
  const int size = GetParam();
  RunProcessRanks(size, [size](int rank) {
    auto comm = MakeLcclComm(rank, size, "bits");
    for (size_t n : {size_t{1000}, size_t{200001}}) {
      for (DataType dtype : {ACL_FLOAT, ACL_FLOAT16}) {
        // Inexact values: any change of order or rounding shows in the bits.
        std::vector<std::vector<uint8_t>> inputs;
        for (int r = 0; r < size; ++r) {
          std::mt19937 gen(1234 + r);
          std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
          Buffer b(dtype, n);
          for (size_t i = 0; i < n; ++i) b.Set(i, dist(gen) * (1 + i % 97));
          inputs.push_back(b.bytes);
        }
        std::vector<uint8_t> out(inputs[rank].size()), want(out.size());
        comm->AllReduce(inputs[rank].data(), out.data(), n, dtype, ReduceOp::kSum);
        std::vector<const void*> srcs;
        for (auto& input : inputs) srcs.push_back(input.data());
        ReduceArrays(dtype, ReduceOp::kSum, srcs.data(), size, want.data(), n);
        EXPECT_TRUE(out == want) << DataTypeName(dtype) << " n=" << n
                                 << ": differs from the rank-order fold";
        std::vector<uint8_t> all(out.size() * size);
        comm->AllGatherBytes(out.data(), all.data(), out.size());
        for (int r = 0; r < size; ++r) {
          EXPECT_EQ(0, std::memcmp(all.data() + r * out.size(), out.data(), out.size()))
              << "rank " << r << " got different bits";
        }
      }
    }
  });
}

/// Calls of every kind one after another (random_schedule.h), with a 64 KiB slot (many staged
/// rounds) and with the default one (one round, process_vm_readv, heap buffers).
TEST_P(ProcessComm, RandomSchedulesMatchTheirGolden) {
  const int size = GetParam();
  for (bool smallSlot : {true, false}) {
    SCOPED_TRACE(smallSlot ? "COLLOPS_SHM_BYTES=65536" : "default COLLOPS_SHM_BYTES");
    ProcessRanksOptions options = smallSlot ? SmallBuffer() : ProcessRanksOptions{};
    options.deadlineSeconds = 90;
    RunProcessRanks(
        size,
        [size, smallSlot](int rank) {
          auto comm = MakeLcclComm(rank, size, "schedule");
          RunRandomSchedule(*comm, 100 * size + smallSlot, 40);
        },
        options);
  }
}

TEST(ProcessCommRegistry, LcclIsRegisteredForMultiProcessMode) {
  const std::vector<std::string> names = ListCommunicatorBackends();
  EXPECT_NE(std::find(names.begin(), names.end(), "lccl/process"), names.end());
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessComm, ::testing::Values(1, 2, 3, 4, 7),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "R" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace collops
