#include "core/comm/shm/process_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif

namespace collops {
namespace shm {
namespace {

#if defined(__x86_64__) || defined(__i386__)
/// Copies the whole 64-byte blocks of [src, src + bytes) with SSE2 (the x86-64 baseline, as fast as
/// AVX2 for a copy), with streaming stores when kStream (`dst` then 16-byte aligned), and returns
/// how many bytes it copied.
template <bool kStream>
size_t CopyBlocks(uint8_t* d, const uint8_t* s, size_t bytes) {
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    __m128i v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i) + k);
    for (int k = 0; k < 4; ++k) {
      auto* to = reinterpret_cast<__m128i*>(d + i) + k;
      if constexpr (kStream) {
        _mm_stream_si128(to, v[k]);
      } else {
        _mm_storeu_si128(to, v[k]);
      }
    }
  }
  return i;
}
#endif

/// Whether this CPU's `rep movsb` has the short-distance cliff. AMD Zen's does; Intel's does not,
/// and there `rep movsb` (fast strings: whole-line stores without reading the line first) copies
/// L2-sized blocks faster than any vector loop at every distance, so the loop would be the slow
/// path there.
bool RepMovsbHasShortDistanceCliff() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
#else
  return false;
#endif
}

/// Destination-after-source distances (mod 4 KiB) that put glibc's rep movsb on its slow path.
bool SlowForMemcpy(const void* dst, const void* src) {
  const uintptr_t distance =
      (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
  return distance != 0 && distance < 64 && RepMovsbHasShortDistanceCliff();
}

}  // namespace

void CopyBytesByVectors(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  size_t i = 0;
#if defined(__x86_64__) || defined(__i386__)
  i = CopyBlocks<false>(d, s, bytes);
#endif
  std::memcpy(d + i, s + i, bytes - i);
}

void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (bytes >= 2048 && SlowForMemcpy(dst, src)) return CopyBytesByVectors(dst, src, bytes);
  std::memcpy(dst, src, bytes);
}

void StreamBytes(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (bytes < head + 4096) return CopyBytes(dst, src, bytes);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const size_t i = CopyBlocks<true>(d, s, bytes);
  _mm_sfence();
  std::memcpy(d + i, s + i, bytes - i);
#else
  CopyBytes(dst, src, bytes);
#endif
}

}  // namespace shm
}  // namespace collops
