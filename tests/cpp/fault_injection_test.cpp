// Fault injection at scale: 8 lccl process ranks run a random schedule of every primitive
// (random_schedule.h) while one rank, at a random point, is killed (SIGKILL), stopped past the
// timeout (SIGSTOP, continued once the others have ended) or scribbles a random value over a
// random control field of the shared segment (any rank's: header, round counters, channels,
// agreement records, heap tables; the data slots are not, since a peer's data is whatever it
// writes). Every rank must then end within its bound either with a clear error (ERROR_PEER_LOST,
// ERROR_TIMEOUT or ERROR_COMM_FAIL; a scribble may also give ERROR_RANK_MISMATCH) or, after a
// scribble only, with correct outputs: never a crash, a hang, or a wrong output reported as
// success. After a kill or a stop every survivor's error names the faulted rank. Nothing may be
// left in /dev/shm, /tmp or SysV IPC.
//
// The test command runs a few trials; a long run sets the count (docs/reliability.md):
//   COLLOPS_TEST_FAULT_TRIALS=1000 COLLOPS_TEST_FAULT_SEED=1 build/tests/collops_tests
//     --gtest_filter='ProcessFaultInjection.*'
// It prints the faults by kind and the outcomes by kind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collops/status.h"
#include "core/comm/shm/process_comm.h"
#include "core/comm/shm/process_segment.h"
#include "process_ranks.h"
#include "random_schedule.h"
#include "thread_comm_test_util.h"

