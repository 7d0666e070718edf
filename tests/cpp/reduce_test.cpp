// Unit tests of the reduction kernels (collops/reduce.h) against an independent reference: a scalar
// fold in double that rounds to float after every step (exact emulation of float32 arithmetic,
// since double has more than 2 * 24 + 2 significand bits), with its own float16 / bfloat16
// codecs built on frexp/ldexp. Every CPU-supported kernel build is checked, not only the
// dispatched one.
#include "collops/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "collops/status.h"
#include "core/src/reduce/half.h"
#include "core/src/reduce/reduce_dispatch.h"

namespace collops {
namespace {

using reduce_internal::Isa;
using reduce_internal::KernelForIsa;
using reduce_internal::ReduceKernel;

constexpr DataType kDtypes[] = {ACL_INT8,    ACL_UINT8, ACL_INT16, ACL_INT32, ACL_INT64,
                                ACL_FLOAT16, ACL_BF16,  ACL_FLOAT, ACL_DOUBLE};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin};
constexpr size_t kGuard = 8;  // elements past dst's end that no kernel may touch

// ---- Reference codecs: a binary format with `digits` significand bits, `exp_bits` exponent bits.
struct Format {
  int digits;
  int exp_bits;
  int Bias() const { return (1 << (exp_bits - 1)) - 1; }
  int MinExp() const { return 1 - Bias(); }
};
constexpr Format kHalf{11, 5};
constexpr Format kBf16{8, 8};
constexpr Format kSingle{24, 8};

double Decode(uint32_t bits, Format f) {
  const int mant_bits = f.digits - 1;
  const uint32_t mant = bits & ((1u << mant_bits) - 1);
  const int exp = static_cast<int>((bits >> mant_bits) & ((1u << f.exp_bits) - 1));
  const bool negative = (bits >> (mant_bits + f.exp_bits)) & 1u;
  double v;
  if (exp == (1 << f.exp_bits) - 1) {
    v = mant == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), f.MinExp() - mant_bits);
  } else {
    v = std::ldexp(static_cast<double>(mant + (1u << mant_bits)), exp - f.Bias() - mant_bits);
  }
  return negative ? -v : v;
}

// Round to nearest even with f's precision and range; +-Inf on overflow. NaN stays NaN.
double Round(double x, Format f) {
  if (x == 0 || std::isnan(x) || std::isinf(x)) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  const int quantum_exp = std::max(e - 1, f.MinExp()) - (f.digits - 1);
  const double scaled = std::ldexp(std::fabs(x), -quantum_exp);
  double q = std::floor(scaled);
  const double rest = scaled - q;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(q, 2.0) != 0)) q += 1;
  double v = std::ldexp(q, quantum_exp);
  if (v >= std::ldexp(1.0, f.Bias() + 1)) v = std::numeric_limits<double>::infinity();
  return std::copysign(v, x);
}

// Bits of a value already representable in f (not NaN).
uint32_t Encode(double v, Format f) {
  const int mant_bits = f.digits - 1;
  const uint32_t sign = std::signbit(v) ? 1u << (mant_bits + f.exp_bits) : 0u;
  const double a = std::fabs(v);
  if (std::isinf(a)) return sign | (((1u << f.exp_bits) - 1) << mant_bits);
  if (a < std::ldexp(1.0, f.MinExp())) {
    return sign | static_cast<uint32_t>(std::ldexp(a, mant_bits - f.MinExp()));
  }
  int e;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const auto mant = static_cast<uint32_t>(std::ldexp(m, f.digits)) - (1u << mant_bits);
  return sign | (static_cast<uint32_t>(e - 1 + f.Bias()) << mant_bits) | mant;
}

uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

