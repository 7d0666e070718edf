// ReduceArraysStreaming (collops/reduce.h): the same bits as ReduceArrays on every kernel build,
// whatever dst's alignment (the streamed vectors need an aligned address, so the elements before
// the first boundary and after the last whole vector take the block path), with arbitrary bit
// patterns (NaN payloads, Inf, subnormals), at 1, 2, 3 and 7 sources; nothing written outside
// dst; and ReduceArrays' argument errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collops/reduce.h"
#include "collops/status.h"
#include "core/src/reduce/reduce_dispatch.h"

namespace collops {
namespace {

using reduce_internal::Isa;
using reduce_internal::KernelForIsa;
using reduce_internal::ReduceKernel;
using reduce_internal::StreamingKernelForIsa;

constexpr DataType kStreamedDtypes[] = {ACL_FLOAT, ACL_BF16, ACL_FLOAT16};
constexpr size_t kGuardBytes = 128;  // on both sides of dst: no kernel may touch them

std::vector<uint8_t> RandomBytes(size_t bytes, std::mt19937_64& rng) {
  std::vector<uint8_t> b(bytes);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

/// Runs `kernel` into dst at `offset` bytes past a 64-byte boundary inside a guarded buffer and
/// returns the whole buffer (guards included).
std::vector<uint8_t> RunAt(ReduceKernel kernel, DataType dtype, ReduceOp op,
                           const std::vector<const void*>& srcs, size_t count, size_t offset) {
  const size_t bytes = count * DataTypeSize(dtype);
  std::vector<uint8_t> buffer(kGuardBytes + 64 + offset + bytes + kGuardBytes, 0xA5);
  uint8_t* base = buffer.data() + kGuardBytes;
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  kernel(dtype, op, srcs.data(), srcs.size(), base + offset, count);
  // Re-based so buffers of two runs compare whatever the allocation's own alignment was.
  const size_t from = static_cast<size_t>(base - buffer.data()) - kGuardBytes;
  return std::vector<uint8_t>(buffer.begin() + from,
                              buffer.begin() + from + kGuardBytes + offset + bytes + kGuardBytes);
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (StreamingKernelForIsa(isa) != nullptr) isas.push_back(isa);
  }
  return isas;
}

TEST(ReduceStreaming, SameBitsAsTheBlockPathOnEveryBuildAndAlignment) {
  const ReduceKernel reference = KernelForIsa(Isa::kGeneric);
  ASSERT_NE(reference, nullptr);
  std::mt19937_64 rng(7);
  for (Isa isa : SupportedIsas()) {
    const ReduceKernel streaming = StreamingKernelForIsa(isa);
    for (DataType dtype : kStreamedDtypes) {
      const size_t e = DataTypeSize(dtype);
      for (size_t n : {1, 2, 3, 7}) {
        for (size_t count : {0, 1, 5, 8, 16, 17, 33, 1000, 4099}) {
          std::vector<std::vector<uint8_t>> data;
          std::vector<const void*> srcs;
          for (size_t k = 0; k < n; ++k) data.push_back(RandomBytes(count * e, rng));
          for (const auto& d : data) srcs.push_back(d.data());
          // Element-aligned offsets across a 64-byte line (a pointer to an element is aligned to
          // it: anything else is no pointer to that type).
          for (size_t offset : std::vector<size_t>{0, e, 3 * e, 32 - e, 32, 48}) {
            const auto want = RunAt(reference, dtype, ReduceOp::kSum, srcs, count, offset);
            const auto got = RunAt(streaming, dtype, ReduceOp::kSum, srcs, count, offset);
            ASSERT_EQ(got, want) << reduce_internal::IsaName(isa) << " " << DataTypeName(dtype)
                                 << " n=" << n << " count=" << count << " offset=" << offset;
          }
        }
      }
    }
  }
}

TEST(ReduceStreaming, OtherOpsAndDtypesStoreAsReduceArrays) {
  std::mt19937_64 rng(11);
  const size_t count = 1000;
  for (Isa isa : SupportedIsas()) {
    for (DataType dtype : {ACL_INT32, ACL_FLOAT, ACL_BF16, ACL_DOUBLE}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kProd}) {
        const size_t e = DataTypeSize(dtype);
        const auto a = RandomBytes(count * e, rng), b = RandomBytes(count * e, rng);
        const std::vector<const void*> srcs = {a.data(), b.data()};
        EXPECT_EQ(RunAt(StreamingKernelForIsa(isa), dtype, op, srcs, count, e),
                  RunAt(KernelForIsa(isa), dtype, op, srcs, count, e))
            << reduce_internal::IsaName(isa) << " " << DataTypeName(dtype) << " "
            << ReduceOpName(op);
      }
    }
  }
}

TEST(ReduceStreaming, ThePublicEntryMatchesReduceArraysInPlaceToo) {
  std::mt19937_64 rng(3);
  const size_t count = 4099;
  for (DataType dtype : kStreamedDtypes) {
    const size_t e = DataTypeSize(dtype);
    auto a = RandomBytes(count * e, rng);
    const auto b = RandomBytes(count * e, rng);
    auto a2 = a;
    const void* srcs[] = {a.data(), b.data()};
    const void* srcs2[] = {a2.data(), b.data()};
    ReduceArrays(dtype, ReduceOp::kSum, srcs, 2, a.data(), count);  // dst == srcs[0]
    ReduceArraysStreaming(dtype, ReduceOp::kSum, srcs2, 2, a2.data(), count);
    EXPECT_EQ(a2, a) << DataTypeName(dtype);
  }
}

TEST(ReduceStreaming, RejectsWhatReduceArraysRejects) {
  std::vector<float> x(64), y(64);
  const void* srcs[] = {x.data(), y.data()};
  const auto status = [](auto&& call) { return Guarded(call); };
  EXPECT_EQ(status([&] { ReduceArraysStreaming(ACL_BOOL, ReduceOp::kSum, srcs, 2, y.data(), 8); }),
            ERROR_INVALID_TENSOR_DTYPE);
  EXPECT_EQ(
      status([&] { ReduceArraysStreaming(ACL_FLOAT, ReduceOp::kSum, srcs, 2, y.data() + 1, 8); }),
      ERROR_INTERNAL_ERROR);  // dst partially overlaps srcs[1]
  EXPECT_EQ(status([&] { ReduceArraysStreaming(ACL_FLOAT, ReduceOp::kSum, srcs, 0, y.data(), 8); }),
            ERROR_INTERNAL_ERROR);
}

}  // namespace
}  // namespace collops