namespace collops {
namespace {

using testing::CaughtStatus;
using testing::MakeProcessComm;
using testing::NewJobId;
using testing::ProcessRanksOptions;
using testing::RunProcessRanks;

constexpr int kRanks = 8;
constexpr double kTimeoutSeconds = 3;
constexpr int kSteps = 8;
constexpr int64_t kMaxCount = 20000;

enum class Fault { kKill, kStop, kScribble };
const char* FaultName(Fault f) {
  return f == Fault::kKill ? "SIGKILL" : f == Fault::kStop ? "SIGSTOP" : "scribble";
}

/// One trial: which rank is faulted, how, and when (before schedule step `step`, -1: while the
/// communicator is created, kSteps: before the final barrier; then `delayMicros` later, from a
/// thread of the rank, so the fault lands at any point of a call).
struct Plan {
  Fault fault = Fault::kKill;
  int victim = 0;
  int step = 0;
  int delayMicros = 0;
  uint64_t seed = 0;
};

/// What a rank reports to the parent (in memory shared across the fork).
struct Report {
  std::atomic<int> done{0};  ///< 1 once the rank has filled in its outcome
  int status = 0;            ///< the Error's status; NO_ERROR after a clean run
  int wrongOutputs = 0;      ///< gtest failures of the schedule's checks
  double faultAt = 0;        ///< the victim: seconds since the trial began, when it struck
  char message[768] = {};    ///< the Error's message
  char scribbled[96] = {};   ///< the victim of a scribble: which field, which value
};

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// A control field of the segment: its offset from the segment's start and its size, and which
/// kind of block holds it (header, rank control, channel, agreement record, heap table).
struct Field {
  std::string name;
  size_t offset;
  size_t bytes;
  int block = 0;
};
constexpr int kBlocks = 5;

/// Every control field of `segment` a scribbling peer could write over.
std::vector<Field> ControlFields(const shm::Segment& segment, int ranks) {
  std::vector<Field> fields;
  const auto* base = reinterpret_cast<const uint8_t*>(&segment.Header());
  int block = 0;
  auto add = [&](const std::string& name, const void* at, size_t bytes) {
    fields.push_back(
        {name, static_cast<size_t>(static_cast<const uint8_t*>(at) - base), bytes, block});
  };
  const shm::SegmentHeader& h = segment.Header();
#define COLLOPS_HEADER_FIELD(f) add("header." #f, &h.f, sizeof h.f)
  COLLOPS_HEADER_FIELD(magic);
  COLLOPS_HEADER_FIELD(version);
  COLLOPS_HEADER_FIELD(rankSize);
  COLLOPS_HEADER_FIELD(slotBytes);
  COLLOPS_HEADER_FIELD(totalBytes);
  COLLOPS_HEADER_FIELD(heapBytes);
  for (int c = 0; c < shm::kCollectives; ++c) {
    add(Concat("header.policy.forced[", c, "]"), &h.policy.forced[c], sizeof h.policy.forced[c]);
  }
  COLLOPS_HEADER_FIELD(policy.oneShotMaxBytes);
  COLLOPS_HEADER_FIELD(policy.largeOneShotFromBytes);
  COLLOPS_HEADER_FIELD(policy.largeOneShotToBytes);
  COLLOPS_HEADER_FIELD(policy.chunkBytes);
  COLLOPS_HEADER_FIELD(policy.streamOutputBytes);
  COLLOPS_HEADER_FIELD(policy.spinNanos);
  COLLOPS_HEADER_FIELD(policy.yieldNanos);
  COLLOPS_HEADER_FIELD(policy.bindCpus);
  COLLOPS_HEADER_FIELD(policy.cpus);
  COLLOPS_HEADER_FIELD(policy.rankSize);
  COLLOPS_HEADER_FIELD(policy.crossMemoryMinBytes);
  COLLOPS_HEADER_FIELD(policy.crossMemoryPieceMinBytes);
  COLLOPS_HEADER_FIELD(policy.allReduceCrossMemory);
  COLLOPS_HEADER_FIELD(policy.crossMemoryMaxBytes);
  COLLOPS_HEADER_FIELD(abort);
#undef COLLOPS_HEADER_FIELD
  for (int r = 0; r < ranks; ++r) {
    block = 1;
    const shm::RankControl& c = segment.Rank(r);
    const std::string at = Concat("rank[", r, "].");
    add(at + "posted", &c.posted, 8);
    add(at + "value[0]", &c.value[0], 8);
    add(at + "value[1]", &c.value[1], 8);
    add(at + "direct[0]", &c.direct[0], 4);
    add(at + "direct[1]", &c.direct[1], 4);
    add(at + "cpu", &c.cpu, 4);
    add(at + "probeAddress", &c.probeAddress, 8);
    add(at + "probeReached", &c.probeReached, 4);
    add(at + "waitingRound", &c.waitingRound, 8);
    add(at + "waitingFor", &c.waitingFor, 4);
    add(at + "awakeAt", &c.awakeAt, 8);
    add(at + "word", &c.word, 4);
    add(at + "bell", &c.bell, 4);
    block = 2;
    for (int d = 0; d < ranks; ++d) {
      const shm::PairControl& pair = segment.Pair(r, d);
      for (int side = 0; side < 2; ++side) {
        const shm::PairSide& s = side == 0 ? pair.send : pair.recv;
        const std::string p = Concat("pair[", r, "][", d, "].", side == 0 ? "send." : "recv.");
        add(p + "messages", &s.messages, 8);
        add(p + "chunks", &s.chunks, 8);
        for (int m = 0; m < 2; ++m) {
          const std::string i = Concat("[", m, "]");
          add(p + "count" + i, &s.count[m], 8);
          add(p + "dtype" + i, &s.dtype[m], 4);
          add(p + "stagingHalf" + i, &s.stagingHalf[m], 4);
          add(p + "stagingOffset" + i, &s.stagingOffset[m], 8);
          add(p + "chunkBytes" + i, &s.chunkBytes[m], 8);
          add(p + "address" + i, &s.address[m], 8);
        }
      }
    }
    for (int parity = 0; parity < 2; ++parity) {
      // The agreement record: its round stamp, then the signature's header and counts.
      block = 3;
      if (segment.CarriesAgreement()) {
        const uint8_t* record = segment.Record(r, parity);
        const size_t words = (sizeof(uint64_t) + AgreementRecordBytes(ranks)) / 8;
        for (size_t w = 0; w < words; ++w) {
          add(Concat("record[", r, "][", parity, "]+", 8 * w), record + 8 * w, 8);
        }
      }
      block = 4;
      if (segment.HasDirectTables()) {
        const shm::DirectTable table = segment.Direct(r, parity);
        for (int j = 0; j < ranks; ++j) {
          add(Concat("direct[", r, "][", parity, "].from[", j, "]"), &table.from[j], 8);
          add(Concat("direct[", r, "][", parity, "].to[", j, "]"), &table.to[j], 8);
          add(Concat("direct[", r, "][", parity, "].at[", j, "]"), &table.at[j], 8);
        }
      }
    }
  }
  return fields;
}

/// Writes a random value over a random control field of `segment`, as a peer with a stray
/// pointer would; says which in `report`. The kind of block is drawn first, so the few fields
/// every call reads (the header, the round counters) are hit as often as the many channels.
void Scribble(const shm::Segment& segment, uint64_t seed, Report& report) {
  std::mt19937_64 draw(seed);
  std::vector<Field> fields;
  const int block = static_cast<int>(draw() % kBlocks);
  const std::vector<Field> all = ControlFields(segment, kRanks);
  for (const Field& f : all) {
    if (f.block == block) fields.push_back(f);
  }
  if (fields.empty()) fields = all;
  const Field& field = fields[draw() % fields.size()];
  const uint64_t value = draw();
  auto* at = reinterpret_cast<uint8_t*>(&segment.Header()) + field.offset;
  std::memcpy(at, &value, field.bytes);
  std::snprintf(report.scribbled, sizeof report.scribbled, "%s = 0x%llx", field.name.c_str(),
                static_cast<unsigned long long>(value));
}

/// One rank of a trial.
void RunRank(int rank, const Plan& plan, Report* reports,
             std::chrono::steady_clock::time_point start) {
  Report& mine = reports[rank];
  // Failures the parent recorded before the fork (earlier trials) are not this rank's.
  const int failedBefore = testing::FailedParts();
  const auto wrong = [&] { return testing::FailedParts() - failedBefore; };
  std::shared_ptr<shm::ProcessCommunicator> comm;
  std::thread striker;
  const bool victim = rank == plan.victim;
  // The fault strikes from a thread of its own, `delayMicros` after its step begins.
  auto strike = [&] {
    striker = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(plan.delayMicros));
      reports[rank].faultAt = Since(start);
      if (plan.fault == Fault::kKill) kill(getpid(), SIGKILL);
      if (plan.fault == Fault::kStop) kill(getpid(), SIGSTOP);
      if (plan.fault == Fault::kScribble) Scribble(comm->SharedSegment(), plan.seed, mine);
    });
  };
  try {
    if (victim && plan.step < 0) strike();
    comm = MakeProcessComm(rank, kRanks, "fault-injection");
    for (int step = 0; step < kSteps; ++step) {
      if (victim && step == plan.step) strike();
      testing::RunRandomSchedule(*comm, plan.seed * 100 + step, 1, kMaxCount);
      if (wrong() > 0) break;
      if (victim && striker.joinable()) striker.join();
    }
    if (victim && plan.step >= kSteps) strike();
    if (striker.joinable()) striker.join();
    if (wrong() == 0) comm->Barrier();
    mine.status = NO_ERROR;
  } catch (const Error& e) {
    mine.status = e.status();
    std::snprintf(mine.message, sizeof mine.message, "%s", e.what());
  }
  if (striker.joinable()) striker.join();
  mine.wrongOutputs = wrong();
  mine.done.store(1);
}

