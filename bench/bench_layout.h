// The measurement that collops-bench and collops-mpi-bench share, so the two measure exactly
// the same thing: the ops and dtypes, the per-op buffer layout (counts and displacements:
// AllGatherV, ReduceScatterV and AllToAllV with uneven blocks, as bench/gloo_worker.py), the
// test data and its golden values.
//
// Sizes follow nccl-tests: the size S in bytes is that of the *large* buffer of the
// collective: the input of allreduce, broadcast, sendrecv and alltoall(v), the gathered output of
// allgather(v), the input of reducescatter(v). Bus bandwidth uses nccl-tests' factors, so busbw
// is comparable across ops and rank counts (docs/performance.md explains them).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace collops_bench {

enum class Op {
  kAllReduce,
  kAllGather,
  kAllGatherV,
  kReduceScatter,
  kReduceScatterV,
  kBroadcast,
  kAllToAll,
  kAllToAllV,
  kSendRecv,
};

struct OpInfo {
  Op op;
  const char* name;
  bool reduces;
};

inline const std::vector<OpInfo>& AllOps() {
  static const std::vector<OpInfo> ops = {
      {Op::kAllReduce, "allreduce", true},
      {Op::kAllGather, "allgather", false},
      {Op::kAllGatherV, "allgatherv", false},
      {Op::kReduceScatter, "reducescatter", true},
      {Op::kReduceScatterV, "reducescatterv", true},
      {Op::kBroadcast, "broadcast", false},
      {Op::kAllToAll, "alltoall", false},
      {Op::kAllToAllV, "alltoallv", false},
      {Op::kSendRecv, "sendrecv", false},
  };
  return ops;
}

inline const OpInfo& InfoOf(Op op) {
  for (const auto& info : AllOps()) {
    if (info.op == op) return info;
  }
  std::abort();
}

/// nccl-tests' bus-bandwidth factor: the fraction of S that crosses the busiest link of an ideal
/// ring, so busbw can be compared with the hardware's (here: memory) bandwidth.
inline double BusFactor(Op op, int ranks) {
  const double r = ranks;
  switch (op) {
    case Op::kAllReduce:
      return 2 * (r - 1) / r;
    case Op::kAllGather:
    case Op::kAllGatherV:
    case Op::kReduceScatter:
    case Op::kReduceScatterV:
    case Op::kAllToAll:
    case Op::kAllToAllV:
      return (r - 1) / r;
    case Op::kBroadcast:
    case Op::kSendRecv:
      return 1;
  }
  return 1;
}

/// Element types the benchmarks know; `kind` says how values are encoded.
enum class Kind { kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kInt16, kInt32, kInt64, kUint8 };

struct DtypeInfo {
  const char* name;
  Kind kind;
  size_t size;
};

inline const std::vector<DtypeInfo>& AllDtypes() {
  static const std::vector<DtypeInfo> dtypes = {
      {"float32", Kind::kFloat32, 4}, {"float64", Kind::kFloat64, 8},
      {"float16", Kind::kFloat16, 2}, {"bfloat16", Kind::kBFloat16, 2},
      {"int8", Kind::kInt8, 1},       {"int16", Kind::kInt16, 2},
      {"int32", Kind::kInt32, 4},     {"int64", Kind::kInt64, 8},
      {"uint8", Kind::kUint8, 1},
  };
  return dtypes;
}

