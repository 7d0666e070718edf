// collops-reduce-kernels: the one-thread speed of the reduction kernels, in ns per element, best
// of N rounds, the variants of each row timed in turn in every round (interleaved, so under the
// same load). The kernel build is the dispatched one: COLLOPS_ISA=avx2 (or generic) picks a lower
// build.
//   -m sum (default): the float16 and bfloat16 sums, ReduceArrays and ReduceArraysStreaming.
//   -m dequantise: SumDequantiseInt8 (quantised AllReduce's kernel) to float16, n·offset zero, an
//      integer at even source counts (offset 0.5) or fractional (0.3); one scale > 0, the same
//      scale negated, and a scale per channel (1024 channels). With an integer or zero n·offset a
//      scale > 0 takes the vector builds' biased-float path and a negative scale the conversion
//      through int32, so "tensor+ / tensor-" compares the two on the same sums.
// Usage: collops-reduce-kernels [-m sum|dequantise] [-s 2,4] [-b 256K] [-e 4M] [-n 9]
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

uint16_t HalfOf(float f) {  // the library's own float16 rounding
  uint16_t h;
  collops::ConvertFromFloat32(&f, collops::ACL_FLOAT16, &h, 1);
  return h;
}

// -m dequantise: one row per source count, bytes and offset.
void DequantiseRows(const std::vector<size_t>& sources, size_t first, size_t last, int rounds) {
  std::printf("isa %s, best of %d rounds, ns per element, float16 output\n",
              collops::ReduceKernelIsa(), rounds);
  std::printf("%7s %10s %7s %9s %9s %9s %8s\n", "sources", "bytes/src", "offset", "tensor+",
              "tensor-", "channel", "-/+");
  const size_t channels = 1024;
  std::vector<uint16_t> channelScales(channels);
  for (size_t c = 0; c < channels; ++c) {
    channelScales[c] = HalfOf(static_cast<float>(c % 64 + 1) / 1024.0f);
  }
  const uint16_t positive = HalfOf(0.0078125f), negative = HalfOf(-0.0078125f);
  for (size_t n : sources) {
    for (size_t bytes = first; bytes <= last; bytes *= 4) {
      std::vector<std::vector<int8_t>> data(n, std::vector<int8_t>(bytes));
      uint32_t x = 12345;
      for (auto& d : data) {
        for (int8_t& v : d) v = static_cast<int8_t>((x = x * 1664525u + 1013904223u) >> 24);
      }
      std::vector<const int8_t*> srcs;
      for (const auto& d : data) srcs.push_back(d.data());
      std::vector<uint16_t> dst(bytes);
      for (float offset : {0.0f, 0.5f, 0.3f}) {
        collops::QuantScale quant[3];
        const uint16_t* scales[3] = {&positive, &negative, channelScales.data()};
        for (int v = 0; v < 3; ++v) {
          quant[v].scale = scales[v];
          quant[v].channels = v == 2 ? static_cast<int64_t>(channels) : 0;
          quant[v].offset = HalfOf(offset);
        }
        double best[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r < rounds; ++r) {
          for (int v = 0; v < 3; ++v) {
            const double t0 = Seconds();
            collops::SumDequantiseInt8(srcs.data(), n, bytes, 0, quant[v], collops::ACL_FLOAT16,
                                       dst.data());
            best[v] = std::min(best[v], Seconds() - t0);
          }
        }
        std::printf("%7zu %10zu %7.1f %9.4f %9.4f %9.4f %7.3fx\n", n, bytes, offset,
                    best[0] * 1e9 / bytes, best[1] * 1e9 / bytes, best[2] * 1e9 / bytes,
                    best[1] / best[0]);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sources = {2, 4};
  size_t first = 256 << 10;
  size_t last = 4 << 20;
  int rounds = 9;
  std::string mode = "sum";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-m") {
      mode = argv[i + 1];
    } else if (flag == "-s") {
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
      *std::min_element(sources.begin(), sources.end()) < 1 ||
      (mode != "sum" && mode != "dequantise")) {
    std::fprintf(stderr, "usage: %s [-m sum|dequantise] [-s 2,4] [-b 256K] [-e 4M] [-n 9]\n",
                 argv[0]);
    return 2;
  }
  if (mode == "dequantise") {
    DequantiseRows(sources, first, last, rounds);
    return 0;
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