uint64_t BitsOfDouble(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

double DoubleOf(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
}

// ---- Reference reduction, one element at a time, on raw bits.
bool IsFloat(DataType d) {
  return d == ACL_FLOAT || d == ACL_FLOAT16 || d == ACL_BF16 || d == ACL_DOUBLE;
}
Format FormatOf(DataType d) { return d == ACL_FLOAT16 ? kHalf : d == ACL_BF16 ? kBf16 : kSingle; }
uint64_t CanonicalNan(DataType d) {
  return d == ACL_FLOAT16 ? 0x7e00u : d == ACL_BF16 ? 0x7fc0u : 0x7fc00000u;
}

int64_t SignExtend(uint64_t bits, size_t bytes) {
  const int shift = 64 - 8 * static_cast<int>(bytes);
  return static_cast<int64_t>(bits << shift) >> shift;
}

// The value of an integer element: uint8 is the one unsigned dtype.
int64_t IntegerValue(DataType d, uint64_t bits) {
  return d == ACL_UINT8 ? static_cast<int64_t>(bits & 0xff) : SignExtend(bits, DataTypeSize(d));
}

// NaN wins; on a tie (or +-0) the later operand is kept.
double Fold(ReduceOp op, double acc, double x) {
  if (op == ReduceOp::kSum) return acc + x;
  if (op == ReduceOp::kProd) return acc * x;
  if (op == ReduceOp::kMax) return (acc > x || std::isnan(acc)) ? acc : x;
  return (acc < x || std::isnan(acc)) ? acc : x;
}

uint64_t Reference(DataType d, ReduceOp op, const std::vector<uint64_t>& in) {
  const size_t bytes = DataTypeSize(d);
  const uint64_t mask = bytes == 8 ? ~0ull : (1ull << (8 * bytes)) - 1;
  if (in.size() == 1) return in[0];
  if (!IsFloat(d)) {
    uint64_t acc = in[0];
    for (size_t k = 1; k < in.size(); ++k) {
      const int64_t a = IntegerValue(d, acc), b = IntegerValue(d, in[k]);
      if (op == ReduceOp::kSum) acc = acc + in[k];
      if (op == ReduceOp::kProd) acc = acc * in[k];
      if (op == ReduceOp::kMax) acc = static_cast<uint64_t>(std::max(a, b));
      if (op == ReduceOp::kMin) acc = static_cast<uint64_t>(std::min(a, b));
      acc &= mask;
    }
    return acc;
  }
  if (d == ACL_DOUBLE) {  // folded in double itself: nothing to round
    double acc = DoubleOf(in[0]);
    for (size_t k = 1; k < in.size(); ++k) acc = Fold(op, acc, DoubleOf(in[k]));
    return std::isnan(acc) ? 0x7ff8000000000000ull : BitsOfDouble(acc);
  }
  const Format f = FormatOf(d);
  double acc = Decode(static_cast<uint32_t>(in[0]), f);
  for (size_t k = 1; k < in.size(); ++k) {
    acc = Round(Fold(op, acc, Decode(static_cast<uint32_t>(in[k]), f)), kSingle);
  }
  return std::isnan(acc) ? CanonicalNan(d) : Encode(Round(acc, f), f);
}

// ---- Buffers of raw elements.
struct Buffer {
  DataType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DataType d, size_t count) : dtype(d), bytes(count * DataTypeSize(d), 0xa5) {}
  size_t Size() const { return bytes.size() / DataTypeSize(dtype); }
  uint64_t Get(size_t i) const {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + i * DataTypeSize(dtype), DataTypeSize(dtype));
    return v;
  }
  void Set(size_t i, uint64_t v) {
    std::memcpy(bytes.data() + i * DataTypeSize(dtype), &v, DataTypeSize(dtype));
  }
};

// Integers: any bits. Floats: mostly moderate values (so products of 7 stay finite), some
// arbitrary bit patterns (NaN payloads, Inf, subnormals, huge values).
Buffer RandomBuffer(DataType d, size_t count, std::mt19937_64& rng, bool any_bits = false) {
  Buffer b(d, count);
  std::uniform_real_distribution<double> moderate(-4.0, 4.0);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = rng();
    if (!IsFloat(d) || any_bits || bits % 16 == 0) {
      b.Set(i, bits);
    } else if (d == ACL_DOUBLE) {
      b.Set(i, BitsOfDouble(moderate(rng)));
    } else {
      const double v = Round(moderate(rng), FormatOf(d));
      b.Set(i, d == ACL_FLOAT ? BitsOf(static_cast<float>(v)) : Encode(v, FormatOf(d)));
    }
  }
  return b;
}

std::vector<uint64_t> ReferenceArray(DataType d, ReduceOp op, const std::vector<Buffer>& srcs,
                                     size_t count) {
  std::vector<uint64_t> out(count);
  std::vector<uint64_t> column(srcs.size());
  for (size_t i = 0; i < count; ++i) {
    for (size_t k = 0; k < srcs.size(); ++k) column[k] = srcs[k].Get(i);
    out[i] = Reference(d, op, column);
  }
  return out;
}