/// How one rank of a trial ended, as the parent classifies it.
enum class Outcome {
  kClean,       ///< correct outputs, no error (allowed after a scribble only)
  kPeerLost,    ///< ERROR_PEER_LOST
  kTimeout,     ///< ERROR_TIMEOUT
  kCommFail,    ///< ERROR_COMM_FAIL
  kMismatch,    ///< ERROR_RANK_MISMATCH (allowed after a scribble only)
  kOtherError,  ///< any other Status: a finding
  kWrong,       ///< a wrong output reported as success: a finding
  kCrash,       ///< died by a signal it was not sent, or exited without a report: a finding
  kHang,        ///< still running at the trial's deadline: a finding
  kLate,        ///< ended with a clear error, but past its bound: a finding
};
const char* OutcomeName(Outcome o) {
  static const char* const names[] = {"clean",
                                      "ERROR_PEER_LOST",
                                      "ERROR_TIMEOUT",
                                      "ERROR_COMM_FAIL",
                                      "ERROR_RANK_MISMATCH",
                                      "other error",
                                      "wrong output",
                                      "crash",
                                      "hang",
                                      "late"};
  return names[static_cast<int>(o)];
}

/// Files in `dir` whose names say collops made them. Not counted, since other tests may run
/// meanwhile and make them: directories (what a rank could leave is a file: a segment, a socket,
/// a lock; the project's scripts make temporary directories named for it) and the file stores of
/// the Python tests' rank launcher (tests/python/harness/c10d_ranks.py: collops-store-*).
std::set<std::string> CollopsEntries(const char* dir) {
  std::set<std::string> names;
  if (FILE* list = popen(Concat("ls -A ", dir, " 2>/dev/null").c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, list) != nullptr) {
      std::string name(line);
      if (!name.empty() && name.back() == '\n') name.pop_back();
      struct stat info{};
      const bool directory =
          lstat(Concat(dir, "/", name).c_str(), &info) == 0 && S_ISDIR(info.st_mode);
      const bool pythonStore = name.rfind("collops-store-", 0) == 0;
      if (!directory && !pythonStore &&
          (name.find("collops") != std::string::npos || name.find("lccl") != std::string::npos)) {
        names.insert(name);
      }
    }
    pclose(list);
  }
  return names;
}

