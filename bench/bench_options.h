// The benchmarks' command line, in nccl-tests' spelling (-b/-e/-f sizes, -o op, -d dtype, -w,
// -n, -c): parsing that refuses what it cannot run, naming the option, and the list of sizes.
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

namespace collops_bench {

/// How collops-bench hosts its ranks: forked processes (lccl, commMode 0), threads of one process
/// (lccl, commMode 1), or one process per rank started by mpirun (backend "hccl", commMode 0: lccl
/// on one host, hierarchical across hosts).
enum class Mode { kProcess, kThread, kMpirun };

/// How collops-bench times a call (--timing): after a BarrierOperation (the default), after a
/// barrier outside collops (spin: every rank spins on a word of its own in memory the ranks
/// share, the start Python benchmarks use too), or back to back (loop: no barrier between calls,
/// the mean per call of the timed run, as a tight loop of calls sees it).
enum class Timing { kBarrier, kSpin, kLoop };

/// --timing's spelling, in Timing's order.
inline const char* TimingName(Timing t) {
  static const char* const kNames[] = {"barrier", "spin", "loop"};
  return kNames[static_cast<int>(t)];
}

/// Which benchmark reads the command line: each accepts only the options that apply to it.
enum class Tool { kBench, kMpiBench, kMemLimit };

/// The program's name, in Tool's order.
inline const char* ToolName(Tool tool) {
  static const char* const kNames[] = {"collops-bench", "collops-mpi-bench", "collops-memlimit"};
  return kNames[static_cast<int>(tool)];
}

/// Command line shared by the benchmarks (nccl-tests spelling).
struct Options {
  int64_t minBytes = 8;
  int64_t maxBytes = 64 << 20;
  int64_t factor = 4;
  Op op = Op::kAllReduce;
  const DtypeInfo* dtype = &AllDtypes()[0];
  int ranks = 2;
  /// -r was given (collops-bench --mode mpirun refuses it: mpirun -np sets the ranks)
  bool ranksGiven = false;
  Mode mode = Mode::kProcess;
  int warmup = 5;
  /// --settle-ms: the warm-up also lasts at least this long (WarmUp)
  double settleSeconds = 0.3;
  int iters = 20;
  bool check = false;
  bool json = false;
  /// --shared: data buffers from the communicator's AllocateShared() (collops-bench, process mode)
  bool shared = false;
  /// --algorithms: print the algorithm table and exit (collops-bench)
  bool algorithms = false;
  /// --timing (collops-bench)
  Timing timing = Timing::kBarrier;
};

/// Parses a size as nccl-tests reads -b and -e: a positive integer of bytes with an optional K, M
/// or G suffix (either case, powers of 1024). Returns "" and sets `bytes`, or says what is wrong.
inline std::string ParseBytes(const std::string& text, int64_t* bytes) {
  const char* const what =
      "not a size (a positive integer of bytes, optionally with a K, M or G suffix: 8, 64K, 1G)";
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || text.size() - digits > 1) return what;
  int64_t unit = 1;
  if (digits < text.size()) {
    switch (text[digits]) {
      case 'K':
      case 'k':
        unit = int64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        unit = int64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        unit = int64_t{1} << 30;
        break;
      default:
        return what;
    }
  }
  int64_t v = 0;
  for (size_t i = 0; i < digits; ++i) {
    const int d = text[i] - '0';
    if (v > (INT64_MAX - d) / 10) return "too large (sizes stop at 2^63 - 1 bytes)";
    v = v * 10 + d;
  }
  if (v > INT64_MAX / unit) return "too large (sizes stop at 2^63 - 1 bytes)";
  if (v == 0) return "not a size (sizes start at 1 byte)";
  *bytes = v * unit;
  return "";
}

/// Parses a decimal integer in [lo, hi] (no suffix, nothing after it). False when it is not one.
inline bool ParseInt(const std::string& text, int64_t lo, int64_t hi, int64_t* value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *value = v;
  return true;
}

/// This machine's physical memory in bytes (0 when unknown): no size above it can be allocated.
inline int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || pageSize <= 0 || pages > INT64_MAX / pageSize) return 0;
  return static_cast<int64_t>(pages) * pageSize;
}

/// "" when `op` can run on `ranks` ranks, else why not: every tool says it in the same words,
/// after naming where its rank count came from (-r 2, mpirun -np 2).
inline std::string RankCountError(Op op, int ranks) {
  if (ranks < 1) return "needs at least 1 rank";
  if (op == Op::kSendRecv && ranks < 2) {
    return "sendrecv needs at least 2 ranks (each rank sends to the next one and receives from "
           "the previous one, never from itself)";
  }
  return "";
}

/// False on a rank other than 0 of an mpirun job (OpenMPI's environment): one rank reports
/// command-line errors for all, as every rank parses the same line.
inline bool ReportsForTheJob() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank == nullptr || std::strcmp(rank, "0") == 0;
}

