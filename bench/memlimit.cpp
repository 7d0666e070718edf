// collops-memlimit: what this machine's memory allows at each size, the ceiling for a
// shared-memory collective. Three kernels, each timed like the benchmarks (median and min):
//   memcpy1  one thread copies S bytes               (a data-movement op's best single copy)
//   memcpy2  two threads each copy S/2 concurrently  (two ranks copying at once)
//   add      one thread: c = a + b over S bytes of float32 (read two, write one: the inner
//            loop of a 2-rank reduction)
// Bandwidth is S / time for every kernel (bytes of output produced per second), so it reads
// directly against a collective's algbw at the same S.
// Usage: collops-memlimit [-b 8] [-e 64M] [-f 4] [-w 5] [-n 20] [--json]   (--help: the details)
// A size whose buffers cannot be allocated prints a FAILED row (JSON: "error") and exits 1.
#include <atomic>
#include <cstdio>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"

namespace collops_bench {
namespace {

double Median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
}

/// Runs body(thread) on `threads` threads started together; returns the slowest thread's time.
template <class F>
double Timed(int threads, F body) {
  if (threads == 1) {
    const double t0 = NowSeconds();
    body(0);
    return NowSeconds() - t0;
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> took(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ++ready;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      const double t0 = NowSeconds();
      body(t);
      took[t] = NowSeconds() - t0;
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return *std::max_element(took.begin(), took.end());
}

const char* const kKernels[] = {"memcpy1", "memcpy2", "add"};

/// The rows of a size that could not run: one per kernel, as the comparison runner reads them.
void PrintFailed(const Options& o, size_t n, const std::string& error) {
  for (const char* name : kKernels) {
    if (o.json) {
      std::printf("{\"system\": \"mem-%s\", \"bytes\": %lld, \"error\": \"%s\"}\n", name,
                  static_cast<long long>(n), JsonText(error).c_str());
    } else {
      std::printf("%-8s %12lld B  FAILED: %s\n", name, static_cast<long long>(n), error.c_str());
    }
  }
  std::fflush(stdout);
  std::fprintf(stderr, "collops-memlimit: %lld B: %s\n", static_cast<long long>(n), error.c_str());
}

/// Times the three kernels at `n` bytes and prints their rows. Throws std::bad_alloc when the
/// buffers (about 5n bytes) cannot be allocated; false if the add kernel computed a wrong sum.
bool RunSize(const Options& o, size_t n) {
  std::vector<float> a(n / 4 + 16, 1.5f), b(n / 4 + 16, 2.5f), c(n / 4 + 16, 0.f);
  std::vector<uint8_t> src(n, 1), dst(n, 0);
  auto copy1 = [&](int) { std::memcpy(dst.data(), src.data(), n); };
  auto copy2 = [&](int t) {
    const size_t half = n / 2;
    std::memcpy(dst.data() + t * half, src.data() + t * half, t == 0 ? half : n - half);
  };
  const size_t floats = n / 4 ? n / 4 : 1;
  auto add = [&](int) {
    // __restrict lets the compiler vectorise without runtime alias checks.
    const float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    float* __restrict pc = c.data();
    for (size_t i = 0; i < floats; ++i) pc[i] = pa[i] + pb[i];
  };
  std::vector<double> times[3];
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    // Interleaved like the comparison runner, so the three see the same conditions.
    const double t1 = Timed(1, copy1), t2 = Timed(2, copy2), t3 = Timed(1, add);
    if (i < o.warmup) continue;
    times[0].push_back(t1), times[1].push_back(t2), times[2].push_back(t3);
  }
  for (int k = 0; k < 3; ++k) {
    // ParseOptions guarantees -n >= 1, so every kernel has a time.
    const double med = Median(times[k]), mn = *std::min_element(times[k].begin(), times[k].end());
    if (o.json) {
      std::printf(
          "{\"system\": \"mem-%s\", \"bytes\": %lld, \"time_med_us\": %.3f, "
          "\"time_min_us\": %.3f, \"algbw_gbs\": %.4f}\n",
          kKernels[k], static_cast<long long>(n), med * 1e6, mn * 1e6, n / med / 1e9);
    } else {
      std::printf("%-8s %12lld B  med %10.2f us  min %10.2f us  %8.3f GB/s\n", kKernels[k],
                  static_cast<long long>(n), med * 1e6, mn * 1e6, n / med / 1e9);
    }
  }
  std::fflush(stdout);
  return c[0] == 4.0f;  // keeps the add loop observable
}

int Main(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv, Tool::kMemLimit);
  for (int64_t size : Sizes(o)) {
    const size_t n = static_cast<size_t>(std::max<int64_t>(size, 8));
    try {
      if (!RunSize(o, n)) return 1;
    } catch (const std::bad_alloc&) {
      // Larger sizes would fail too.
      PrintFailed(o, n, "out of memory allocating the buffers (about 5 x the size)");
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace collops_bench

int main(int argc, char** argv) { return collops_bench::Main(argc, argv); }
