// collops-line-latency: how long one cache line takes to go from one CPU to another and back,
// the floor of every synchronisation round of the shared-memory engine. Two threads pinned to
// the two CPUs hand a counter on one cache line back and forth.
//
// On a host the figure is fixed by where the two CPUs sit (one core complex sharing an L3, or
// two); on a virtual machine the hypervisor may move the virtual CPUs between such places while
// a benchmark runs, and every collective between them changes speed with it. bench/python_paths.py
// runs this before every path of a row and after the last, so that a row measured across such a
// move shows it.
//
// Usage: collops-line-latency [--cpus A,B] [--trips N] [--blocks K] [--json]
//   --cpus    the two CPUs (default: the first two this process may run on)
//   --trips   round trips per block (default 20000)
//   --blocks  blocks timed (default 7): the median and the fastest block are printed
// Exits 1 with a message when the threads cannot be pinned.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int cpus[2] = {-1, -1};
  long trips = 20000;
  int blocks = 7;
  bool json = false;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "collops-line-latency: %s\nusage: collops-line-latency [--cpus A,B] [--trips N] "
               "[--blocks K] [--json]\n",
               why);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--json") {
      o.json = true;
    } else if (a == "--cpus" && value != nullptr) {
      if (std::sscanf(value, "%d,%d", &o.cpus[0], &o.cpus[1]) != 2 || o.cpus[0] < 0 ||
          o.cpus[1] < 0 || o.cpus[0] == o.cpus[1]) {
        Usage("--cpus takes two different CPU numbers, e.g. 0,1");
      }
      ++i;
    } else if (a == "--trips" && value != nullptr) {
      o.trips = std::atol(value);
      if (o.trips < 1) Usage("--trips must be at least 1");
      ++i;
    } else if (a == "--blocks" && value != nullptr) {
      o.blocks = std::atoi(value);
      if (o.blocks < 1) Usage("--blocks must be at least 1");
      ++i;
    } else {
      Usage(("unknown or incomplete argument " + a).c_str());
    }
  }
  if (o.cpus[0] < 0) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) Usage("sched_getaffinity failed");
    int found = 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; ++c) {
      if (CPU_ISSET(c, &allowed)) o.cpus[found++] = c;
    }
    if (found < 2) Usage("this process may run on one CPU only: nothing to measure between");
  }
  return o;
}

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// The line the two threads hand back and forth, alone in its cache line.
struct alignas(64) Line {
  std::atomic<long> value{0};
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  Line line;
  const long total = o.trips * o.blocks;
  std::atomic<bool> pinned{true};
  // The partner answers every odd value with the next even one.
  std::thread partner([&] {
    if (!Pin(o.cpus[1])) pinned = false;
    for (long i = 0; i < total; ++i) {
      while (line.value.load(std::memory_order_acquire) != 2 * i + 1) {
        if (!pinned.load(std::memory_order_relaxed)) return;
      }
      line.value.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (!Pin(o.cpus[0])) pinned = false;
  std::vector<double> nanos;
  for (int b = 0; b < o.blocks && pinned.load(); ++b) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = b * o.trips; i < (b + 1) * o.trips; ++i) {
      line.value.store(2 * i + 1, std::memory_order_release);
      while (line.value.load(std::memory_order_acquire) != 2 * i + 2) {
        if (!pinned.load(std::memory_order_relaxed)) break;
      }
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    nanos.push_back(took.count() / o.trips);
  }
  partner.join();
  if (!pinned.load()) {
    std::fprintf(stderr, "collops-line-latency: cannot pin a thread to CPU %d or %d\n", o.cpus[0],
                 o.cpus[1]);
    return 1;
  }
  std::sort(nanos.begin(), nanos.end());
  const double median = nanos[nanos.size() / 2], fastest = nanos.front();
  if (o.json) {
    std::printf(
        "{\"system\": \"line-latency\", \"cpus\": [%d, %d], \"round_trip_ns_med\": %.1f, "
        "\"round_trip_ns_min\": %.1f}\n",
        o.cpus[0], o.cpus[1], median, fastest);
  } else {
    std::printf(
        "cache line round trip between CPUs %d and %d: median %.1f ns, fastest %.1f ns "
        "(%d blocks of %ld)\n",
        o.cpus[0], o.cpus[1], median, fastest, o.blocks, o.trips);
  }
  return 0;
}
