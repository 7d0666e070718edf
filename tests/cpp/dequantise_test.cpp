// Unit tests of SumDequantiseInt8 (collops/reduce.h), the kernel of quantised AllReduce, on every
// instruction-set build this CPU runs: bit for bit against the documented float32 steps computed
// here in plain scalar code with the test harness's own float16/bfloat16 codecs, at counts and
// channel offsets around every block and chunk edge, and with special scales (Inf, NaN, values
// whose products overflow float16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collops/reduce.h"
#include "core/src/reduce/reduce_dispatch.h"
#include "op_harness.h"

namespace collops {
namespace {

using reduce_internal::DequantiseKernel;
using reduce_internal::DequantiseKernelForIsa;
using reduce_internal::Isa;

uint16_t HalfBits(double value) {
  uint16_t bits;
  testing::DoubleToElement(ACL_FLOAT16, value, &bits);
  return bits;
}

/// The expected bytes of dst, from the formula's float32 steps.
std::vector<uint8_t> Reference(const std::vector<std::vector<int8_t>>& srcs, size_t count,
                               int64_t first, const std::vector<uint16_t>& scale, int64_t channels,
                               uint16_t offset, DataType dtype) {
  const size_t size = DataTypeSize(dtype);
  std::vector<uint8_t> out(count * size);
  const float offsetTimesN = static_cast<float>(srcs.size()) *
                             static_cast<float>(testing::ElementToDouble(ACL_FLOAT16, &offset));
  for (size_t i = 0; i < count; ++i) {
    int32_t sum = 0;
    for (const auto& s : srcs) sum += s[i];
    const uint16_t scaleBits = scale[channels == 0 ? 0 : (first + i) % channels];
    volatile float t = static_cast<float>(sum) + offsetTimesN;
    const float y = t * static_cast<float>(testing::ElementToDouble(ACL_FLOAT16, &scaleBits));
    testing::DoubleToElement(dtype, y, out.data() + i * size);
  }
  return out;
}

std::vector<std::pair<std::string, DequantiseKernel>> Kernels() {
  std::vector<std::pair<std::string, DequantiseKernel>> kernels;
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (DequantiseKernel k = DequantiseKernelForIsa(isa)) {
      kernels.emplace_back(reduce_internal::IsaName(isa), k);
    }
  }
  return kernels;
}

void ExpectAllBuildsMatch(const std::vector<std::vector<int8_t>>& srcs, size_t count, int64_t first,
                          const std::vector<uint16_t>& scale, int64_t channels, uint16_t offset,
                          DataType dtype, const std::string& what) {
  const std::vector<uint8_t> expected =
      Reference(srcs, count, first, scale, channels, offset, dtype);
  std::vector<const int8_t*> ptrs;
  for (const auto& s : srcs) ptrs.push_back(s.data());
  QuantScale quant;
  quant.scale = scale.data();
  quant.channels = channels;
  quant.offset = offset;
  const size_t size = DataTypeSize(dtype);
  auto check = [&](const std::string& who, auto&& run) {
    std::vector<uint8_t> got((count + 8) * size, 0xa5);  // 8 guard elements
    run(got.data());
    // One comparison of the whole result (one assertion per element would be most of these
    // tests' time); only when it differs, a search for the first element that does, to name it.
    if (count > 0 && std::memcmp(got.data(), expected.data(), count * size) != 0) {
      size_t i = 0;
      while (std::memcmp(got.data() + i * size, expected.data() + i * size, size) == 0) ++i;
      FAIL() << who << " " << what << ": element " << i << " is "
             << testing::ElementToDouble(dtype, got.data() + i * size) << ", expected "
             << testing::ElementToDouble(dtype, expected.data() + i * size);
    }
    const auto guard = std::find_if(got.begin() + count * size, got.end(),
                                    [](uint8_t byte) { return byte != 0xa5; });
    if (guard != got.end()) {
      FAIL() << who << " " << what << " wrote past dst[" << count << "]";
    }
  };
  check("SumDequantiseInt8", [&](void* dst) {
    SumDequantiseInt8(ptrs.data(), ptrs.size(), count, first, quant, dtype, dst);
  });
  check("SumDequantiseInt8Streaming", [&](void* dst) {
    SumDequantiseInt8Streaming(ptrs.data(), ptrs.size(), count, first, quant, dtype, dst);
  });
  for (const auto& [name, kernel] : Kernels()) {
    for (bool stream : {false, true}) {
      check(name + (stream ? " streaming" : ""), [&](void* dst) {
        kernel(ptrs.data(), ptrs.size(), count, first, quant, dtype, dst, stream);
      });
    }
  }
}

class DequantiseGolden : public ::testing::TestWithParam<std::tuple<DataType, size_t>> {};

TEST_P(DequantiseGolden, MatchesFloat32StepsOnEveryBuild) {
  const auto [dtype, n] = GetParam();
  std::mt19937_64 rng(dtype * 100 + n);
  for (int64_t channels : {int64_t{0}, int64_t{16}, int64_t{48}, int64_t{1024}}) {
    std::vector<uint16_t> scale(channels == 0 ? 1 : channels);
    for (auto& s : scale) s = HalfBits(std::ldexp(static_cast<double>(1 + rng() % 2047), -14));
    for (size_t count : {0, 1, 15, 16, 17, 511, 512, 513, 1040, 4099}) {
      for (int64_t first : {int64_t{0}, int64_t{5}, int64_t{1000}}) {
        std::vector<std::vector<int8_t>> srcs(n, std::vector<int8_t>(count));
        for (auto& s : srcs) {
          for (auto& v : s) v = static_cast<int8_t>(rng() % 256);
        }
        const uint16_t offset =
            HalfBits(static_cast<double>(static_cast<int>(rng() % 201) - 100) / 8);
        ExpectAllBuildsMatch(srcs, count, first, scale, channels, offset, dtype,
                             ::testing::PrintToString(std::make_tuple(channels, count, first)));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DequantiseGolden,
                         ::testing::Combine(::testing::Values(ACL_FLOAT16, ACL_BF16, ACL_FLOAT),
                                            ::testing::Values(1, 2, 3, 7)),
                         [](const auto& info) {
                           return Concat(testing::DtypeTestName(std::get<0>(info.param)), "_n",
                                         std::get<1>(info.param));
                         });

TEST(DequantiseGolden, SpecialScalesGiveTheSameBitsEverywhere) {
  const double inf = std::numeric_limits<double>::infinity();
  // Inf, NaN, the largest float16 (products overflow float16 but not float32), a subnormal.
  const std::vector<uint16_t> scale = {
      HalfBits(inf),  HalfBits(std::nan("")), HalfBits(65504.0), HalfBits(std::ldexp(1.0, -24)),
      HalfBits(-inf), HalfBits(0.0),          HalfBits(1.0),     HalfBits(-2.0),
      HalfBits(0.5),  HalfBits(3.0),          HalfBits(0.25),    HalfBits(1.5),
      HalfBits(-1.0), HalfBits(7.0),          HalfBits(9.0),     HalfBits(0.75)};
  std::vector<std::vector<int8_t>> srcs(3, std::vector<int8_t>(64));
  for (size_t i = 0; i < 64; ++i) {
    srcs[0][i] = static_cast<int8_t>(127 - i);
    srcs[1][i] = static_cast<int8_t>(-128 + i);
    srcs[2][i] = static_cast<int8_t>(i % 3 == 0 ? 0 : 100);
  }
  for (DataType dtype : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT}) {
    ExpectAllBuildsMatch(srcs, 64, 0, scale, 16, HalfBits(0.0), dtype, "special scales");
    ExpectAllBuildsMatch(srcs, 64, 3, scale, 16, HalfBits(-0.5), dtype, "special scales, shifted");
  }
}

// The vector builds add up to 256 sources in int16 lanes and more in int32 ones: at 256 the
// extreme sums (-128·256 = -32768, 127·256) still fit int16; at 257 they would not, and the
// results must stay exact on both sides of that edge.
TEST(DequantiseGolden, ExtremeSumsAroundTheInt16EdgeAreExact) {
  const std::vector<uint16_t> scale = {HalfBits(1.0)};
  for (size_t n : {255, 256, 257, 300}) {
    for (int8_t extreme : {int8_t{-128}, int8_t{127}}) {
      // Every element at the extreme, except a few that vary the sum near it.
      std::vector<std::vector<int8_t>> srcs(n, std::vector<int8_t>(131, extreme));
      for (size_t i = 0; i < 131; i += 7) srcs[i % n][i] = static_cast<int8_t>(i);
      for (DataType dtype : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT}) {
        ExpectAllBuildsMatch(srcs, 131, 0, scale, 0, HalfBits(0.0), dtype,
                             Concat(n, " sources of ", static_cast<int>(extreme)));
      }
    }
  }
}

// The vector builds add an integer n·offset to the int16 sums (or leave a zero one out) when every
// possible sum + n·offset fits int16: sources all at -128 or all at 127, with n·offset at that
// edge (31 sources: 929 · 31 = 32767 - 128 · 31), one past it, and where an int16 sum would wrap
// (931 · 31 + 127 · 31 > 32767); with zeros, a negative zero, non-integers, the largest float16,
// Inf and NaN around them.
TEST(DequantiseGolden, OffsetsAtTheInt16EdgeGiveTheSameBitsEverywhere) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> offsets = {0.0,    -0.0,    1.0,      -1.0,  0.5,    -0.5,
                                       0.25,   0.3,     89.0,     90.0,  91.0,   -91.0,
                                       929.0,  -929.0,  930.0,    931.0, -931.0, 1024.0,
                                       8192.0, 65504.0, -65504.0, inf,   -inf,   std::nan("")};
  std::vector<uint16_t> scale(48);
  for (size_t c = 0; c < scale.size(); ++c) scale[c] = HalfBits(std::ldexp(1.0 + c, -5));
  const size_t count = 131;  // two vectors of 64 and a tail of 3 on AVX-512
  for (size_t n : {1, 2, 3, 4, 7, 31, 151, 255, 256, 257}) {
    // Element i: every source at -128 (i % 3 == 0), every source at 127 (i % 3 == 1), or a mix.
    std::vector<std::vector<int8_t>> srcs(n, std::vector<int8_t>(count));
    for (size_t k = 0; k < n; ++k) {
      for (size_t i = 0; i < count; ++i) {
        srcs[k][i] = i % 3 == 0   ? int8_t{-128}
                     : i % 3 == 1 ? int8_t{127}
                                  : static_cast<int8_t>((k * 37 + i * 11) % 256);
      }
    }
    for (double offset : offsets) {
      for (int64_t channels : {int64_t{0}, int64_t{48}}) {
        for (DataType dtype : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT}) {
          ExpectAllBuildsMatch(srcs, count, 5, scale, channels, HalfBits(offset), dtype,
                               Concat(n, " sources, offset ", offset, ", channels ", channels));
        }
      }
    }
  }
}