std::vector<const void*> Pointers(const std::vector<Buffer>& srcs) {
  std::vector<const void*> p;
  for (const Buffer& b : srcs) p.push_back(b.bytes.data());
  return p;
}

// Calls `reduce` (ReduceArrays or one build's kernel) and checks dst element by element.
template <class ReduceFn>
void ExpectMatches(ReduceFn reduce, const std::string& who, DataType d, ReduceOp op,
                   const std::vector<Buffer>& srcs, size_t count,
                   const std::vector<uint64_t>& expected) {
  Buffer dst(d, count + kGuard);
  const std::vector<const void*> ptrs = Pointers(srcs);
  reduce(d, op, ptrs.data(), ptrs.size(), dst.bytes.data(), count);
  size_t mismatches = 0;
  for (size_t i = 0; i < count && mismatches < 5; ++i) {
    if (dst.Get(i) != expected[i]) {
      ++mismatches;
      ADD_FAILURE() << who << " " << DataTypeName(d) << " " << ReduceOpName(op)
                    << " n=" << srcs.size() << " count=" << count << " [" << i << "]: got 0x"
                    << std::hex << dst.Get(i) << ", expected 0x" << expected[i];
    }
  }
  for (size_t i = count; i < count + kGuard; ++i) {
    EXPECT_EQ(dst.Get(i), Buffer(d, 1).Get(0)) << who << " wrote past dst[" << count << "]";
  }
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (KernelForIsa(isa) != nullptr) isas.push_back(isa);
  }
  return isas;
}

// ---- Golden: dtype x op x n x count, through ReduceArrays and through every supported build.
class ReduceGolden : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp, size_t>> {};

