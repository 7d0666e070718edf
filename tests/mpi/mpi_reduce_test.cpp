// Reductions on backend "mpi" where MPI's own ops break collops' rules (docs/backends.md, mpi):
// max and min let NaN win in every float dtype (MPI_MAX/MPI_MIN drop it), as lccl and
// torch.maximum do; float16 and bfloat16 sums and products accumulate in float32 over all ranks
// in rank order and round once, bit-identical to lccl (a user MPI_Op on 2-byte data rounds after
// every pair it combines). Every rank generates every rank's inputs, so the goldens are computed
// here, with the compiler's _Float16 and a bit-level bfloat16 rounding rather than collops'
// kernels. ctest MpiChunked.R3 runs them with COLLOPS_MPI_MAX_COUNT=1000: the 2600-element cases
// then cross the chunked paths. Every test is collective (all ranks take the same path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/collops.h"
#include "mpi_job.h"

namespace collops {
namespace testing {
namespace {

std::shared_ptr<Communicator> MpiComm(const std::string& domain) {
  CommParam param;
  param.backend = "mpi";
  param.commDomain = domain;
  param.rank = WorldRank();
  param.rankSize = WorldSize();
  return CreateCommunicator(param);
}

uint16_t Float16Bits(float v) {
  const auto h = static_cast<_Float16>(v);  // round to nearest even, overflow to Inf
  uint16_t bits = 0;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

float Float16Value(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof(bits));
  return static_cast<float>(h);
}

uint16_t Bfloat16Bits(float v) {  // round to nearest even; no NaN inputs here
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

float Bfloat16Value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float v = 0;
  std::memcpy(&v, &wide, sizeof(v));
  return v;
}

/// A buffer of `count` elements of `dtype`, written and read as doubles, compared as bits.
class Buffer {
 public:
  Buffer(DataType dtype, size_t count)
      : dtype_(dtype), size_(DataTypeSize(dtype)), bytes_(count * size_, 0xEE) {}
  void* data() { return bytes_.data(); }
  uint8_t* at(size_t i) { return bytes_.data() + i * size_; }
  size_t size() const { return bytes_.size() / size_; }

  /// Stores v rounded once to the dtype.
  void Set(size_t i, double v) {
    switch (dtype_) {
      case ACL_FLOAT: {
        const auto f = static_cast<float>(v);
        std::memcpy(at(i), &f, 4);
        break;
      }
      case ACL_DOUBLE:
        std::memcpy(at(i), &v, 8);
        break;
      case ACL_FLOAT16: {
        const uint16_t b = Float16Bits(static_cast<float>(v));
        std::memcpy(at(i), &b, 2);
        break;
      }
      default: {
        const uint16_t b = Bfloat16Bits(static_cast<float>(v));
        std::memcpy(at(i), &b, 2);
      }
    }
  }
  uint64_t Bits(size_t i) const {
    uint64_t bits = 0;
    std::memcpy(&bits, bytes_.data() + i * size_, size_);
    return bits;
  }