/// SysV shared memory segments and semaphore sets created by any of `pids`.
int SysvOf(const std::set<pid_t>& pids) {
  int found = 0;
  std::ifstream shm("/proc/sysvipc/shm");
  std::string line;
  std::getline(shm, line);  // header: key shmid perms size cpid lpid ...
  while (std::getline(shm, line)) {
    std::istringstream fields(line);
    long long key, id, perms, size, cpid;
    if (fields >> key >> id >> perms >> size >> cpid && pids.count(static_cast<pid_t>(cpid))) {
      ++found;
    }
  }
  return found;
}

class Tally {
 public:
  void Fault(Fault f) { ++faults_[FaultName(f)]; }
  void Add(Outcome o) { ++outcomes_[OutcomeName(o)]; }
  void Named(bool named) { ++(named ? named_ : unnamed_); }
  std::string Summary() const {
    std::ostringstream out;
    out << "faults:";
    for (const auto& [name, n] : faults_) out << " " << name << " " << n;
    out << "; rank outcomes:";
    for (const auto& [name, n] : outcomes_) out << " " << name << " " << n;
    out << "; survivors' errors naming the faulted rank: " << named_ << " of " << named_ + unnamed_;
    return out.str();
  }

 private:
  std::map<std::string, int> faults_, outcomes_;
  int named_ = 0, unnamed_ = 0;
};

bool NamesRank(const std::string& message, int rank) {
  for (const std::string& form : {Concat("rank ", rank, " ("), Concat("ranks ", rank, " ("),
                                  Concat(", ", rank, " ("), Concat("rank ", rank, " ")}) {
    if (message.find(form) != std::string::npos) return true;
  }
  return false;
}