TEST_P(ReduceGolden, MatchesReferenceOnEveryBuild) {
  const auto [dtype, op, n] = GetParam();
  std::mt19937_64 rng(1000 * dtype + 10 * static_cast<int>(op) + n);
  for (size_t count : {0, 1, 7, 33, 1000, 4099}) {
    std::vector<Buffer> srcs;
    for (size_t k = 0; k < n; ++k) srcs.push_back(RandomBuffer(dtype, count, rng));
    const std::vector<uint64_t> expected = ReferenceArray(dtype, op, srcs, count);
    ExpectMatches(ReduceArrays, ReduceKernelIsa(), dtype, op, srcs, count, expected);
    for (Isa isa : SupportedIsas()) {
      ExpectMatches(KernelForIsa(isa), reduce_internal::IsaName(isa), dtype, op, srcs, count,
                    expected);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ReduceGolden,
                         ::testing::Combine(::testing::ValuesIn(kDtypes), ::testing::ValuesIn(kOps),
                                            ::testing::Values(1, 2, 3, 7)),
                         [](const auto& info) {
                           return DataTypeName(std::get<0>(info.param)) + "_" +
                                  ReduceOpName(std::get<1>(info.param)) + "_n" +
                                  std::to_string(std::get<2>(info.param));
                         });

// ---- Aliasing: dst is the very same buffer as one of the sources.
TEST(ReduceAlias, DstMaySharePointerWithAnySource) {
  std::mt19937_64 rng(7);
  for (DataType dtype : kDtypes) {
    for (ReduceOp op : kOps) {
      for (size_t alias : {0, 2}) {
        const size_t count = 4099;
        std::vector<Buffer> srcs;
        for (int k = 0; k < 3; ++k) srcs.push_back(RandomBuffer(dtype, count, rng));
        const std::vector<uint64_t> expected = ReferenceArray(dtype, op, srcs, count);
        std::vector<const void*> ptrs = Pointers(srcs);
        ReduceArrays(dtype, op, ptrs.data(), ptrs.size(), srcs[alias].bytes.data(), count);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(srcs[alias].Get(i), expected[i])
              << DataTypeName(dtype) << " " << ReduceOpName(op) << " dst == srcs[" << alias
              << "] at " << i;
        }
      }
    }
  }
}

// ---- Integers wrap like numpy, with no UB (this suite also runs under UBSan).
template <class T>
T ReduceTwo(DataType dtype, ReduceOp op, T a, T b) {
  const void* srcs[] = {&a, &b};
  T out;
  ReduceArrays(dtype, op, srcs, 2, &out, 1);
  return out;
}

TEST(ReduceWrap, IntegersWrapOnOverflow) {
  EXPECT_EQ(ReduceTwo<int8_t>(ACL_INT8, ReduceOp::kSum, 127, 1), -128);
  EXPECT_EQ(ReduceTwo<int8_t>(ACL_INT8, ReduceOp::kSum, -128, -1), 127);
  EXPECT_EQ(ReduceTwo<int8_t>(ACL_INT8, ReduceOp::kProd, 16, 16), 0);
  EXPECT_EQ(ReduceTwo<int8_t>(ACL_INT8, ReduceOp::kProd, -128, -1), -128);
  EXPECT_EQ(ReduceTwo<int16_t>(ACL_INT16, ReduceOp::kProd, 300, 300), 24464);  // 90000 - 65536
  EXPECT_EQ(ReduceTwo<int16_t>(ACL_INT16, ReduceOp::kProd, -32768, -1), -32768);
  EXPECT_EQ(ReduceTwo<int32_t>(ACL_INT32, ReduceOp::kSum, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(ReduceTwo<int32_t>(ACL_INT32, ReduceOp::kProd, 65536, 65536), 0);
  EXPECT_EQ(ReduceTwo<int64_t>(ACL_INT64, ReduceOp::kSum, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(ReduceTwo<int64_t>(ACL_INT64, ReduceOp::kProd, INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(ReduceTwo<int64_t>(ACL_INT64, ReduceOp::kMin, INT64_MIN, INT64_MAX), INT64_MIN);
  EXPECT_EQ(ReduceTwo<int8_t>(ACL_INT8, ReduceOp::kMax, -128, 127), 127);
  // uint8 compares unsigned (200 > 100, where int8 would read -56) and wraps mod 256.
  EXPECT_EQ(ReduceTwo<uint8_t>(ACL_UINT8, ReduceOp::kSum, 255, 1), 0);
  EXPECT_EQ(ReduceTwo<uint8_t>(ACL_UINT8, ReduceOp::kProd, 16, 17), 16);  // 272 - 256
  EXPECT_EQ(ReduceTwo<uint8_t>(ACL_UINT8, ReduceOp::kMax, 200, 100), 200);
  EXPECT_EQ(ReduceTwo<uint8_t>(ACL_UINT8, ReduceOp::kMin, 200, 100), 100);
}

TEST(ReduceSpecial, Float64KeepsItsOwnRangeAndPrecision) {
  // Neither result survives a float32 round trip.
  EXPECT_EQ(ReduceTwo<double>(ACL_DOUBLE, ReduceOp::kProd, 1e300, 10.0), 1e301);
  EXPECT_EQ(ReduceTwo<double>(ACL_DOUBLE, ReduceOp::kSum, 1.0, 0x1p-40), 1.0 + 0x1p-40);
  const double nan = ReduceTwo<double>(ACL_DOUBLE, ReduceOp::kMax, std::nan("0x123"), 1.0);
  EXPECT_EQ(BitsOfDouble(nan), 0x7ff8000000000000ull);  // the canonical quiet NaN
}

// ---- Special values and the fold's precision.
TEST(ReduceSpecial, NanAndInfPropagateThroughSum) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan_payload = std::nanf("0x123");
  EXPECT_EQ(ReduceTwo<float>(ACL_FLOAT, ReduceOp::kSum, inf, 1.0f), inf);
  EXPECT_EQ(ReduceTwo<float>(ACL_FLOAT, ReduceOp::kSum, -inf, -1e38f), -inf);
  EXPECT_EQ(ReduceTwo<float>(ACL_FLOAT, ReduceOp::kSum, 3e38f, 3e38f), inf);  // overflow
  // Every NaN result is the canonical quiet NaN, whatever the inputs' payloads.
  EXPECT_EQ(BitsOf(ReduceTwo<float>(ACL_FLOAT, ReduceOp::kSum, inf, -inf)), 0x7fc00000u);
  EXPECT_EQ(BitsOf(ReduceTwo<float>(ACL_FLOAT, ReduceOp::kSum, 1.0f, -nan_payload)), 0x7fc00000u);
  EXPECT_EQ(BitsOf(ReduceTwo<float>(ACL_FLOAT, ReduceOp::kMax, nan_payload, 1.0f)), 0x7fc00000u);
  EXPECT_EQ(BitsOf(ReduceTwo<float>(ACL_FLOAT, ReduceOp::kMin, 1.0f, nan_payload)), 0x7fc00000u);
  // float16: 65504 + 65504 overflows to Inf; Inf - Inf and NaN payloads become 0x7e00.
  EXPECT_EQ(ReduceTwo<uint16_t>(ACL_FLOAT16, ReduceOp::kSum, 0x7bff, 0x7bff), 0x7c00);
  EXPECT_EQ(ReduceTwo<uint16_t>(ACL_FLOAT16, ReduceOp::kSum, 0x7c00, 0xfc00), 0x7e00);
  EXPECT_EQ(ReduceTwo<uint16_t>(ACL_FLOAT16, ReduceOp::kSum, 0xfd23, 0x3c00), 0x7e00);
  EXPECT_EQ(ReduceTwo<uint16_t>(ACL_FLOAT16, ReduceOp::kSum, 0xfc00, 0x3c00), 0xfc00);
  // bfloat16: the largest finite value doubled rounds to Inf.
  EXPECT_EQ(ReduceTwo<uint16_t>(ACL_BF16, ReduceOp::kSum, 0x7f7f, 0x7f7f), 0x7f80);
  EXPECT_EQ(ReduceTwo<uint16_t>(ACL_BF16, ReduceOp::kSum, 0x7f80, 0xff80), 0x7fc0);
}

TEST(ReduceSpecial, HalfTypesAccumulateInFloatAndRoundOnce) {
  // In float16, 2048 + 1 rounds back to 2048 at every step; a float32 accumulator keeps 2050.
  const uint16_t h2048 = 0x6800, h1 = 0x3c00, h2050 = 0x6801;
  const void* h[] = {&h2048, &h1, &h1};
  uint16_t out = 0;
  ReduceArrays(ACL_FLOAT16, ReduceOp::kSum, h, 3, &out, 1);
  EXPECT_EQ(out, h2050);
  const uint16_t b256 = 0x4380, b1 = 0x3f80, b258 = 0x4381;  // bfloat16 ulp at 256 is 2
  const void* b[] = {&b256, &b1, &b1};
  ReduceArrays(ACL_BF16, ReduceOp::kSum, b, 3, &out, 1);
  EXPECT_EQ(out, b258);
}

// ---- The scalar float16 / bfloat16 codecs of half.h, exhaustively where the domain allows.
uint32_t ExpectedWidening(uint16_t bits, Format f) {
  // A NaN keeps its payload with the quiet bit set, as the F16C instructions do.
  const double v = Decode(bits, f);
  if (!std::isnan(v)) return BitsOf(static_cast<float>(v));
  const int shift = 24 - f.digits;
  return (static_cast<uint32_t>(bits & 0x8000u) << 16) | 0x7fc00000u |
         ((bits & ((1u << (f.digits - 1)) - 1)) << shift);
}

uint16_t ExpectedNarrowing(uint32_t float_bits, Format f) {
  const double v = Decode(float_bits, kSingle);
  if (!std::isnan(v)) return static_cast<uint16_t>(Encode(Round(v, f), f));
  const int shift = 24 - f.digits;
  const uint32_t quiet = 1u << (f.digits - 2);
  return static_cast<uint16_t>(((float_bits >> 31) << 15) |
                               (((1u << f.exp_bits) - 1) << (f.digits - 1)) | quiet |
                               ((float_bits & 0x7fffffu) >> shift));
}

TEST(ReduceHalf, WideningIsExactForAllBitPatterns) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    ASSERT_EQ(BitsOf(half_internal::HalfToFloat(bits)), ExpectedWidening(bits, kHalf)) << b;
    ASSERT_EQ(BitsOf(half_internal::Bf16ToFloat(bits)), static_cast<uint32_t>(b) << 16) << b;
  }
}

TEST(ReduceHalf, NarrowingRoundsToNearestEven) {
  // Around every float16 / bfloat16 value: the value, the midpoints to its neighbours and one
  // float ulp either side of them; plus a stride through all 2^32 float patterns.
  std::vector<uint32_t> probes;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint32_t mid16 = BitsOf(static_cast<float>(Decode(b, kHalf))) + (1u << 12);
    const uint32_t mid_bf = (b << 16) + 0x8000u;
    for (int d = -1; d <= 1; ++d) {
      if (!std::isnan(Decode(b, kHalf))) probes.push_back(mid16 + d);
      probes.push_back(mid_bf + d);
    }
    probes.push_back(b << 16);
  }
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) probes.push_back(static_cast<uint32_t>(u));
  for (uint32_t p : probes) {
    float f;
    std::memcpy(&f, &p, sizeof(f));
    ASSERT_EQ(half_internal::FloatToHalf(f), ExpectedNarrowing(p, kHalf)) << std::hex << p;
    ASSERT_EQ(half_internal::FloatToBf16(f), ExpectedNarrowing(p, kBf16)) << std::hex << p;
  }
}

// ---- Every build gives the same bits (the F16C vector paths included).
TEST(ReduceIsa, BuildsAgreeBitForBitOnArbitraryBits) {
  const ReduceKernel generic = KernelForIsa(Isa::kGeneric);
  ASSERT_NE(generic, nullptr);
  std::mt19937_64 rng(42);
  for (Isa isa : SupportedIsas()) {
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        // Two inputs and three: the builds' sums have a loop of their own for two.
        for (size_t n : {2, 3}) {
          const size_t count = 4099;
          std::vector<Buffer> srcs;
          for (size_t k = 0; k < n; ++k) srcs.push_back(RandomBuffer(dtype, count, rng, true));
          const std::vector<const void*> ptrs = Pointers(srcs);
          Buffer want(dtype, count), got(dtype, count);
          generic(dtype, op, ptrs.data(), n, want.bytes.data(), count);
          KernelForIsa(isa)(dtype, op, ptrs.data(), n, got.bytes.data(), count);
          ASSERT_EQ(want.bytes, got.bytes)
              << reduce_internal::IsaName(isa) << " " << DataTypeName(dtype) << " "
              << ReduceOpName(op) << " n=" << n;
        }
      }
    }
  }
}

