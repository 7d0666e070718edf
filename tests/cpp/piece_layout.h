// The uneven AllToAllV layout of the lccl golden tests: rank `from` sends PieceCount(from, to)
// elements to rank `to` (some zero, sizes varying with both ranks), and every piece has a gap
// before it (1 element in the input, 3 in the output), so a copy that strays outside its piece
// shows in the output.
#pragma once

#include <cstdint>
#include <vector>

namespace collops {
namespace testing {

inline int64_t PieceCount(int from, int to, int64_t scale) {
  return ((from * 7 + to * 3) % 5) * scale;
}

/// One rank's counts and displacements (elements) for PieceCount(.., scale).
struct PieceLayout {
  std::vector<int64_t> sendCounts, sdispls, recvCounts, rdispls;
  int64_t sendEnd = 0;  ///< input elements, gaps included
  int64_t recvEnd = 0;  ///< output elements, gaps included

  PieceLayout(int rank, int size, int64_t scale)
      : sendCounts(size), sdispls(size), recvCounts(size), rdispls(size) {
    for (int r = 0; r < size; ++r) {
      sendCounts[r] = PieceCount(rank, r, scale);
      sdispls[r] = sendEnd + 1;
      sendEnd = sdispls[r] + sendCounts[r];
      recvCounts[r] = PieceCount(r, rank, scale);
      rdispls[r] = recvEnd + 3;
      recvEnd = rdispls[r] + recvCounts[r];
    }
  }

  /// Where the piece rank `from` sends rank `to` starts in `from`'s input.
  static int64_t SendDispl(int from, int to, int64_t scale) {
    int64_t at = 1;
    for (int j = 0; j < to; ++j) at += PieceCount(from, j, scale) + 1;
    return at;
  }
};

}  // namespace testing
}  // namespace collops