// Sources whose element sums are every sum n int8 inputs can make, each once, from -128·n up
// (255·n + 1 elements); for n = 2 instead every pair of int8 values, each once (65536 elements).
std::vector<std::vector<int8_t>> EverySum(size_t n) {
  if (n == 2) {
    std::vector<std::vector<int8_t>> srcs(2, std::vector<int8_t>(65536));
    for (size_t i = 0; i < 65536; ++i) {
      srcs[0][i] = static_cast<int8_t>(i & 0xff);
      srcs[1][i] = static_cast<int8_t>(i >> 8);
    }
    return srcs;
  }
  const size_t count = 255 * n + 1;
  std::vector<std::vector<int8_t>> srcs(n, std::vector<int8_t>(count));
  for (size_t i = 0; i < count; ++i) {
    size_t rest = i;  // the sum is -128·n + i: spread i over the sources, 255 at most each
    for (size_t k = 0; k < n; ++k) {
      const size_t add = std::min<size_t>(rest, 255);
      srcs[k][i] = static_cast<int8_t>(-128 + static_cast<int>(add));
      rest -= add;
    }
  }
  return srcs;
}

// With an integer n·offset and one finite scale > 0 the vector builds skip the int32 conversion
// (the biased int16 sum read as the low half of a float32, then one fma): every sum n inputs can
// make, every pair of int8 values at n = 2, with zero, integer and fractional offsets and scales
// from the smallest float16 subnormal to the largest float16, gives the float32 steps' bits.
TEST(DequantiseGolden, EverySumGivesTheSameBitsWithOnePositiveScale) {
  const std::vector<double> scales = {std::ldexp(1.0, -24),
                                      std::ldexp(1023.0, -24),
                                      std::ldexp(1.0, -14),
                                      std::ldexp(1365.0, -12),
                                      1.0,
                                      3.0,
                                      std::ldexp(2047.0, 5),
                                      65504.0};
  const std::vector<double> offsets = {0.0, -0.0, 1.0, -3.5, 0.3, 100.25, -16.0};
  for (size_t n : {1, 2, 3, 7, 128}) {
    const std::vector<std::vector<int8_t>> srcs = EverySum(n);
    const size_t count = srcs[0].size();
    for (double scale : scales) {
      for (double offset : offsets) {
        for (DataType dtype : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT}) {
          ExpectAllBuildsMatch(srcs, count, 0, {HalfBits(scale)}, 0, HalfBits(offset), dtype,
                               Concat(n, " sources, scale ", scale, ", offset ", offset));
        }
      }
    }
  }
  // The largest counts of sources, where the int16 sums reach -32768 and 32767 (256) or no
  // longer fit (257, int32 sums): fewer scales and offsets, as each call adds 2^16 · n inputs.
  for (size_t n : {255, 256, 257}) {
    const std::vector<std::vector<int8_t>> srcs = EverySum(n);
    for (double scale : {std::ldexp(1.0, -24), 65504.0}) {
      for (double offset : {0.0, 0.5, 0.3}) {
        ExpectAllBuildsMatch(srcs, srcs[0].size(), 0, {HalfBits(scale)}, 0, HalfBits(offset),
                             ACL_FLOAT16,
                             Concat(n, " sources, scale ", scale, ", offset ", offset));
      }
    }
  }
}