TEST(ReduceIsa, Float16ConversionsAreExactForAllPatternsOnEveryBuild) {
  // x + (-0.0) == x for every x, so this widens and narrows all 65536 patterns; then every
  // midpoint h + ulp(h)/2 (exact in float) must round to even.
  Buffer all(ACL_FLOAT16, 65536), neg_zero(ACL_FLOAT16, 65536);
  std::vector<Buffer> mid = {Buffer(ACL_FLOAT16, 0), Buffer(ACL_FLOAT16, 0)};
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    all.Set(b, b);
    neg_zero.Set(b, 0x8000);
    if ((b & 0x7c00) >= 0x0800 && (b & 0x7c00) != 0x7c00) {  // exponent >= -13, finite
      const double half_ulp = std::ldexp(1.0, static_cast<int>((b >> 10) & 0x1f) - 15 - 11);
      mid[0].bytes.resize(mid[0].bytes.size() + 2);
      mid[1].bytes.resize(mid[1].bytes.size() + 2);
      mid[0].Set(mid[0].Size() - 1, b);
      mid[1].Set(mid[1].Size() - 1, Encode(std::copysign(half_ulp, Decode(b, kHalf)), kHalf));
    }
  }
  std::vector<uint64_t> identity(65536);
  for (uint32_t b = 0; b <= 0xffff; ++b) identity[b] = std::isnan(Decode(b, kHalf)) ? 0x7e00 : b;
  const std::vector<uint64_t> rounded =
      ReferenceArray(ACL_FLOAT16, ReduceOp::kSum, mid, mid[0].Size());
  for (Isa isa : SupportedIsas()) {
    const std::string name = reduce_internal::IsaName(isa);
    ExpectMatches(KernelForIsa(isa), name, ACL_FLOAT16, ReduceOp::kSum, {all, neg_zero}, 65536,
                  identity);
    ExpectMatches(KernelForIsa(isa), name, ACL_FLOAT16, ReduceOp::kSum, mid, mid[0].Size(),
                  rounded);
  }
}

