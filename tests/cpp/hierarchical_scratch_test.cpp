// The hierarchical communicator's scratch buffers (hier::ScratchPool): from the host's heap
// while it has room, from new[] otherwise, every heap buffer given back.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/comm/hier/hierarchical_comm.h"

namespace collops {
namespace testing {
namespace {

/// A heap that hands out new[] memory and keeps count, standing in for lccl's AllocateShared.
class CountingHeap final : public Communicator {
 public:
  std::string BackendName() const override { return "counting-heap"; }
  int Rank() const override { return 0; }
  int Size() const override { return 1; }
  void AllGatherBytes(const void*, void*, size_t) override {}
  void* AllocateShared(size_t bytes) override {
    if (bytes > room) return nullptr;
    ++allocated;
    return new uint8_t[bytes];
  }
  bool FreeShared(void* p) override {
    ++freed;
    delete[] static_cast<uint8_t*>(p);
    return true;
  }
  size_t room = 1 << 20;
  int allocated = 0;
  int freed = 0;
};

/// The hierarchical communicator's scratch comes from its host's heap while that has room (so the
/// host's collectives read it in place), from new[] when not, and every heap buffer goes back.
TEST(HierarchicalScratch, DrawsFromTheHostHeapWhileItHasRoom) {
  CountingHeap heap;
  {
    hier::ScratchPool pool(&heap);
    uint8_t* small = pool.Get(0, 100);
    EXPECT_EQ(heap.allocated, 1);
    EXPECT_EQ(pool.Get(0, 50), small) << "a smaller request reuses the buffer";
    pool.Get(0, 1000);  // grows: the old heap buffer goes back first
    EXPECT_EQ(heap.allocated, 2);
    EXPECT_EQ(heap.freed, 1);
    pool.Get(1, 2 << 20);  // more than the heap's room: new[]
    EXPECT_EQ(heap.allocated, 2);
    std::memset(pool.Get(1, 2 << 20), 1, 2 << 20);
  }
  EXPECT_EQ(heap.freed, 2) << "the pool returns its heap buffers when it ends";
}

}  // namespace
}  // namespace testing
}  // namespace collops