// That shortcut rounds a zero sum to +0 where t·scale gives -0 (scale < 0 or -0), and Inf or NaN
// scales make no number of -C·scale: those scales must keep the conversion to int32, with zero
// sums, integer and zero offsets included, and -0 results among the expected ones. (With an
// infinite scale the elements whose t is 0 are left out: 0·Inf is the CPU's default NaN, whose
// sign bit the reference's codec does not produce.)
TEST(DequantiseGolden, NonPositiveAndNonFiniteScalesGiveTheSameBits) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> scales = {-0.0,     0.0, -1.0, -std::ldexp(1.0, -24),
                                      -65504.0, inf, -inf, std::nan("")};
  for (size_t n : {1, 2, 3}) {
    for (double scale : scales) {
      for (double offset : {0.0, -0.0, 2.0, 0.3}) {
        std::vector<std::vector<int8_t>> srcs = EverySum(n);
        if (std::isinf(scale)) {
          std::vector<std::vector<int8_t>> kept(n);
          for (size_t i = 0; i < srcs[0].size(); ++i) {
            int sum = 0;
            for (const auto& src : srcs) sum += src[i];
            if (sum + static_cast<double>(n) * offset == 0.0) continue;
            for (size_t k = 0; k < n; ++k) kept[k].push_back(srcs[k][i]);
          }
          srcs = kept;
        }
        const size_t count = srcs[0].size();
        if (scale == 0.0 || (scale < 0.0 && !std::isinf(scale) && offset != 0.3)) {
          // The test means something only if some zero sum's result is -0 (0·-x, or x·-0).
          const std::vector<uint8_t> expected =
              Reference(srcs, count, 0, {HalfBits(scale)}, 0, HalfBits(offset), ACL_FLOAT);
          bool negativeZero = false;
          for (size_t i = 0; i < count && !negativeZero; ++i) {
            float y;
            std::memcpy(&y, expected.data() + i * sizeof(float), sizeof y);
            negativeZero = y == 0.0f && std::signbit(y);
          }
          ASSERT_TRUE(negativeZero) << "scale " << scale << ", offset " << offset;
        }
        for (DataType dtype : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT}) {
          ExpectAllBuildsMatch(srcs, count, 0, {HalfBits(scale)}, 0, HalfBits(offset), dtype,
                               Concat(n, " sources, scale ", scale, ", offset ", offset));
        }
      }
    }
  }
}

