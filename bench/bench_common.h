// What collops-bench and collops-mpi-bench share, so the two measure exactly the same thing:
// nccl-tests' command line, the per-op buffer layout (counts and displacements), the test data
// and its golden values, the timing statistics and the output (table and JSON lines).
//
// Sizes follow nccl-tests: -b/-e/-f give the size S in bytes of the *large* buffer of the
// collective: the input of allreduce, broadcast, sendrecv and alltoall(v), the gathered output of
// allgather(v), the input of reducescatter(v). Bus bandwidth uses nccl-tests' factors, so busbw
// is comparable across ops and rank counts (docs/performance.md explains them).
#pragma once

#include <algorithm>
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
  std::vector<int64_t> recvCounts;  ///< V ops: from rank j
  std::vector<int64_t> rdispls;
  std::vector<int64_t> peerSdispls;  ///< alltoall(v): where rank j's block for us starts in x_j
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
    case Op::kAllGatherV:
      l.inCount = chunk;
      l.outCount = n;
      l.recvCounts.assign(ranks, chunk);
      for (int j = 0; j < ranks; ++j) l.rdispls.push_back(j * chunk);
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
    case Op::kAllGather:
    case Op::kAllGatherV: {
      const int64_t chunk = l.recvCounts[0];
      return Value(static_cast<int>(i / chunk), i % chunk);
    }
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
    case Op::kAllToAll:
    case Op::kAllToAllV: {
      // The block holding i: the last non-empty one that starts at or before i.
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

/// How collops-bench hosts its ranks: forked processes (lccl, commMode 0), threads of one process
/// (lccl, commMode 1), or one process per rank started by mpirun (backend "hccl", commMode 0: lccl
/// on one host, hierarchical across hosts).
enum class Mode { kProcess, kThread, kMpirun };

/// Command line shared by both benchmarks (nccl-tests spelling).
struct Options {
  int64_t minBytes = 8;
  int64_t maxBytes = 64 << 20;
  int64_t factor = 4;
  Op op = Op::kAllReduce;
  const DtypeInfo* dtype = &AllDtypes()[0];
  int ranks = 2;
  Mode mode = Mode::kProcess;
  int warmup = 5;
  /// --settle-ms: the warm-up also lasts at least this long (WarmUp)
  double settleSeconds = 0.3;
  int iters = 20;
  bool check = false;
  bool json = false;
  /// --shared: data buffers from the communicator's AllocateShared() (collops-bench, process mode)
  bool shared = false;
};

inline int64_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<int64_t>(v);
}

inline void Usage(const char* prog, bool hasMode) {
  std::fprintf(
      stderr,
      "usage: %s [-b 8] [-e 64M] [-f 4] [-o op] [-d dtype] [-w 5] [--settle-ms 300] [-n 20] [-c]\n"
      "       [--json]%s\n"
      "  ops: allreduce allgather allgatherv reducescatter reducescatterv broadcast\n"
      "       alltoall alltoallv sendrecv\n"
      "  dtypes: float32 float64 float16 bfloat16 int8 int16 int32 int64 uint8\n",
      prog,
      hasMode ? " [-r 2] [--mode process|thread|mpirun] [--shared]  (mpirun: ranks from mpirun "
                "-np; --shared: process mode, buffers from AllocateShared)"
              : "  (ranks: mpirun -np)");
  std::exit(2);
}

/// Parses argv; exits with usage on an unknown option. `hasMode`: accept -r and --mode.
inline Options ParseOptions(int argc, char** argv, bool hasMode) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(argv[0], hasMode);
      return argv[++i];
    };
    if (a == "-b")
      o.minBytes = ParseBytes(next());
    else if (a == "-e")
      o.maxBytes = ParseBytes(next());
    else if (a == "-f")
      o.factor = std::max<int64_t>(2, std::atoll(next().c_str()));
    else if (a == "-w")
      o.warmup = std::atoi(next().c_str());
    else if (a == "--settle-ms")
      o.settleSeconds = std::max(0.0, std::atof(next().c_str()) / 1000);
    else if (a == "-n")
      o.iters = std::max(1, std::atoi(next().c_str()));
    else if (a == "-c")
      o.check = true;
    else if (a == "--json")
      o.json = true;
    else if (a == "--shared" && hasMode)
      o.shared = true;
    else if (a == "-r" && hasMode)
      o.ranks = std::atoi(next().c_str());
    else if (a == "--mode" && hasMode) {
      const std::string m = next();
      if (m == "process")
        o.mode = Mode::kProcess;
      else if (m == "thread")
        o.mode = Mode::kThread;
      else if (m == "mpirun")
        o.mode = Mode::kMpirun;
      else
        Usage(argv[0], hasMode);
    } else if (a == "-o") {
      const std::string name = next();
      bool found = false;
      for (const auto& info : AllOps()) {
        if (name == info.name) o.op = info.op, found = true;
      }
      if (!found) Usage(argv[0], hasMode);
    } else if (a == "-d") {
      const std::string name = next();
      o.dtype = nullptr;
      for (const auto& d : AllDtypes()) {
        if (name == d.name) o.dtype = &d;
      }
      if (o.dtype == nullptr) Usage(argv[0], hasMode);
    } else {
      Usage(argv[0], hasMode);
    }
  }
  return o;
}

