// collops-reduce-kernels: the one-thread speed of the float16 and bfloat16 sum kernels
// (ReduceArrays and ReduceArraysStreaming), in ns per element, best of N. For each entry, each
// round runs both dtypes in turn, so they are compared interleaved under the same load.
// The kernel build is the dispatched one: COLLOPS_ISA=avx2 (or generic) picks a lower build.
// Usage: collops-reduce-kernels [-s 2,4] [-b 256K] [-e 4M] [-n 9]
//   -s  source counts; -b / -e  bytes per source, first and last (each step x4); -n  rounds.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collops/reduce.h"

namespace {

size_t ParseBytes(const char* text) {
  char* end = nullptr;
  size_t v = std::strtoull(text, &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  return v;
}

std::vector<size_t> ParseList(const char* text) {
  std::vector<size_t> out;
  const char* p = text;
  while (*p != '\0') {
    char* end = nullptr;
    const size_t v = std::strtoull(p, &end, 10);
    if (end == p) return {};
    out.push_back(v);
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sources = {2, 4};
  size_t first = 256 << 10;
  size_t last = 4 << 20;
  int rounds = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-s") {
      sources = ParseList(argv[i + 1]);
    } else if (flag == "-b") {
      first = ParseBytes(argv[i + 1]);
    } else if (flag == "-e") {
      last = ParseBytes(argv[i + 1]);
    } else if (flag == "-n") {
      rounds = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (sources.empty() || first < 2 || last < first || rounds < 1 ||
      *std::min_element(sources.begin(), sources.end()) < 1) {
    std::fprintf(stderr, "usage: %s [-s 2,4] [-b 256K] [-e 4M] [-n 9]\n", argv[0]);
    return 2;
  }
  const collops::DataType dtypes[] = {collops::ACL_FLOAT16, collops::ACL_BF16};
  const char* entry_names[] = {"ReduceArrays", "ReduceArraysStreaming"};
  std::printf("isa %s, best of %d rounds, ns per element\n", collops::ReduceKernelIsa(), rounds);
  std::printf("%-22s %7s %10s %9s %9s\n", "entry", "sources", "bytes/src", "float16", "bfloat16");
  for (size_t n : sources) {
    for (size_t bytes = first; bytes <= last; bytes *= 4) {
      const size_t count = bytes / 2;
      std::vector<std::vector<uint16_t>> data(n, std::vector<uint16_t>(count));
      uint32_t x = 12345;
      for (auto& d : data) {
        // Finite values of either dtype (exponent bits well inside the range).
        for (uint16_t& v : d)
          v = static_cast<uint16_t>(0x3800u + ((x = x * 1664525u + 1013904223u) >> 22));
      }
      std::vector<const void*> srcs;
      for (const auto& d : data) srcs.push_back(d.data());
      std::vector<uint16_t> dst(count);
      double best[2][2];
      for (auto& row : best) std::fill(row, row + 2, 1e30);
      // Entry by entry: a non-temporal pass leaves dst out of the cache, which would charge the
      // next ordinary pass for it.
      for (int e = 0; e < 2; ++e) {
        for (int r = 0; r < rounds; ++r) {
          for (int t = 0; t < 2; ++t) {
            const double t0 = Seconds();
            if (e == 0) {
              collops::ReduceArrays(dtypes[t], collops::ReduceOp::kSum, srcs.data(), n, dst.data(),
                                    count);
            } else {
              collops::ReduceArraysStreaming(dtypes[t], collops::ReduceOp::kSum, srcs.data(), n,
                                             dst.data(), count);
            }
            best[e][t] = std::min(best[e][t], Seconds() - t0);
          }
        }
      }
      for (int e = 0; e < 2; ++e) {
        std::printf("%-22s %7zu %10zu %9.3f %9.3f\n", entry_names[e], n, bytes,
                    best[e][0] * 1e9 / count, best[e][1] * 1e9 / count);
      }
    }
  }
  return 0;
}
