// ChunkBytesFor (core/comm/shm/shm_policy.h): AllReduce "rsag" chunks are one core's L2 cache
// within [kMinChunkBytes, kChunkBytes] when every rank has a CPU of its own, and kChunkBytes when
// the ranks outnumber the CPUs or the L2 is unknown.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/comm/shm/shm_policy.h"

namespace collops {
namespace shm {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(ChunkPolicy, WithACpuPerRankTheChunkIsTheL2Cache) {
  EXPECT_EQ(ChunkBytesFor(1 * kMiB, false), 1 * kMiB);
  EXPECT_EQ(ChunkBytesFor(3 * kMiB / 2, false), 3 * kMiB / 2);
  EXPECT_EQ(ChunkBytesFor(2 * kMiB, false), 2 * kMiB);
}

TEST(ChunkPolicy, TheL2IsClampedToTheChunkRange) {
  EXPECT_EQ(ChunkBytesFor(256 << 10, false), kMinChunkBytes);
  EXPECT_EQ(ChunkBytesFor(512 << 10, false), kMinChunkBytes);
  EXPECT_EQ(ChunkBytesFor(4 * kMiB, false), kChunkBytes);
  EXPECT_EQ(ChunkBytesFor(uint64_t{1} << 40, false), kChunkBytes);
}

TEST(ChunkPolicy, UnknownL2OrOversubscribedKeepsTheLargestChunk) {
  EXPECT_EQ(ChunkBytesFor(0, false), kChunkBytes);
  EXPECT_EQ(ChunkBytesFor(1 * kMiB, true), kChunkBytes);
  EXPECT_EQ(ChunkBytesFor(0, true), kChunkBytes);
}

}  // namespace
}  // namespace shm
}  // namespace collops