inline std::vector<int64_t> Sizes(const Options& o) {
  std::vector<int64_t> sizes;
  for (int64_t s = o.minBytes; s <= o.maxBytes; s *= o.factor) sizes.push_back(s);
  return sizes;
}

/// The calls before the timed ones: `o.warmup`, then more batches of as many until
/// o.settleSeconds have passed since the first. Ranks that were just started run slow at first,
/// in two stages (collops, 4 ranks forked on 2 CPUs, process or thread mode): their first 4-20
/// calls took 0.2-2 ms each (up to 20 ms in all) against 6-22 us afterwards, and then, until the
/// scheduler had spread them over the CPUs, 40 ms to 1 s of calls ran at about twice their
/// steady time (AllToAllV 1 MiB 390-440 us, then 190-280; AllReduce 256 KiB 136-146 us, then
/// 61-68). Five calls of warm-up left either in the 30 timed calls of some launches. mpirun's
/// ranks are timed long after they start, forked ones within milliseconds: a floor in time
/// measures every system settled.
/// Every rank must make the same calls, so whether to go on is rank 0's word: rankZeroSays(mine)
/// returns rank 0's `mine` on every rank.
template <class Execute, class RankZeroSays>
void WarmUp(const Options& o, Execute&& execute, RankZeroSays&& rankZeroSays) {
  const double start = NowSeconds();
  for (int i = 0; i < o.warmup; ++i) execute();
  if (o.settleSeconds <= 0) return;
  while (rankZeroSays(NowSeconds() - start < o.settleSeconds)) {
    for (int i = 0; i < std::max(o.warmup, 1); ++i) execute();
  }
}

/// One row of results: `iterSeconds[i]` is iteration i's time, already the max over ranks.
struct Row {
  int64_t bytes = 0;
  int64_t count = 0;
  std::vector<double> iterSeconds;
  int64_t wrong = -1;   ///< -1 = not checked
  std::string error;    ///< non-empty when the row failed
  std::string backend;  ///< the communicator's BackendName() when known, e.g. "hccl(lccl+mpi)"
};

/// `text` with the characters JSON strings cannot hold raw escaped (error messages carry quotes).
inline std::string JsonText(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

inline void PrintHeader(const Options& o, const char* system) {
  if (o.json) return;
  std::printf("# %s  op %s  dtype %s  ranks %d  warmup %d (>= %g ms)  iters %d  check %s\n", system,
              InfoOf(o.op).name, o.dtype->name, o.ranks, o.warmup, o.settleSeconds * 1000, o.iters,
              o.check ? "on" : "off");
  std::printf("# time: per iteration the max over ranks; median and min over iterations\n");
  std::printf("%12s %12s %12s %12s %10s %10s %8s\n", "size(B)", "count", "med(us)", "min(us)",
              "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

/// Prints one row as a table line or a JSON line (the comparison runner reads the latter).
inline void PrintRow(const Options& o, const char* system, const Row& row) {
  std::vector<double> t = row.iterSeconds;
  std::sort(t.begin(), t.end());
  const double med =
      t.empty() ? 0
                : (t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2);
  const double mn = t.empty() ? 0 : t.front();
  const double algbw = med > 0 ? row.bytes / med / 1e9 : 0;
  const double busbw = algbw * BusFactor(o.op, o.ranks);
  if (o.json) {
    std::printf(
        "{\"system\": \"%s\", \"op\": \"%s\", \"dtype\": \"%s\", \"ranks\": %d, \"bytes\": %lld, "
        "\"count\": %lld, \"time_med_us\": %.3f, \"time_min_us\": %.3f, \"algbw_gbs\": %.4f, "
        "\"busbw_gbs\": %.4f, \"wrong\": %lld, \"iters\": %zu, \"error\": \"%s\"%s%s%s}\n",
        system, InfoOf(o.op).name, o.dtype->name, o.ranks, static_cast<long long>(row.bytes),
        static_cast<long long>(row.count), med * 1e6, mn * 1e6, algbw, busbw,
        static_cast<long long>(row.wrong), t.size(), JsonText(row.error).c_str(),
        row.backend.empty() ? "" : ", \"backend\": \"", JsonText(row.backend).c_str(),
        row.backend.empty() ? "" : "\"");
  } else if (!row.error.empty()) {
    std::printf("%12lld %12lld  FAILED: %s\n", static_cast<long long>(row.bytes),
                static_cast<long long>(row.count), row.error.c_str());
  } else {
    char wrong[32];
    if (row.wrong < 0)
      std::snprintf(wrong, sizeof wrong, "N/A");
    else
      std::snprintf(wrong, sizeof wrong, "%lld", static_cast<long long>(row.wrong));
    std::printf("%12lld %12lld %12.2f %12.2f %10.3f %10.3f %8s\n",
                static_cast<long long>(row.bytes), static_cast<long long>(row.count), med * 1e6,
                mn * 1e6, algbw, busbw, wrong);
  }
  std::fflush(stdout);
}

}  // namespace collops_bench
