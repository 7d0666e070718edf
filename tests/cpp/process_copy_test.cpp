// CopyBytes and StreamBytes (core/comm/shm/process_copy.h) must copy exactly what memcpy copies at
// every source/destination distance, including the 1-63 byte distances (mod 4 KiB) at which
// CopyBytes takes its own vector loop on AMD (tested by itself too), and at sizes around their 2
// KiB, 4 KiB and 64-byte boundaries and StreamBytes' 16-byte destination alignment.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/comm/shm/process_copy.h"

namespace collops {
namespace {

class Pages {
 public:
  explicit Pages(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~Pages() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  uint8_t* Data() const { return base_; }

 private:
  size_t bytes_;
  uint8_t* base_;
};

using CopyFunction = void (*)(void*, const void*, size_t);

class ProcessCopy : public ::testing::TestWithParam<CopyFunction> {};

TEST_P(ProcessCopy, CopiesExactlyAtEveryDistanceAndSize) {
  const CopyFunction copy = GetParam();
  constexpr size_t kMax = 300'000;
  Pages src(kMax + 8192), dst(kMax + 8192);
  ASSERT_NE(src.Data(), nullptr);
  ASSERT_NE(dst.Data(), nullptr);
  for (size_t i = 0; i < kMax + 8192; ++i) src.Data()[i] = static_cast<uint8_t>(i * 131 + 7);
  const size_t sizes[] = {0,         1,         63,   2047,  2048,       2049,
                          4096 + 15, 4096 + 17, 8191, 65536, 262144 + 5, kMax};
  const size_t distances[] = {0, 1, 15, 16, 31, 48, 63, 64, 65, 2048, 4095};
  for (const size_t srcOffset : {size_t{0}, size_t{16}, size_t{4000}}) {
    for (const size_t distance : distances) {
      const size_t dstOffset = (srcOffset + distance) % 4096;
      for (const size_t n : sizes) {
        uint8_t* d = dst.Data() + dstOffset;
        const uint8_t* s = src.Data() + srcOffset;
        std::memset(dst.Data(), 0xEE, kMax + 8192);
        copy(d, s, n);
        ASSERT_EQ(std::memcmp(d, s, n), 0)
            << "n=" << n << " src%4096=" << srcOffset << " dst%4096=" << dstOffset;
        // Nothing outside [d, d + n) is touched.
        for (uint8_t* p = dst.Data(); p < d; ++p) ASSERT_EQ(*p, 0xEE) << "before, n=" << n;
        for (const uint8_t* p = d + n; p < dst.Data() + kMax + 8192; p += 97) {
          ASSERT_EQ(*p, 0xEE) << "after, n=" << n << " distance " << distance;
        }
        ASSERT_EQ(d[n], 0xEE) << "first byte after, n=" << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Copy, ProcessCopy,
                         ::testing::Values(&shm::CopyBytes, &shm::CopyBytesByVectors,
                                           &shm::StreamBytes),
                         [](const ::testing::TestParamInfo<CopyFunction>& info) {
                           if (info.param == &shm::CopyBytes) return "CopyBytes";
                           return info.param == &shm::StreamBytes ? "StreamBytes"
                                                                  : "CopyBytesByVectors";
                         });

}  // namespace
}  // namespace collops