// The float16 / bfloat16 sums (a one-pass loop in the AVX2 and AVX-512 builds, the block path in
// the generic one) against the reference on the values where rounding and special cases live:
// zeros, Inf, quiet and signalling NaNs with payloads, subnormals, the largest finite value, and
// values one ulp apart whose float32 sums land on and beside rounding midpoints. Counts are not
// multiples of any vector width, so every build's tail runs too.
std::vector<uint64_t> SpecialHalfValues(DataType d) {
  const Format f = FormatOf(d);
  const int mant_bits = f.digits - 1;
  const uint32_t inf = ((1u << f.exp_bits) - 1) << mant_bits;
  const uint32_t sign = 1u << (mant_bits + f.exp_bits);
  std::vector<uint64_t> v = {0,
                             inf,
                             inf | 1u,
                             inf | (1u << (mant_bits - 1)) | 5u,
                             1u,
                             (1u << mant_bits) - 1,
                             1u << mant_bits,
                             inf - 1};
  for (double x : {1.0, 0.5, 1.5, 3.0, 1000.0, 0.001}) {
    const uint32_t bits = Encode(Round(x, f), f);
    v.push_back(bits);
    v.push_back(bits + 1);  // the next value up: sums with `bits` fall between neighbours
  }
  const size_t unsigned_count = v.size();
  for (size_t i = 0; i < unsigned_count; ++i) v.push_back(v[i] | sign);
  return v;
}