/// Runs one trial; records its faults and outcomes in `tally` and a gtest failure for each
/// finding.
void RunTrial(const Plan& plan, Tally& tally, std::set<pid_t>& pids) {
  auto* reports = static_cast<Report*>(mmap(
      nullptr, sizeof(Report) * kRanks, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(reports, MAP_FAILED);
  for (int r = 0; r < kRanks; ++r) new (&reports[r]) Report;
  const std::string jobId = NewJobId();
  std::fflush(stdout);
  std::fflush(stderr);
  const auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> rankPids(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("COLLOPS_JOB_ID", jobId.c_str(), 1);
      setenv("COLLOPS_TIMEOUT", Concat(kTimeoutSeconds).c_str(), 1);
      RunRank(rank, plan, reports, start);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(0);
    }
    ASSERT_GT(pid, 0) << "fork failed";
    rankPids[rank] = pid;
    pids.insert(pid);
  }
  tally.Fault(plan.fault);
  // Bounds, from the fault: a death is seen within a sleep slice, a stopped rank after the
  // timeout of every wait that needs it (two in a row at most: the one that sees it, then the
  // abort); slack for a host whose 2 CPUs run 8 ranks and more. The trial's deadline is later
  // still: a rank still running then hangs.
  const double bound = 2 * kTimeoutSeconds + 15;
  const double deadline = 60 + 4 * kTimeoutSeconds;
  std::vector<int> waitStatus(kRanks, 0);
  std::vector<double> endedAt(kRanks, -1);
  std::vector<bool> hung(kRanks, false);
  bool continued = false;
  for (int running = kRanks; running > 0;) {
    const bool late = Since(start) > deadline;
    running = 0;
    for (int r = 0; r < kRanks; ++r) {
      if (endedAt[r] >= 0) continue;
      if (late) {
        kill(rankPids[r], SIGKILL);
        hung[r] = true;
      }
      int status = 0;
      if (waitpid(rankPids[r], &status, late ? 0 : WNOHANG) == rankPids[r]) {
        waitStatus[r] = status;
        endedAt[r] = Since(start);
      } else {
        ++running;
      }
    }
    // The stopped rank is continued once every other rank has ended: it must then end too.
    if (plan.fault == Fault::kStop && !continued && running == 1 && endedAt[plan.victim] < 0) {
      kill(rankPids[plan.victim], SIGCONT);
      continued = true;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double faultAt = reports[plan.victim].faultAt;
  const std::string what =
      Concat(FaultName(plan.fault), " of rank ", plan.victim, " (seed ", plan.seed, ", step ",
             plan.step, ", +", plan.delayMicros, " us",
             reports[plan.victim].scribbled[0] ? Concat(", ", reports[plan.victim].scribbled)
                                               : std::string(),
             ")");
  // COLLOPS_TEST_FAULT_TRACE=1: every trial's fault and every rank's end, on stderr.
  static const bool trace = std::getenv("COLLOPS_TEST_FAULT_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "trial: %s, fault at %.3f s\n", what.c_str(), faultAt);
  for (int r = 0; r < kRanks; ++r) {
    const Report& report = reports[r];
    const int status = waitStatus[r];
    if (trace) {
      std::fprintf(stderr, "  rank %d: ended at %.3f s, %s: %s\n", r, endedAt[r],
                   StatusName(report.status), report.message);
    }
    const bool killedVictim = plan.fault == Fault::kKill && r == plan.victim &&
                              WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (killedVictim) continue;
    Outcome outcome;
    if (hung[r]) {
      outcome = Outcome::kHang;
    } else if (WIFSIGNALED(status) || !report.done.load()) {
      outcome = Outcome::kCrash;
    } else if (report.wrongOutputs > 0) {
      outcome = Outcome::kWrong;
    } else if (report.status == NO_ERROR) {
      outcome = Outcome::kClean;
    } else if (report.status == ERROR_PEER_LOST) {
      outcome = Outcome::kPeerLost;
    } else if (report.status == ERROR_TIMEOUT) {
      outcome = Outcome::kTimeout;
    } else if (report.status == ERROR_COMM_FAIL) {
      outcome = Outcome::kCommFail;
    } else if (report.status == ERROR_RANK_MISMATCH) {
      outcome = Outcome::kMismatch;
    } else {
      outcome = Outcome::kOtherError;
    }
    const bool survivor = r != plan.victim;
    // A clean end is fine after a scribble (the field was not read, or rewritten first); after a
    // kill or a stop every rank must have noticed, the victim of a stop included.
    bool allowed = outcome == Outcome::kPeerLost || outcome == Outcome::kTimeout ||
                   outcome == Outcome::kCommFail ||
                   (plan.fault == Fault::kScribble &&
                    (outcome == Outcome::kClean || outcome == Outcome::kMismatch));
    if (allowed && outcome != Outcome::kClean && faultAt > 0 && survivor &&
        endedAt[r] > faultAt + bound) {
      outcome = Outcome::kLate;
      allowed = false;
    }
    tally.Add(outcome);
    if (allowed && survivor && plan.fault != Fault::kScribble) {
      const bool named = NamesRank(report.message, plan.victim);
      tally.Named(named);
      EXPECT_TRUE(named) << what << ": rank " << r << "'s error does not name rank " << plan.victim
                         << ": " << report.message;
    }
    EXPECT_TRUE(allowed) << what << ": rank " << r << " ended " << OutcomeName(outcome) << " at "
                         << endedAt[r] << " s (fault at " << faultAt << " s): " << report.message;
  }
  munmap(reports, sizeof(Report) * kRanks);
}

TEST(ProcessFaultInjection, SurvivorsEndWithAClearErrorAndLeaveNothingBehind) {
  const char* trialsText = std::getenv("COLLOPS_TEST_FAULT_TRIALS");
  const char* seedText = std::getenv("COLLOPS_TEST_FAULT_SEED");
  const int trials = trialsText != nullptr ? std::atoi(trialsText) : 6;
  const uint64_t seed = seedText != nullptr ? std::strtoull(seedText, nullptr, 10) : 0;
  // COLLOPS_TEST_FAULT_KIND=kill|stop|scribble: that kind only; COLLOPS_TEST_FAULT_ONLY=N: trial
  // N alone (the same plan as in the full run of the seed), to reproduce a finding.
  const std::string kind =
      std::getenv("COLLOPS_TEST_FAULT_KIND") ? std::getenv("COLLOPS_TEST_FAULT_KIND") : "";
  const int only = std::getenv("COLLOPS_TEST_FAULT_ONLY")
                       ? std::atoi(std::getenv("COLLOPS_TEST_FAULT_ONLY"))
                       : -1;
  const std::set<std::string> shmBefore = CollopsEntries("/dev/shm");
  const std::set<std::string> tmpBefore = CollopsEntries("/tmp");
  std::mt19937_64 draw(seed * 7919 + 17);
  Tally tally;
  std::set<pid_t> pids;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < trials; ++t) {
    Plan plan;
    // Every kind in turn, the rest drawn.
    plan.fault = kind == "kill"       ? Fault::kKill
                 : kind == "stop"     ? Fault::kStop
                 : kind == "scribble" ? Fault::kScribble
                                      : static_cast<Fault>(t % 3);
    plan.victim = static_cast<int>(draw() % kRanks);
    // -1: while the communicator is created; kSteps: before the final barrier. A scribble needs
    // the segment, so never during creation.
    const int first = plan.fault == Fault::kScribble ? 0 : -1;
    plan.step = first + static_cast<int>(draw() % (kSteps + 1 - first));
    plan.delayMicros = static_cast<int>(draw() % 3000);
    plan.seed = seed * 100000 + static_cast<uint64_t>(t) + 1;
    if (only >= 0 && t != only) continue;
    RunTrial(plan, tally, pids);
    if (::testing::Test::HasFatalFailure()) break;
  }
  std::printf("fault injection: %d trials of %d ranks in %.0f s; %s\n", trials, kRanks,
              Since(start), tally.Summary().c_str());
  EXPECT_EQ(CollopsEntries("/dev/shm"), shmBefore);
  EXPECT_EQ(CollopsEntries("/tmp"), tmpBefore);
  EXPECT_EQ(SysvOf(pids), 0) << "SysV shared memory left by a rank";
}

// A rank stopped in the middle of a call (SIGSTOP, as the trials above send, or a host that swaps
// it out) may resume after its peers have timed out and find the rest of its rounds posted (the
// peers posted them before giving up); it must not return, as a success, outputs read from heap
// buffers the peers freed on their way out. A peer that gives up publishes its abort record
// first, so every round and every group of sends and receives checks it last. Rank 0 below plays
// such a peer by writing the segment itself: the abort record, then the round (or the message)
// rank 1 waits for.

/// Waits (up to 30 s) until `ready()`.
template <class Ready>
void AwaitSegment(Ready&& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ready() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_TRUE(ready()) << "rank 1 never got there";
}

ProcessRanksOptions LatePeerOptions() {
  ProcessRanksOptions options;
  options.env["COLLOPS_TIMEOUT"] = "10";
  options.env["COLLOPS_SHM_CMA_BYTES"] = "0";  // no creation probe: rank 1 starts at round 0
  return options;
}

TEST(ProcessFaultInjection, ARoundWhosePeerGaveUpMeanwhileFails) {
  RunProcessRanks(
      2,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, 2, "late-round");
        const shm::Segment& segment = comm->SharedSegment();
        if (rank == 0) {
          const uint64_t round = comm->Rounds() + 1;
          AwaitSegment([&] { return segment.Rank(1).posted.load() >= round; });
          segment.Header().abort.store(shm::PackAbort({1, 0, static_cast<int32_t>(ERROR_TIMEOUT)}));
          segment.Rank(0).posted.store(round, std::memory_order_release);
          segment.Rank(0).word.Notify();
          std::this_thread::sleep_for(std::chrono::seconds(1));  // alive while rank 1 looks
          return;
        }
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { comm->Barrier(); }, &message), ERROR_TIMEOUT) << message;
        EXPECT_NE(message.find("rank 0 (pid "), std::string::npos) << message;
        EXPECT_NE(message.find("gave up waiting for this rank"), std::string::npos) << message;
      },
      LatePeerOptions());
}