// The shortcut unpacks int16 lanes within 128-bit lanes and reorders them first: with one source
// of 0, 1, ..., every element must come out where it went in (any other order fails here).
TEST(DequantiseGolden, ElementsKeepTheirPlaces) {
  std::vector<std::vector<int8_t>> srcs(1, std::vector<int8_t>(256));
  for (size_t i = 0; i < 256; ++i) srcs[0][i] = static_cast<int8_t>(i);
  ExpectAllBuildsMatch(srcs, 256, 0, {HalfBits(1.0)}, 0, HalfBits(0.0), ACL_FLOAT, "0, 1, ...");
}

// The streaming kernels store whole vectors non-temporally only from dst's first vector boundary
// on, and the elements before it and after the last whole vector by the ordinary path: at every
// element-aligned dst offset within a cache line, with odd tails, every build's streaming result is
// the reference's bits, and nothing around dst is touched.
TEST(DequantiseStreaming, EveryDstAlignmentGivesTheReferenceBits) {
  std::mt19937_64 rng(7);
  std::vector<uint16_t> scale(48);
  for (auto& s : scale) s = HalfBits(std::ldexp(static_cast<double>(1 + rng() % 2047), -14));
  const size_t count = 200 + 13;  // several vectors and unrolled steps on every build, odd tail
  for (size_t n : {2, 3, 4, 7}) {
    std::vector<std::vector<int8_t>> srcs(n, std::vector<int8_t>(count));
    for (auto& src : srcs) {
      for (auto& v : src) v = static_cast<int8_t>(rng() % 256);
    }
    std::vector<const int8_t*> ptrs;
    for (const auto& src : srcs) ptrs.push_back(src.data());
    for (int64_t channels : {int64_t{0}, int64_t{48}}) {
      QuantScale quant;
      quant.scale = scale.data();
      quant.channels = channels;
      quant.offset = HalfBits(-1.5);
      for (DataType dtype : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT}) {
        const size_t size = DataTypeSize(dtype);
        const std::vector<uint8_t> expected =
            Reference(srcs, count, 3, scale, channels, quant.offset, dtype);
        for (const auto& [name, kernel] : Kernels()) {
          for (size_t offset = 0; offset < 64; offset += size) {
            // A 64-byte-aligned buffer with dst `offset` bytes into it and guards around.
            std::vector<uint8_t> buffer(count * size + 192, 0xa5);
            const size_t pad = (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
            uint8_t* dst = buffer.data() + pad + 64 + offset;
            kernel(ptrs.data(), n, count, 3, quant, dtype, dst, true);
            ASSERT_EQ(std::memcmp(dst, expected.data(), count * size), 0)
                << name << " streaming, " << n << " sources, channels " << channels << ", "
                << DataTypeName(dtype) << ", dst offset " << offset;
            for (uint8_t* p = buffer.data(); p < dst; ++p) ASSERT_EQ(*p, 0xa5) << name;
            for (uint8_t* p = dst + count * size; p < buffer.data() + buffer.size(); ++p) {
              ASSERT_EQ(*p, 0xa5) << name << " wrote past dst, offset " << offset;
            }
          }
        }
      }
    }
  }
}

TEST(DequantiseErrors, RejectsOtherOutputDtypes) {
  const int8_t x[16] = {};
  const int8_t* srcs[] = {x};
  const uint16_t scale = HalfBits(1.0);
  QuantScale quant;
  quant.scale = &scale;
  int32_t out[16];
  try {
    SumDequantiseInt8(srcs, 1, 16, 0, quant, ACL_INT32, out);
    ADD_FAILURE() << "int32 output was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ERROR_INVALID_TENSOR_DTYPE);
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collops