TEST(ReduceIsa, HalfSumsMatchReferenceOnSpecialValues) {
  std::mt19937_64 rng(99);
  for (DataType dtype : {ACL_FLOAT16, ACL_BF16}) {
    const std::vector<uint64_t> pool = SpecialHalfValues(dtype);
    for (size_t n : {2, 3, 4, 7}) {
      for (size_t count : {1, 15, 17, 31, 47, 1000, 4111}) {
        std::vector<Buffer> srcs;
        for (size_t k = 0; k < n; ++k) {
          srcs.push_back(RandomBuffer(dtype, count, rng));
          for (size_t i = 0; i < count; ++i) {
            if (rng() % 2 == 0) srcs.back().Set(i, pool[rng() % pool.size()]);
          }
        }
        const std::vector<uint64_t> expected = ReferenceArray(dtype, ReduceOp::kSum, srcs, count);
        ExpectMatches(ReduceArrays, ReduceKernelIsa(), dtype, ReduceOp::kSum, srcs, count,
                      expected);
        for (Isa isa : SupportedIsas()) {
          ExpectMatches(KernelForIsa(isa), reduce_internal::IsaName(isa), dtype, ReduceOp::kSum,
                        srcs, count, expected);
        }
      }
    }
  }
}

TEST(ReduceIsa, DispatchPicksASupportedBuild) {
  Isa isa;
  ASSERT_TRUE(reduce_internal::ParseIsa(ReduceKernelIsa(), &isa)) << ReduceKernelIsa();
  EXPECT_TRUE(reduce_internal::CpuSupportsIsa(isa));
  const char* forced = std::getenv("COLLOPS_ISA");
  if (forced == nullptr || *forced == '\0') {
    EXPECT_STREQ(ReduceKernelIsa(), reduce_internal::IsaName(reduce_internal::BestSupportedIsa()));
  }
}

// ---- Names and argument checks.
TEST(ReduceNames, ParseAndNameRoundTrip) {
  for (ReduceOp op : kOps) {
    ReduceOp parsed = ReduceOp::kSum;
    ASSERT_TRUE(ParseReduceOp(ReduceOpName(op), &parsed));
    EXPECT_EQ(parsed, op);
  }
  ReduceOp unused;
  for (const char* bad : {"", "SUM", "avg", "sum ", "mean"})
    EXPECT_FALSE(ParseReduceOp(bad, &unused));
  for (DataType d : kDtypes) EXPECT_TRUE(IsReducibleDtype(d)) << DataTypeName(d);
  for (DataType d : {ACL_BOOL, ACL_DT_UNDEFINED}) EXPECT_FALSE(IsReducibleDtype(d));
}

Status StatusOf(DataType dtype, size_t n, const void* const* srcs, void* dst, size_t count) {
  try {
    ReduceArrays(dtype, ReduceOp::kSum, srcs, n, dst, count);
  } catch (const Error& e) {
    return e.status();
  }
  return NO_ERROR;
}

