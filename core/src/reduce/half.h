// float16 and bfloat16 <-> float32 conversions for the reduction kernels.
//
// Every function lives in an anonymous namespace on purpose: this header is compiled once per
// instruction set (reduce_generic.cpp, reduce_avx2.cpp, reduce_avx512.cpp) and the block
// converters differ between those builds. With external linkage the linker would keep one copy
// of each inline function, possibly the AVX-512 one, and the generic path would crash on older
// CPUs. Internal linkage gives each translation unit its own copy.
//
// Scalar and vector paths produce identical bits for all inputs, which the F16C instructions
// define as: round to nearest even, overflow to Inf, subnormals kept (no flush to zero), and a NaN
// stays a NaN with its quiet bit set and its payload shifted (not replaced).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace collops {
namespace half_internal {
namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// The conversions compute every case and pick one with bit masks rather than `?:`, so that the
// block loops vectorise in builds without conversion instructions: with a `?:` GCC sinks the float
// operation into one branch and then may not if-convert it back (-ftrapping-math).
inline uint32_t Select(bool condition, uint32_t if_true, uint32_t if_false) {
  const uint32_t mask = 0u - static_cast<uint32_t>(condition);
  return (if_true & mask) | (if_false & ~mask);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  const uint32_t normal = (em << 13) + (static_cast<uint32_t>(127 - 15) << 23);
  const uint32_t quiet = Select(em > 0x7c00u, 0x00400000u, 0u);
  const uint32_t special = (em << 13) | 0x7f800000u | quiet;
  // A subnormal (or zero) is em * 2^-24; em < 2^10 so the float product is exact.
  const uint32_t subnormal = FloatBits(static_cast<float>(em) * 5.9604644775390625e-8f);
  const uint32_t magnitude =
      Select(em >= 0x7c00u, special, Select(em >= 0x0400u, normal, subnormal));
  return BitsFloat(sign | magnitude);
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t bits = FloatBits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t a = bits & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  // Rebias the exponent, then round the 13 dropped bits to nearest even; a carry out of the
  // mantissa correctly bumps the exponent, up to Inf for 65520 <= |f| < 65536.
  const uint32_t rebiased = a - (static_cast<uint32_t>(127 - 15) << 23);
  const uint32_t normal = (rebiased + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14 the result is subnormal: adding 0.5f leaves the value's 2^-24 multiples in the low
  // mantissa bits, rounded to nearest even by the float adder itself.
  const uint32_t subnormal = FloatBits(BitsFloat(a) + 0.5f) - 0x3f000000u;
  uint32_t magnitude = Select(a < 0x38800000u, subnormal, normal);
  magnitude = Select(a >= 0x47800000u, 0x7c00u, magnitude);
  magnitude = Select(a > 0x7f800000u, nan, magnitude);
  return static_cast<uint16_t>(sign | magnitude);
}

inline float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBf16(float f) {
  const uint32_t bits = FloatBits(f);
  // Round to nearest even on the dropped 16 bits; the carry turns the largest finite values into
  // Inf. A NaN must not round (it could become Inf), so it is truncated and made quiet.
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>(Select((bits & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

// The block converters take the element count as a template type so that callers can pass a
// std::integral_constant: GCC's -O2 vectoriser only takes loops whose trip count is a known
// multiple of the vector width. The AVX-512 build uses the 256-bit F16C instructions as well
// (GCC 12's 512-bit conversion intrinsics trip -Wmaybe-uninitialized, and memory bounds the
// reduction long before conversion width does).
template <class Count>
inline void HalfToFloatBlock(const uint16_t* src, float* __restrict dst, Count m) {
  size_t i = 0;
#if defined(__F16C__)
  for (const size_t full = m / 8 * 8; i < full; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < m; ++i) dst[i] = HalfToFloat(src[i]);
}

template <class Count>
inline void FloatToHalfBlock(const float* __restrict src, uint16_t* dst, Count m) {
  size_t i = 0;
#if defined(__F16C__)
  for (const size_t full = m / 8 * 8; i < full; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < m; ++i) dst[i] = FloatToHalf(src[i]);
}

// bfloat16 needs only integer shifts and adds; GCC vectorises the scalar loops, but widening and
// narrowing 16 <-> 32 bit lanes comes out slow, so the AVX2 builds spell it out.
template <class Count>
inline void Bf16ToFloatBlock(const uint16_t* src, float* __restrict dst, Count m) {
  size_t i = 0;
#if defined(__AVX2__)
  for (const size_t full = m / 8 * 8; i < full; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bits);
  }
#endif
  for (; i < m; ++i) dst[i] = Bf16ToFloat(src[i]);
}

template <class Count>
inline void FloatToBf16Block(const float* __restrict src, uint16_t* dst, Count m) {
  size_t i = 0;
#if defined(__AVX2__)
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i round = _mm256_set1_epi32(0x7fff);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  for (const size_t full = m / 16 * 16; i < full; i += 16) {
    __m256i half[2];
    for (int j = 0; j < 2; ++j) {  // the same steps as FloatToBf16
      const __m256 f = _mm256_loadu_ps(src + i + 8 * j);
      const __m256i bits = _mm256_castps_si256(f);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
      const __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, round), lsb), 16);
      const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet);
      const __m256 is_nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
      half[j] = _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(is_nan));
    }
    // packus works within 128-bit lanes: restore element order across them.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(half[0], half[1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
#endif
  for (; i < m; ++i) dst[i] = FloatToBf16(src[i]);
}

}  // namespace
}  // namespace half_internal
}  // namespace collops