TEST(ProcessFaultInjection, AReceiveWhoseSenderGaveUpMeanwhileFails) {
  constexpr size_t kCount = 16;
  RunProcessRanks(
      2,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, 2, "late-receive");
        const shm::Segment& segment = comm->SharedSegment();
        if (rank == 0) {
          // A staged message of one chunk, announced and written, then given up on.
          shm::PairSide& side = segment.Pair(0, 1).send;
          AwaitSegment([&] { return segment.Pair(0, 1).recv.messages.load() >= 1; });
          side.count[1] = kCount;
          side.dtype[1] = ACL_FLOAT;
          side.stagingHalf[1] = 0;
          side.stagingOffset[1] = 0;
          side.chunkBytes[1] = 4096;
          side.address[1] = 0;
          segment.Header().abort.store(shm::PackAbort({1, 0, static_cast<int32_t>(ERROR_TIMEOUT)}));
          side.chunks.store(1, std::memory_order_release);
          side.messages.store(1, std::memory_order_release);
          segment.Rank(1).bell.Notify();
          std::this_thread::sleep_for(std::chrono::seconds(1));
          return;
        }
        std::vector<float> buffer(kCount);
        std::string message;
        EXPECT_EQ(CaughtStatus([&] { comm->Recv(buffer.data(), kCount, ACL_FLOAT, 0); }, &message),
                  ERROR_TIMEOUT)
            << message;
        EXPECT_NE(message.find("gave up waiting for this rank"), std::string::npos) << message;
      },
      LatePeerOptions());
}