 private:
  DataType dtype_;
  size_t size_;
  std::vector<uint8_t> bytes_;
};

/// The canonical quiet NaN a NaN result is stored as (lccl's and torch's NaN).
uint64_t NanBits(DataType dtype) {
  switch (dtype) {
    case ACL_FLOAT:
      return 0x7fc00000u;
    case ACL_DOUBLE:
      return 0x7ff8000000000000ull;
    case ACL_FLOAT16:
      return 0x7e00u;
    default:
      return 0x7fc0u;
  }
}

/// Rank r's element i for the NaN tests: NaN on rank i % (R + 1) (so every (R+1)-th element has
/// none), else a small integer that every float dtype holds exactly.
double NanCase(int r, size_t i, int R) {
  if (static_cast<int>(i % (R + 1)) == r) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>((r * 7 + static_cast<int>(i % 97) * 3) % 11 - 5);
}

uint64_t ExpectedMaxMin(DataType dtype, ReduceOp op, size_t i, int R) {
  if (static_cast<int>(i % (R + 1)) < R) return NanBits(dtype);
  double want = NanCase(0, i, R);
  for (int r = 1; r < R; ++r) {
    want =
        op == ReduceOp::kMax ? std::max(want, NanCase(r, i, R)) : std::min(want, NanCase(r, i, R));
  }
  Buffer one(dtype, 1);
  one.Set(0, want);
  return one.Bits(0);
}

TEST(MpiReduce, MaxAndMinLetNanWinInEveryFloatDtype) {
  const int R = WorldSize(), me = WorldRank();
  auto comm = MpiComm("reduce-nan");
  for (DataType dtype : {ACL_FLOAT, ACL_DOUBLE, ACL_FLOAT16, ACL_BF16}) {
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      for (size_t count : {static_cast<size_t>(R + 3), static_cast<size_t>(2600)}) {
        SCOPED_TRACE(std::string(DataTypeName(dtype)) + " " + ReduceOpName(op) + " count " +
                     std::to_string(count));
        Buffer in(dtype, count), out(dtype, count);
        for (size_t i = 0; i < count; ++i) in.Set(i, NanCase(me, i, R));
        comm->AllReduce(in.data(), out.data(), count, dtype, op);
        comm->AllReduce(in.data(), in.data(), count, dtype, op);  // in place
        size_t wrong = 0, wrongInPlace = 0;
        for (size_t i = 0; i < count; ++i) {
          const uint64_t want = ExpectedMaxMin(dtype, op, i, R);
          wrong += out.Bits(i) != want;
          wrongInPlace += in.Bits(i) != want;
          if (out.Bits(i) != want && wrong == 1) {
            ADD_FAILURE() << "AllReduce element " << i << ": bits " << std::hex << out.Bits(i)
                          << ", want " << want;
          }
        }
        EXPECT_EQ(wrong, 0u) << "AllReduce";
        EXPECT_EQ(wrongInPlace, 0u) << "AllReduce in place";
        // ReduceScatterV: rank j gets the reduced elements [j * m, (j + 1) * m).
        const size_t m = count / R;
        std::vector<int64_t> counts(R, static_cast<int64_t>(m)), displs(R);
        for (int j = 0; j < R; ++j) displs[j] = static_cast<int64_t>(j * m);
        Buffer x(dtype, count), y(dtype, m);
        for (size_t i = 0; i < count; ++i) x.Set(i, NanCase(me, i, R));
        comm->ReduceScatterV(x.data(), counts.data(), displs.data(), y.data(), m, dtype, op);
        size_t wrongScatter = 0;
        for (size_t k = 0; k < m; ++k) {
          wrongScatter += y.Bits(k) != ExpectedMaxMin(dtype, op, me * m + k, R);
        }
        EXPECT_EQ(wrongScatter, 0u) << "ReduceScatterV";
      }
    }
  }
}

/// Rank 0 holds `big`, every other rank `small`: pairwise rounding loses the smalls (a tie at
/// every step rounds back to even `big`), one rounding of the float32 sum keeps them.
TEST(MpiReduce, HalfSumsOfOneBigAndSmallsRoundOnce) {
  const int R = WorldSize(), me = WorldRank();
  auto comm = MpiComm("reduce-round-once");
  struct Case {
    DataType dtype;
    float big, small;
    uint16_t bigBits;  // ulp(big) = 2 * small
  };
  for (const Case& c :
       {Case{ACL_FLOAT16, 1024.0f, 0.5f, 0x6400}, Case{ACL_BF16, 256.0f, 1.0f, 0x4380}}) {
    SCOPED_TRACE(DataTypeName(c.dtype));
    // Exact sum big + (R - 1) * small, rounded to nearest even once: in units of ulp(big).
    const auto want =
        static_cast<uint16_t>(c.bigBits + static_cast<int>(std::nearbyint(0.5 * (R - 1))));
    Buffer in(c.dtype, R), out(c.dtype, R), piece(c.dtype, 1);
    for (int i = 0; i < R; ++i) in.Set(i, me == 0 ? c.big : c.small);
    comm->AllReduce(in.data(), out.data(), R, c.dtype, ReduceOp::kSum);
    for (int i = 0; i < R; ++i) EXPECT_EQ(out.Bits(i), want) << "AllReduce element " << i;
    std::vector<int64_t> ones(R, 1), iota(R);
    for (int j = 0; j < R; ++j) iota[j] = j;
    comm->ReduceScatterV(in.data(), ones.data(), iota.data(), piece.data(), 1, c.dtype,
                         ReduceOp::kSum);
    EXPECT_EQ(piece.Bits(0), want) << "ReduceScatterV";
  }
  if (R == 3) {  // the probe's case: float16 1024 + 0.5 + 0.5 is 1025, not 1024
    Buffer in(ACL_FLOAT16, 1), out(ACL_FLOAT16, 1);
    in.Set(0, me == 0 ? 1024.0 : 0.5);
    comm->AllReduce(in.data(), out.data(), 1, ACL_FLOAT16, ReduceOp::kSum);
    EXPECT_EQ(Float16Value(static_cast<uint16_t>(out.Bits(0))), 1025.0f);
  }
}

/// Rank r's element i of the random cases: sums span several binades, products stay near 1.
double HalfCase(int r, size_t i, ReduceOp op) {
  uint64_t s =
      (static_cast<uint64_t>(r) + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xBF58476D1CE4E5B9ull;
  s ^= s >> 31;
  s *= 0x94D049BB133111EBull;
  s ^= s >> 29;
  const double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
  return op == ReduceOp::kSum ? (u - 0.5) * 120.0 : 1.0 + (u - 0.5) / 8.0;
}

/// float32 fold over ranks 0..R-1 in order of each rank's element (as stored), rounded once.
uint64_t ExpectedRoundOnce(DataType dtype, ReduceOp op, size_t i, int R) {
  const auto narrow = [&](int r) {
    const auto f = static_cast<float>(HalfCase(r, i, op));
    return dtype == ACL_FLOAT16 ? Float16Value(Float16Bits(f)) : Bfloat16Value(Bfloat16Bits(f));
  };
  float acc = narrow(0);
  for (int r = 1; r < R; ++r) acc = op == ReduceOp::kSum ? acc + narrow(r) : acc * narrow(r);
  return dtype == ACL_FLOAT16 ? Float16Bits(acc) : Bfloat16Bits(acc);
}

TEST(MpiReduce, HalfSumsAndProductsAreTheRankOrderFoldRoundedOnce) {
  const int R = WorldSize(), me = WorldRank();
  auto comm = MpiComm("reduce-rank-order");
  for (DataType dtype : {ACL_FLOAT16, ACL_BF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      for (size_t count : {static_cast<size_t>(7), static_cast<size_t>(2600)}) {
        SCOPED_TRACE(std::string(DataTypeName(dtype)) + " " + ReduceOpName(op) + " count " +
                     std::to_string(count));
        Buffer in(dtype, count), out(dtype, count);
        for (size_t i = 0; i < count; ++i) in.Set(i, HalfCase(me, i, op));
        comm->AllReduce(in.data(), out.data(), count, dtype, op);
        comm->AllReduce(in.data(), in.data(), count, dtype, op);  // in place
        size_t wrong = 0, wrongInPlace = 0;
        for (size_t i = 0; i < count; ++i) {
          const uint64_t want = ExpectedRoundOnce(dtype, op, i, R);
          wrong += out.Bits(i) != want;
          wrongInPlace += in.Bits(i) != want;
        }
        EXPECT_EQ(wrong, 0u) << "AllReduce";
        EXPECT_EQ(wrongInPlace, 0u) << "AllReduce in place";
        // ReduceScatterV: uneven counts (rank j gets count / R + j elements), the ranges laid
        // out in reverse rank order; then the same in place, out on this rank's own range.
        std::vector<int64_t> counts(R), displs(R);
        int64_t total = 0;
        for (int j = R - 1; j >= 0; --j) {
          counts[j] = static_cast<int64_t>(count / R) + j;
          displs[j] = total;
          total += counts[j];
        }
        Buffer x(dtype, total), y(dtype, counts[me]);
        for (int64_t i = 0; i < total; ++i) x.Set(i, HalfCase(me, i, op));
        comm->ReduceScatterV(x.data(), counts.data(), displs.data(), y.data(), counts[me], dtype,
                             op);
        comm->ReduceScatterV(x.data(), counts.data(), displs.data(), x.at(displs[me]), counts[me],
                             dtype, op);
        size_t wrongScatter = 0, wrongScatterInPlace = 0;
        for (int64_t k = 0; k < counts[me]; ++k) {
          const uint64_t want = ExpectedRoundOnce(dtype, op, displs[me] + k, R);
          wrongScatter += y.Bits(k) != want;
          wrongScatterInPlace += x.Bits(displs[me] + k) != want;
        }
        EXPECT_EQ(wrongScatter, 0u) << "ReduceScatterV";
        EXPECT_EQ(wrongScatterInPlace, 0u) << "ReduceScatterV in place";
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace collops