inline void PrintUsage(Tool tool, FILE* out) {
  const bool runsOps = tool != Tool::kMemLimit;
  std::fprintf(out, "usage: %s [options]\n", ToolName(tool));
  if (tool == Tool::kMpiBench) {
    std::fprintf(out, "  (start it with mpirun -np R: the ranks are mpirun's)\n");
  }
  std::fprintf(out,
               "  -b SIZE         smallest size S in bytes (default 8). SIZE: a positive integer,\n"
               "                  optionally with a K, M or G suffix (powers of 1024), e.g. 64K\n"
               "  -e SIZE         largest size (default 64M); -b <= -e\n"
               "  -f N            size factor from -b up to -e, an integer >= 2 (default 4)\n");
  if (runsOps) {
    std::fprintf(out,
                 "  -o OP           allreduce allgather allgatherv reducescatter reducescatterv\n"
                 "                  broadcast alltoall alltoallv sendrecv (default allreduce)\n"
                 "  -d DTYPE        float32 float64 float16 bfloat16 int8 int16 int32 int64 uint8\n"
                 "                  (default float32)\n");
  }
  std::fprintf(out, "  -w N            warm-up calls per size, >= 0 (default 5)\n");
  if (runsOps) {
    std::fprintf(
        out, "  --settle-ms MS  warm up for at least MS milliseconds too, >= 0 (default 300)\n");
  }
  std::fprintf(out, "  -n N            timed iterations per size, >= 1 (default 20)\n");
  if (runsOps) {
    std::fprintf(out,
                 "  -c [0|1]        check every result against golden values: -c or -c 1 on,\n"
                 "                  -c 0 off (the default)\n");
  }
  std::fprintf(out, "  --json          one JSON line per row instead of the table\n");
  if (tool == Tool::kBench) {
    std::fprintf(
        out,
        "  -r N            ranks, >= 1 (>= 2 for sendrecv; default 2)\n"
        "  --mode M        process: forked ranks (lccl, the default); thread: threads of\n"
        "                  this process; mpirun: the ranks mpirun -np started (no -r)\n"
        "  --shared        data buffers from Communicator::AllocateShared (--mode process)\n"
        "  --timing T      barrier: a BarrierOperation before every timed call (the default);\n"
        "                  spin: a barrier outside collops before every call (ranks spin on\n"
        "                  words in shared memory; process and thread modes); loop: calls back\n"
        "                  to back, the mean per call (every iteration shows it)\n"
        "  --algorithms    print every engine's algorithms (the COLLOPS_ALGO_* names) and exit\n");
  }
  std::fprintf(out, "  -h, --help      this text\n");
}

/// Reports a command-line error naming the option, and exits 2 (a usage error).
[[noreturn]] inline void UsageError(Tool tool, const std::string& message) {
  if (ReportsForTheJob()) {
    std::fprintf(stderr, "%s: %s\n%s --help lists the options\n", ToolName(tool), message.c_str(),
                 ToolName(tool));
  }
  std::exit(2);
}

/// Whether `option` is one of `tool`'s (every tool knows the others' options, to say so).
inline bool Accepts(Tool tool, const std::string& option) {
  static const char* const kEvery[] = {"-b", "-e", "-f", "-w", "-n", "--json"};
  static const char* const kOps[] = {"-o", "-d", "-c", "--settle-ms"};
  static const char* const kBenchOnly[] = {"-r", "--mode", "--shared", "--algorithms", "--timing"};
  for (const char* o : kEvery) {
    if (option == o) return true;
  }
  for (const char* o : kOps) {
    if (option == o) return tool != Tool::kMemLimit;
  }
  for (const char* o : kBenchOnly) {
    if (option == o) return tool == Tool::kBench;
  }
  return false;
}

