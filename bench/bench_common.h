// What collops-bench and collops-mpi-bench share, so the two measure exactly the same thing:
// the layout and goldens (bench_layout.h), the command line (bench_options.h), the warm-up, the
// timing statistics and the output (table and JSON lines).
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

#include "bench/bench_layout.h"
#include "bench/bench_options.h"

namespace collops_bench {

/// The calls before the timed ones: `o.warmup`, then more batches of as many until
/// o.settleSeconds have passed since the first. Ranks that were just started run slow at first,
/// in two stages: their first calls pay for page faults and the like, and then, until the
/// scheduler has spread them over the CPUs, calls run at about twice their steady time, for up to
/// a second (docs/performance.md has the figures). A fixed number of warm-up calls can end inside
/// either stage. mpirun's ranks are timed long after they start, forked ones within milliseconds:
/// a floor in time measures every system settled.
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
  if (o.timing == Timing::kLoop) {
    std::printf("# time: calls back to back, the mean per call, the max over ranks\n");
  } else {
    std::printf(
        "# time: per iteration (after a %s) the max over ranks; median and min over "
        "iterations\n",
        o.timing == Timing::kSpin ? "barrier outside collops" : "BarrierOperation");
  }
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
        "\"busbw_gbs\": %.4f, \"wrong\": %lld, \"iters\": %zu, \"timing\": \"%s\", "
        "\"error\": \"%s\"%s%s%s}\n",
        system, InfoOf(o.op).name, o.dtype->name, o.ranks, static_cast<long long>(row.bytes),
        static_cast<long long>(row.count), med * 1e6, mn * 1e6, algbw, busbw,
        static_cast<long long>(row.wrong), t.size(), TimingName(o.timing),
        JsonText(row.error).c_str(), row.backend.empty() ? "" : ", \"backend\": \"",
        JsonText(row.backend).c_str(), row.backend.empty() ? "" : "\"");
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