/// Writes the small integer `v` (|v| < 128, exact in every dtype) as `kind`. The float16 and
/// bfloat16 encodings are exact bit manipulations of the float32 pattern, independent of the
/// library's conversion kernels.
inline void Encode(Kind kind, double v, void* p) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  switch (kind) {
    case Kind::kFloat32:
      std::memcpy(p, &f, 4);
      break;
    case Kind::kFloat64:
      std::memcpy(p, &v, 8);
      break;
    case Kind::kBFloat16: {
      const uint16_t h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(p, &h, 2);
      break;
    }
    case Kind::kFloat16: {
      uint16_t h = static_cast<uint16_t>((bits >> 16) & 0x8000);
      if ((bits & 0x7fffffff) != 0) {
        const int exp = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
        h |= static_cast<uint16_t>((exp << 10) | ((bits >> 13) & 0x3ff));
      }
      std::memcpy(p, &h, 2);
      break;
    }
    case Kind::kInt8:
      *static_cast<int8_t*>(p) = static_cast<int8_t>(v);
      break;
    case Kind::kUint8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
      break;
    case Kind::kInt16: {
      const int16_t x = static_cast<int16_t>(v);
      std::memcpy(p, &x, 2);
      break;
    }
    case Kind::kInt32: {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case Kind::kInt64: {
      const int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
  }
}

/// The value a rank puts at flat index i of its (large) input: small, exact in every dtype, and
/// different per rank and position, so a misplaced block or a missing rank shows.
inline double Value(int rank, int64_t i) { return rank + 1 + static_cast<double>(i % 7); }

/// Per-op element layout of one rank: what it sends and receives, in elements.
struct Layout {
  int64_t inCount = 0;              ///< elements of this rank's input
  int64_t outCount = 0;             ///< elements of this rank's output (0 = in place / none)
  std::vector<int64_t> sendCounts;  ///< V ops: to rank j (reducescatterv: x segment j)
  std::vector<int64_t> sdispls;
  std::vector<int64_t> recvCounts;  ///< gathers, alltoall(v): from rank j
  std::vector<int64_t> rdispls;
  std::vector<int64_t> peerSdispls;  ///< where rank j's block for us starts in x_j
  int64_t bytes = 0;                 ///< the size S this row reports (nccl-tests convention)
};

/// Uneven split of `total` elements over `parts` blocks: block j gets weight 1 + (key + j) % 2,
/// the remainder goes to the last block. Symmetric keys make send and receive totals agree.
inline std::vector<int64_t> UnevenSplit(int64_t total, int parts, int key) {
  std::vector<int64_t> counts(parts);
  int64_t weights = 0;
  for (int j = 0; j < parts; ++j) weights += 1 + (key + j) % 2;
  int64_t used = 0;
  for (int j = 0; j < parts; ++j) {
    counts[j] = total * (1 + (key + j) % 2) / weights;
    used += counts[j];
  }
  counts[parts - 1] += total - used;
  return counts;
}

inline std::vector<int64_t> Prefix(const std::vector<int64_t>& counts) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t j = 1; j < counts.size(); ++j) displs[j] = displs[j - 1] + counts[j - 1];
  return displs;
}