/// Parses argv for `tool`. --help prints the usage and exits 0; an unknown option, a missing or
/// bad value, or options that contradict each other exit 2 with a message naming the option.
inline Options ParseOptions(int argc, char** argv, Tool tool) {
  Options o;
  std::string minText = "8", maxText = "64M";
  bool minGiven = false, maxGiven = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      if (ReportsForTheJob()) PrintUsage(tool, stdout);
      std::exit(0);
    }
    if (!Accepts(tool, a)) {
      const bool known = Accepts(Tool::kBench, a);
      UsageError(tool,
                 known ? a + " does not apply to " + ToolName(tool) : "unknown option '" + a + "'");
    }
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (a == "--shared") {
      o.shared = true;
      continue;
    }
    if (a == "--algorithms") {
      o.algorithms = true;
      continue;
    }
    if (a == "-c") {
      // nccl-tests spells it -c 1 / -c 0; a bare -c (what bench/compare passes) turns it on.
      o.check = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') {
        const std::string v = argv[++i];
        if (v != "0" && v != "1") UsageError(tool, "-c " + v + ": give 0 (off) or 1 (on)");
        o.check = v == "1";
      }
      continue;
    }
    if (i + 1 >= argc) UsageError(tool, a + " needs a value");
    const std::string v = argv[++i];
    const std::string given = a + " " + v + ": ";
    int64_t n = 0;
    if (a == "-b" || a == "-e") {
      const std::string why = ParseBytes(v, a == "-b" ? &o.minBytes : &o.maxBytes);
      if (!why.empty()) UsageError(tool, given + why);
      (a == "-b" ? minText : maxText) = v;
      (a == "-b" ? minGiven : maxGiven) = true;
    } else if (a == "-f") {
      if (!ParseInt(v, 2, INT64_MAX, &n)) UsageError(tool, given + "give an integer >= 2");
      o.factor = n;
    } else if (a == "-w") {
      if (!ParseInt(v, 0, INT32_MAX, &n)) UsageError(tool, given + "give an integer >= 0");
      o.warmup = static_cast<int>(n);
    } else if (a == "-n") {
      if (!ParseInt(v, 1, INT32_MAX, &n)) UsageError(tool, given + "give an integer >= 1");
      o.iters = static_cast<int>(n);
    } else if (a == "-r") {
      if (!ParseInt(v, 1, INT32_MAX, &n)) UsageError(tool, given + "give an integer >= 1");
      o.ranks = static_cast<int>(n);
      o.ranksGiven = true;
    } else if (a == "--settle-ms") {
      char* end = nullptr;
      const double ms = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(ms >= 0) || !std::isfinite(ms)) {
        UsageError(tool, given + "give a number of milliseconds >= 0");
      }
      o.settleSeconds = ms / 1000;
    } else if (a == "--mode") {
      if (v == "process")
        o.mode = Mode::kProcess;
      else if (v == "thread")
        o.mode = Mode::kThread;
      else if (v == "mpirun")
        o.mode = Mode::kMpirun;
      else
        UsageError(tool, given + "give process, thread or mpirun");
    } else if (a == "--timing") {
      if (v == "barrier")
        o.timing = Timing::kBarrier;
      else if (v == "spin")
        o.timing = Timing::kSpin;
      else if (v == "loop")
        o.timing = Timing::kLoop;
      else
        UsageError(tool, given + "give barrier, spin or loop");
    } else if (a == "-o") {
      bool found = false;
      for (const auto& info : AllOps()) {
        if (v == info.name) o.op = info.op, found = true;
      }
      if (!found) {
        UsageError(tool, given +
                             "not an op (allreduce allgather allgatherv reducescatter "
                             "reducescatterv broadcast alltoall alltoallv sendrecv)");
      }
    } else if (a == "-d") {
      o.dtype = nullptr;
      for (const auto& d : AllDtypes()) {
        if (v == d.name) o.dtype = &d;
      }
      if (o.dtype == nullptr) {
        UsageError(tool, given +
                             "not a dtype (float32 float64 float16 bfloat16 int8 int16 int32 "
                             "int64 uint8)");
      }
    }
  }
  // Whatever runs needs at least one buffer of S bytes: beyond the machine's memory it never fits.
  const int64_t memory = PhysicalMemoryBytes();
  for (bool isMin : {true, false}) {
    const int64_t bytes = isMin ? o.minBytes : o.maxBytes;
    if ((isMin ? minGiven : maxGiven) && memory > 0 && bytes > memory) {
      UsageError(tool, std::string(isMin ? "-b " : "-e ") + (isMin ? minText : maxText) +
                           ": more than this machine's memory (" + std::to_string(memory >> 20) +
                           " MiB), so its buffers could never be allocated");
    }
  }
  if (o.minBytes > o.maxBytes) {
    UsageError(tool, "-b " + minText + " is larger than -e " + maxText + ": no size to run");
  }
  if (tool == Tool::kMpiBench && o.maxBytes / static_cast<int64_t>(o.dtype->size) > INT32_MAX) {
    UsageError(tool, "-e " + maxText + ": more " + o.dtype->name +
                         " elements than an MPI count (an int) holds");
  }
  if (tool == Tool::kBench) {
    if (o.shared && o.mode != Mode::kProcess) {
      UsageError(tool, std::string("--shared applies to --mode process only (") +
                           (o.mode == Mode::kThread ? "thread ranks share their memory already"
                                                    : "mpirun ranks use ordinary buffers") +
                           ")");
    }
    if (o.timing == Timing::kSpin && o.mode == Mode::kMpirun) {
      UsageError(tool,
                 "--timing spin applies to --mode process and thread (mpirun's ranks share no "
                 "memory to spin on)");
    }
    if (o.ranksGiven && o.mode == Mode::kMpirun) {
      UsageError(tool, "-r does not apply to --mode mpirun: the ranks are mpirun -np's");
    }
    if (o.mode != Mode::kMpirun) {
      const std::string why = RankCountError(o.op, o.ranks);
      if (!why.empty()) UsageError(tool, "-r " + std::to_string(o.ranks) + ": " + why);
    }
  }
  return o;
}

/// -b, -b·f, -b·f², ... up to -e (never past it, never overflowing).
inline std::vector<int64_t> Sizes(const Options& o) {
  std::vector<int64_t> sizes;
  for (int64_t s = o.minBytes; s > 0 && s <= o.maxBytes; s *= o.factor) {
    sizes.push_back(s);
    if (s > o.maxBytes / o.factor) break;
  }
  return sizes;
}

}  // namespace collops_bench
