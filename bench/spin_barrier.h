// A barrier outside collops, for `collops-bench --timing spin`: a synchronized start whose cost
// and exit skew belong to no library under test. bench/python_paths.py starts its calls the same
// way, so the C++ engine and the Python paths are timed from the same kind of start.
//
// Every rank owns one word (its own cache line) in memory all ranks share, and bumps it to its
// round number on arrival; it leaves when every word has reached that round. Single writer per
// word, so no read-modify-write is needed. With more ranks than CPUs a waiting rank yields its
// CPU on every look, so the rank it waits for can run.
#pragma once

#include <sched.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "bench/bench_layout.h"

namespace collops_bench {

class SpinBarrier {
 public:
  /// Bytes of shared memory `ranks` ranks need (zero-filled before the first Wait).
  static size_t Bytes(int ranks) { return static_cast<size_t>(ranks) * kStride; }

  /// `words`: Bytes(ranks) zeroed bytes every rank maps. `yield`: give up the CPU while waiting
  /// (more ranks than CPUs).
  SpinBarrier(void* words, int ranks, int rank, bool yield)
      : words_(static_cast<uint8_t*>(words)), ranks_(ranks), rank_(rank), yield_(yield) {}

  /// Returns once every rank has called Wait as often as this one. Throws after `timeoutSeconds`
  /// (a rank that died never arrives).
  void Wait(double timeoutSeconds = 120) {
    ++round_;
    __atomic_store_n(Word(rank_), round_, __ATOMIC_RELEASE);
    const double deadline = NowSeconds() + timeoutSeconds;
    for (int r = 0; r < ranks_; ++r) {
      uint32_t looks = 0;
      while (__atomic_load_n(Word(r), __ATOMIC_ACQUIRE) < round_) {
        if (yield_) {
          sched_yield();
        } else {
          CpuRelax();
        }
        if (++looks % 4096 == 0 && NowSeconds() > deadline) {
          throw std::runtime_error("spin barrier: rank " + std::to_string(r) +
                                   " did not arrive within " + std::to_string(timeoutSeconds) +
                                   " s");
        }
      }
    }
  }

 private:
  static constexpr size_t kStride = 64;  // one cache line per rank's word
  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  uint64_t* Word(int r) const { return reinterpret_cast<uint64_t*>(words_ + r * kStride); }

  uint8_t* words_;
  int ranks_;
  int rank_;
  bool yield_;
  uint64_t round_ = 0;
};

}  // namespace collops_bench