TEST(ReduceArgs, RejectsBadDtypeZeroInputsAndPartialOverlap) {
  int64_t a[4] = {}, b[4] = {};
  const void* srcs[] = {a, b};
  for (DataType d : {ACL_BOOL, ACL_DT_UNDEFINED}) {
    EXPECT_EQ(StatusOf(d, 2, srcs, a, 4), ERROR_INVALID_TENSOR_DTYPE) << DataTypeName(d);
    EXPECT_EQ(StatusOf(d, 2, srcs, a, 0), ERROR_INVALID_TENSOR_DTYPE) << DataTypeName(d);
  }
  try {
    ReduceArrays(ACL_BOOL, ReduceOp::kSum, srcs, 2, a, 4);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(DataTypeName(ACL_BOOL)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(ReducibleDtypesText()), std::string::npos) << e.what();
  }
  EXPECT_EQ(StatusOf(ACL_INT64, 0, srcs, a, 4), ERROR_INTERNAL_ERROR);
  EXPECT_EQ(StatusOf(ACL_INT32, 2, srcs, reinterpret_cast<int32_t*>(a) + 1, 4),
            ERROR_INTERNAL_ERROR);
  EXPECT_EQ(StatusOf(ACL_INT64, 2, srcs, b, 4), NO_ERROR);
  EXPECT_EQ(StatusOf(ACL_INT64, 2, nullptr, nullptr, 0), NO_ERROR);  // count 0 touches nothing
}

}  // namespace
}  // namespace collops

// ---- float16 / bfloat16 <-> float32 conversions (ConvertToFloat32, ConvertFromFloat32).
namespace collops {
namespace reduce_internal {
namespace {

std::pair<ToFloat32Kernel, FromFloat32Kernel> ConvertersFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return {&avx2::ToFloat32, &avx2::FromFloat32};
    case Isa::kAvx512:
      return {&avx512::ToFloat32, &avx512::FromFloat32};
    case Isa::kGeneric:
      break;
  }
  return {&generic::ToFloat32, &generic::FromFloat32};
}

TEST(ReduceConvert, EveryBuildConvertsAsTheScalarFunctions) {
  std::vector<uint16_t> all(65536 + 7);  // + a tail shorter than any vector
  for (size_t b = 0; b < all.size(); ++b) all[b] = static_cast<uint16_t>(b);
  std::mt19937_64 rng(7);
  std::vector<float> floats(100003);
  for (auto& f : floats) {
    const auto bits = static_cast<uint32_t>(rng());
    std::memcpy(&f, &bits, sizeof(f));
  }
  for (Isa isa : SupportedIsas()) {
    const auto [to, from] = ConvertersFor(isa);
    for (DataType dtype : {ACL_FLOAT16, ACL_BF16}) {
      const std::string what = Concat(IsaName(isa), " ", DataTypeName(dtype));
      std::vector<float> wide(all.size());
      to(dtype, all.data(), wide.data(), all.size());
      for (size_t b = 0; b < all.size(); ++b) {
        const float want = dtype == ACL_FLOAT16 ? half_internal::HalfToFloat(all[b])
                                                : half_internal::Bf16ToFloat(all[b]);
        ASSERT_EQ(BitsOf(wide[b]), BitsOf(want)) << what << " widening " << b;
      }
      std::vector<uint16_t> narrow(floats.size());
      from(floats.data(), dtype, narrow.data(), floats.size());
      for (size_t i = 0; i < floats.size(); ++i) {
        const uint16_t want = dtype == ACL_FLOAT16 ? half_internal::FloatToHalf(floats[i])
                                                   : half_internal::FloatToBf16(floats[i]);
        ASSERT_EQ(narrow[i], want) << what << " narrowing " << std::hex << BitsOf(floats[i]);
      }
    }
  }
}

TEST(ReduceConvert, PublicEntriesCheckDtypeAndOverlap) {
  std::vector<float> f(8, 1.5f);
  std::vector<uint16_t> h(8);
  ConvertFromFloat32(f.data(), ACL_BF16, h.data(), 8);
  EXPECT_EQ(h[3], 0x3fc0);
  std::vector<float> back(8);
  ConvertToFloat32(ACL_BF16, h.data(), back.data(), 8);
  EXPECT_EQ(back, f);
  ConvertToFloat32(ACL_FLOAT, f.data(), f.data(), 8);  // float32 in place: nothing to do
  EXPECT_THROW(ConvertToFloat32(ACL_INT8, h.data(), back.data(), 8), Error);
  try {
    // bfloat16 widened into memory that starts inside its own source.
    ConvertToFloat32(ACL_BF16, h.data(), reinterpret_cast<float*>(h.data() + 2), 4);
    ADD_FAILURE() << "overlap accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INTERNAL_ERROR);
  }
}

}  // namespace
}  // namespace reduce_internal
}  // namespace collops