/// The layout of `rank` for a size of `bytes`. Ops that split S over ranks round the element
/// count down to a multiple of R (at least R elements), as nccl-tests does.
inline Layout MakeLayout(Op op, int ranks, int rank, int64_t bytes, size_t elem) {
  Layout l;
  int64_t n = std::max<int64_t>(1, bytes / static_cast<int64_t>(elem));
  const bool split = op != Op::kAllReduce && op != Op::kBroadcast && op != Op::kSendRecv;
  if (split) n = std::max<int64_t>(ranks, n / ranks * ranks);
  l.bytes = n * static_cast<int64_t>(elem);
  const int64_t chunk = n / ranks;
  switch (op) {
    case Op::kAllReduce:
      l.inCount = l.outCount = n;
      break;
    case Op::kBroadcast:
      l.inCount = n;
      break;
    case Op::kSendRecv:
      l.inCount = l.outCount = n;
      break;
    case Op::kAllGather:
      l.inCount = chunk;
      l.outCount = n;
      l.recvCounts.assign(ranks, chunk);
      l.rdispls = Prefix(l.recvCounts);
      l.peerSdispls.assign(ranks, 0);
      break;
    case Op::kAllGatherV:
      // Rank j contributes UnevenSplit(n, R, 0)[j] elements (as ReduceScatterV's segments), all
      // of its input, gathered in rank order.
      l.recvCounts = UnevenSplit(n, ranks, 0);
      l.rdispls = Prefix(l.recvCounts);
      l.peerSdispls.assign(ranks, 0);
      l.inCount = l.recvCounts[rank];
      l.outCount = n;
      break;
    case Op::kReduceScatter:
      l.inCount = n;
      l.outCount = chunk;
      break;
    case Op::kReduceScatterV:
      // Rank j's segment of x has UnevenSplit(n, R, 0)[j] elements, the same on every rank.
      l.inCount = n;
      l.sendCounts = UnevenSplit(n, ranks, 0);
      l.sdispls = Prefix(l.sendCounts);
      l.outCount = l.sendCounts[rank];
      break;
    case Op::kAllToAll:
      l.inCount = l.outCount = n;
      l.sendCounts.assign(ranks, chunk);
      l.sdispls = Prefix(l.sendCounts);
      l.recvCounts = l.sendCounts;
      l.rdispls = l.sdispls;
      l.peerSdispls.assign(ranks, rank * chunk);
      break;
    case Op::kAllToAllV: {
      // Rank r sends UnevenSplit(n, R, r)[j] to rank j; it receives from j what j sends it.
      l.inCount = n;
      l.sendCounts = UnevenSplit(n, ranks, rank);
      l.sdispls = Prefix(l.sendCounts);
      for (int j = 0; j < ranks; ++j) {
        const std::vector<int64_t> peerSend = UnevenSplit(n, ranks, j);
        l.recvCounts.push_back(peerSend[rank]);
        l.peerSdispls.push_back(Prefix(peerSend)[rank]);
      }
      l.rdispls = Prefix(l.recvCounts);
      l.outCount = l.rdispls.back() + l.recvCounts.back();
      break;
    }
  }
  return l;
}

/// Fills this rank's input with Value(rank, i).
inline void FillInput(Kind kind, size_t elem, int rank, int64_t count, void* buf) {
  auto* p = static_cast<uint8_t*>(buf);
  for (int64_t i = 0; i < count; ++i) Encode(kind, Value(rank, i), p + i * elem);
}

/// The golden value of output element i of `rank`, computed from the layout alone.
inline double Golden(Op op, int ranks, int rank, const Layout& l, int64_t i) {
  switch (op) {
    case Op::kAllReduce: {
      double s = 0;
      for (int r = 0; r < ranks; ++r) s += Value(r, i);
      return s;
    }
    case Op::kBroadcast:
      return Value(0, i);
    case Op::kSendRecv:
      return Value((rank + ranks - 1) % ranks, i);
    case Op::kReduceScatter: {
      double s = 0;
      for (int r = 0; r < ranks; ++r) s += Value(r, rank * l.outCount + i);
      return s;
    }
    case Op::kReduceScatterV: {
      double s = 0;
      for (int r = 0; r < ranks; ++r) s += Value(r, l.sdispls[rank] + i);
      return s;
    }
    case Op::kAllGather:
    case Op::kAllGatherV:
    case Op::kAllToAll:
    case Op::kAllToAllV: {
      // The block holding i: the last non-empty one that starts at or before i; it came from
      // offset peerSdispls[j] of rank j's input (0 for the gathers: all of it).
      int j = ranks - 1;
      while (j > 0 && (l.rdispls[j] > i || l.recvCounts[j] == 0)) --j;
      return Value(j, l.peerSdispls[j] + (i - l.rdispls[j]));
    }
  }
  return 0;
}

/// Compares `count` elements of `buf` with Golden(); returns the number that differ.
inline int64_t CountWrong(Op op, Kind kind, size_t elem, int ranks, int rank, const Layout& l,
                          const void* buf, int64_t count) {
  int64_t wrong = 0;
  uint8_t expect[8];
  const auto* p = static_cast<const uint8_t*>(buf);
  for (int64_t i = 0; i < count; ++i) {
    Encode(kind, Golden(op, ranks, rank, l, i), expect);
    if (std::memcmp(expect, p + i * elem, elem) != 0) ++wrong;
  }
  return wrong;
}

inline double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace collops_bench