// With one rank stopped (as in the trials above), a survivor may wait in a receive from a second
// survivor that itself waits for the stopped rank. Whichever times out first must name the
// stopped rank, not the live survivor it happened to wait for: every other rank repeats its
// culprit. A rank that sleeps in a wait publishes for whom, and a timeout follows that chain.
TEST(ProcessFaultInjection, ATimeoutNamesTheRankAtTheEndOfTheWaits) {
  constexpr size_t kCount = 4;
  ProcessRanksOptions options = LatePeerOptions();
  options.env["COLLOPS_TIMEOUT"] = "3";
  RunProcessRanks(
      3,
      [&](int rank) {
        auto comm = MakeProcessComm(rank, 3, "wait-chain");
        if (rank == 2) {  // alive, but never makes its send
          std::this_thread::sleep_for(std::chrono::seconds(8));
          return;
        }
        // Rank 0 waits for rank 1 from the start, rank 1 for rank 2 from a second later: rank 0's
        // wait times out first.
        if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(1));
        std::vector<float> buffer(kCount);
        std::string message;
        EXPECT_EQ(
            CaughtStatus([&] { comm->Recv(buffer.data(), kCount, ACL_FLOAT, rank + 1); }, &message),
            ERROR_TIMEOUT)
            << message;
        EXPECT_NE(message.find("rank 2 (pid "), std::string::npos) << message;
      },
      options);
}

}  // namespace
}  // namespace collops
