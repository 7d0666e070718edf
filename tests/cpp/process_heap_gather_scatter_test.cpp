// AllGatherV, Broadcast and ReduceScatterV on the multi-process lccl communicator with the
// inputs of some ranks in their heaps, read in place by the others. Every byte is checked against
// golden values rebuilt independently on each rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collops/communicator.h"
#include "piece_layout.h"
#include "process_heap_checks.h"

namespace collops {
namespace testing {
namespace {

/// AllGatherV (uneven, gaps between the pieces) and Broadcast from every root, with the inputs
/// of some ranks shared: the others read those in place. Pieces from below the whole-piece size
/// to many slots long. Checks every byte, and that a large shared exchange takes two rounds.
TEST_P(ProcessHeapCollectives, AllGatherVAndBroadcastWithSharedInputsMatchGolden) {
  const int size = GetParam();
  ForEachSharedInputSet(
      size, "heap-gather", {1, 3000, 40000}, [&](auto& comm, int64_t scale, unsigned shared) {
        const int rank = comm.Rank();
        const bool mine = (shared >> rank) & 1;
        std::vector<int64_t> counts(size), displs(size);
        int64_t end = 0;
        for (int r = 0; r < size; ++r) {
          counts[r] = PieceCount(r, (r + 1) % size, scale);
          displs[r] = end + 3;
          end = displs[r] + counts[r];
        }
        Placed in(comm, counts[rank] + 1, mine);
        for (int64_t i = 0; i < counts[rank]; ++i) in.data()[i] = ValueAt(rank, i);
        std::vector<uint8_t> out(end, 0xee), want(end, 0xee);
        for (int r = 0; r < size; ++r) {
          for (int64_t i = 0; i < counts[r]; ++i) want[displs[r] + i] = ValueAt(r, i);
        }
        const uint64_t before = comm.Rounds();
        comm.AllGatherV(in.data(), counts[rank], out.data(), counts.data(), displs.data(),
                        ACL_INT8);
        EXPECT_EQ(out, want) << "AllGatherV scale " << scale << " shared " << shared;
        if (scale == 40000 && shared == (1u << size) - 1) {
          EXPECT_EQ(comm.Rounds() - before, 2u);
        }

        for (int root = 0; root < size; ++root) {
          const int64_t n = 5 * scale + root;
          Placed buf(comm, n, mine);
          for (int64_t i = 0; i < n; ++i) buf.data()[i] = rank == root ? ValueAt(root, i) : 0xee;
          comm.Broadcast(buf.data(), n, ACL_INT8, root);
          int64_t wrong = 0;
          for (int64_t i = 0; i < n; ++i) wrong += buf.data()[i] != ValueAt(root, i);
          EXPECT_EQ(wrong, 0) << "Broadcast root " << root << " n " << n << " shared " << shared;
        }
      });
}

/// ReduceScatterV (uneven pieces, gaps in the input) with the inputs of some ranks shared: their
/// pieces of 8 KiB and more are reduced in place by their receivers. Every rank's result must be
/// the rank-order sum, bit for bit; a fully shared exchange takes two rounds whatever its size.
TEST_P(ProcessHeapCollectives, ReduceScatterVWithSharedInputsMatchesGolden) {
  const int size = GetParam();
  ForEachSharedInputSet(
      size, "heap-rs", {1, 1000, 12000}, [&](auto& comm, int64_t scale, unsigned shared) {
        const int rank = comm.Rank();
        // counts[r] = what every rank contributes to r: the same vector everywhere.
        std::vector<int64_t> counts(size), displs(size);
        int64_t end = 0;
        for (int r = 0; r < size; ++r) {
          counts[r] = (r % 3 + 1) * scale;  // 4 to 144000 bytes
          displs[r] = end + 1;
          end = displs[r] + counts[r];
        }
        Placed in(comm, (end + 1) * sizeof(float), (shared >> rank) & 1);
        auto* x = reinterpret_cast<float*>(in.data());
        for (int64_t i = 0; i < end; ++i) x[i] = static_cast<float>((rank + 1) * (i % 89));
        std::vector<float> out(counts[rank] + 1, -1.0f);
        const uint64_t before = comm.Rounds();
        comm.ReduceScatterV(x, counts.data(), displs.data(), out.data(), counts[rank], ACL_FLOAT,
                            ReduceOp::kSum);
        int64_t wrong = 0;
        for (int64_t i = 0; i < counts[rank]; ++i) {
          wrong += out[i] != static_cast<float>(size * (size + 1) / 2 * ((displs[rank] + i) % 89));
        }
        wrong += out[counts[rank]] != -1.0f;  // nothing written past the piece
        EXPECT_EQ(wrong, 0) << "scale " << scale << " shared " << shared;
        if (scale == 12000 && shared == (1u << size) - 1) {
          EXPECT_EQ(comm.Rounds() - before, 2u);
        }
      });
}

}  // namespace
}  // namespace testing
}  // namespace collops
