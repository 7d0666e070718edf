#include "core/comm/shm/process_comm.h"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "collops/backend.h"
#include "core/comm/shm/cross_memory_policy.h"
#include "core/comm/shm/process_rendezvous.h"
#include "core/comm/shm/rank_list.h"

namespace collops {
namespace shm {
namespace {

/// AllReduce auto rule: up to this many bytes one round (copy in, everyone reduces everything)
/// beats reduce-scatter + all-gather, whose second round costs more than it saves. With more
/// ranks than CPUs everyone's reductions of everything run in turn, and rsag wins from 16 KiB
/// (R=4 on 2 CPUs, us, oneshot vs rsag: 4 KiB 5.0-7.1 vs 7.4-11, 8 KiB 10.5-12.2 vs 9.4-12.7,
/// 16 KiB 13.4-14.8 vs 9.9-13.9, 32 KiB 22-24 vs 13-19; R=7: 4 KiB 9.8-12 vs 14.6-15.4, 16 KiB
/// 20-26 vs 18.6-19.3, 64 KiB 52-57 vs 34-35; R=3 16 KiB 9.5-10.3 vs 8.8-9.2).
constexpr uint64_t kOneShotMaxBytes = 64 << 10;
constexpr uint64_t kOversubscribedOneShotMaxBytes = 8 << 10;
/// Two ranks with a CPU each: past 512 KiB one-shot beats rsag again, up to half a slot (one
/// round). Each moves about the same bytes, and from there rsag's extra round and the slices it
/// reads back cost more than one-shot's redundant reduction. Where cma takes AllReduce (from
/// 32 KiB) this never applies; where it does not (a costly kernel copy, or none allowed), R=2,
/// bound, EPYC VM of 2026-11-28, clean runs, one-shot vs rsag: 64 KiB 12.4-14.1 vs 10.5-10.8 us,
/// 256 KiB 43-50 vs 29-34, 512 KiB 55-58 vs 50-61, 1 MiB 65-78 vs 96-125, 2 MiB 127-160 vs
/// 279-335.
constexpr uint64_t kTwoRankOneShotFromBytes = 512 << 10;
constexpr uint64_t kTwoRankOneShotToBytes = 2 << 20;
/// Reduce-scatter + all-gather chunk, capped at half a slot. Measured on the shared 2-core VM:
/// every extra round costs a scheduling delay whenever the host is busy (1 MiB at R=2: 960 us with
/// 256 KiB chunks, 190 us with 2 MiB), while on an idle host the cache locality that smaller
/// chunks buy is worth only a few microseconds. So: as few rounds as the buffer allows.
constexpr uint64_t kChunkBytes = 2 << 20;
/// Outputs from this size up are written with non-temporal stores (process_copy.h says why).
/// Measured at R=2, medians of 5 interleaved runs, streaming vs not: AllReduce 1 MiB 227 vs 203 us
/// (the output still fits the caches), 2 MiB 632 vs 939, 4 MiB 1.80 vs 2.26 ms, 64 MiB 16.5 vs
/// 19.4 ms; AllToAllV 64 MiB 11.9 vs 15.3 ms; AllGather 64 MiB 12.4 vs 15.9 ms.
constexpr uint64_t kStreamOutputBytes = 2 << 20;
/// AllToAllV pieces from kCrossMemoryMinBytes up move by process_vm_readv (one copy, by the
/// receiver) instead of through the slots (two). One piece alone on a 2-core Xeon VM: 64 KiB 2.4 us
/// by process_vm_readv vs 2.8 us for two copies, 1 MiB 54 vs 90 us, 16 KiB 0.7 vs 0.3 us (the
/// syscall's fixed cost). In the collective, R=2 AllToAllV of 64 KiB (pieces of 21-43 KiB):
/// 7.9 us with 64 KiB here, 3.5 us with 16 KiB, 3.6-3.9 us with 8 KiB. Where the kernel copy is
/// slow, cross_memory_policy.h turns it off for oversubscribed communicators.
/// AllReduce, AllGather(V) and Broadcast by process_vm_readv/writev until R times the output bytes
/// reach this; beyond it the ranks' buffers no longer fit the caches, and the staged copies, whose
/// copies out stream past them, are faster. Measured (ms, medians, staged vs cma): AllReduce R=2
/// 16 MiB 2.83 vs 1.92, 32 MiB 5.87 vs 6.35, 64 MiB 12.9 vs 15.9; R=4 (2 cores) 4 MiB 1.48-1.66
/// vs 1.27, 8 MiB 2.98 vs 2.60, 16 MiB 6.05 vs 8.06-8.94; Broadcast R=2 16 MiB 1.55-1.66 vs 1.49,
/// 64 MiB 6.9-7.1 vs 7.8-8.4.
constexpr uint64_t kCrossMemoryMaxBytes = 32 << 20;

int CpusAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

int64_t EnvInt(const char* name, int64_t fallback, int64_t minimum, int64_t maximum) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < minimum || value > maximum) {
    Fail(ERROR_INVALID_PARAM, name, "=\"", text, "\" is not an integer in [", minimum, ", ",
         maximum, "]");
  }
  return value;
}

struct AlgoName {
  const char* name;
  AlgoChoice algo;
};

/// COLLOPS_ALGO_<op>: one of `names` ("auto" or unset: kAlgoAuto).
template <size_t N>
int32_t AlgoFromEnv(const char* variable, const AlgoName (&names)[N]) {
  const char* text = std::getenv(variable);
  const std::string name = text == nullptr ? "" : text;
  if (name.empty() || name == "auto") return kAlgoAuto;
  std::string allowed = "auto";
  for (const AlgoName& entry : names) {
    if (name == entry.name) return entry.algo;
    allowed += Concat(", ", entry.name);
  }
  Fail(ERROR_INVALID_PARAM, variable, "=\"", name, "\" is not one of ", allowed);
}

/// Rank 0's environment decides the protocol for every rank (written into the shared header).
void WritePolicy(SegmentHeader& header) {
  header.allReduceAlgo =
      AlgoFromEnv("COLLOPS_ALGO_ALLREDUCE", {{"oneshot", kAlgoOneShot},
                                             {"rsag", kAlgoReduceScatterAllGather},
                                             {"cma", kAlgoCrossMemory}});
  const AlgoName copies[] = {{"staged", kAlgoStaged}, {"cma", kAlgoCrossMemory}};
  header.allGatherAlgo = AlgoFromEnv("COLLOPS_ALGO_ALLGATHER", copies);
  header.broadcastAlgo = AlgoFromEnv("COLLOPS_ALGO_BROADCAST", copies);
  header.cpus = CpusAvailable();
  const bool oversubscribed = header.Oversubscribed();
  header.oneShotMaxBytes = oversubscribed ? kOversubscribedOneShotMaxBytes : kOneShotMaxBytes;
  if (header.rankSize == 2 && !oversubscribed) {
    header.largeOneShotFromBytes = kTwoRankOneShotFromBytes;
    header.largeOneShotToBytes = kTwoRankOneShotToBytes;
  }
  header.chunkBytes =
      static_cast<uint64_t>(EnvInt("COLLOPS_SHM_CHUNK_BYTES", kChunkBytes, 4096, int64_t{1} << 30));
  header.streamOutputBytes = static_cast<uint64_t>(
      EnvInt("COLLOPS_SHM_STREAM_BYTES", kStreamOutputBytes, 0, int64_t{1} << 50));
  const WaitBudget budget = WaitBudget::Default(oversubscribed);
  header.spinNanos = EnvInt("COLLOPS_SHM_SPIN_US", budget.spinNanos / 1000, 0, 10'000'000) * 1000;
  header.yieldNanos =
      EnvInt("COLLOPS_SHM_YIELD_US", budget.yieldNanos / 1000, 0, 10'000'000) * 1000;
  header.bindCpus = static_cast<int32_t>(EnvInt("COLLOPS_SHM_BIND", 0, 0, 1));
  std::optional<uint64_t> crossMemoryMinBytes;
  if (const char* text = std::getenv("COLLOPS_SHM_CMA_BYTES"); text != nullptr && *text != '\0') {
    crossMemoryMinBytes = EnvInt("COLLOPS_SHM_CMA_BYTES", 0, 0, int64_t{1} << 50);
  }
  const CrossMemoryPolicy crossMemory =
      ChooseCrossMemoryPolicy(crossMemoryMinBytes, oversubscribed, KernelCopyCostRatio);
  header.crossMemoryMinBytes = crossMemory.minBytes;
  header.allReduceCrossMemory = crossMemory.allReduce ? 1 : 0;
  header.crossMemoryMaxBytes = kCrossMemoryMaxBytes;
}

/// COLLOPS_SHM_BIND=1: pins the calling thread to the rank-th CPU of its own affinity set, as
/// mpirun does by default, when there are at least as many CPUs as ranks. Opt-in, because every
/// thread it starts later inherits the pin (a torch process's intra-op pool, say). Why at all:
/// unbound ranks of a busy host are often stacked on one core by the scheduler, and every round
/// then costs a context switch (4 KiB AllReduce at R=2: 8-11 us unbound, 2.5-2.9 us bound,
/// OpenMPI 2.7 us).
void BindToOwnCpu(int rank, int rankSize) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  if (rankSize > CPU_COUNT(&allowed)) return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != rank) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof(one), &one);
    return;
  }
}

}  // namespace

ProcessCommunicator::ProcessCommunicator(const CommParam& param)
    : rank_(param.rank), size_(param.rankSize) {
  if (size_ <= 0 || size_ > kMaxLcclRanks || rank_ < 0 || rank_ >= size_) {
    Fail(ERROR_INVALID_PARAM, "lccl: rank ", rank_, " of rankSize ", size_,
         " is not a valid rank (0 <= rank < rankSize <= ", kMaxLcclRanks, ")");
  }
  timeoutSeconds_ = CommTimeoutSeconds(param.timeoutSeconds, &timeoutSource_);
  // Read before the rendezvous: a bad value fails here, naming the variable, not after joining.
  const uint64_t heapCacheBytes = HeapCacheBytesFromEnv();
  RendezvousSpec spec;
  spec.jobKey = JobKeyFromEnv();
  spec.domain = param.commDomain;
  spec.rank = rank_;
  spec.rankSize = size_;
  spec.timeoutSeconds = timeoutSeconds_;
  spec.timeoutSource = timeoutSource_;
  RendezvousResult joined = Rendezvous(spec, [&] {
    UniqueFd fd;
    Segment created = Segment::Create(
        SegmentLayout::For(size_, SlotBytesFromEnv(size_), HeapBytesFromEnv()), &fd);
    WritePolicy(created.Header());
    segment_ = std::move(created);
    return fd;
  });
  if (rank_ != 0) segment_ = Segment::Attach(joined.memory.Get(), size_);
  memory_ = std::move(joined.memory);
  if (segment_.HasHeaps()) {
    const SegmentLayout& layout = segment_.Layout();
    heap_.Reset(memory_.Get(), segment_.Heap(rank_), layout.heapOffset + rank_ * layout.heapBytes,
                layout.heapBytes, heapCacheBytes);
  }
  direct_.assign(size_, DirectPeer{});
  crossSend_.assign(size_, false);
  crossRecv_.assign(size_, false);
  claim_ = std::move(joined.claim);
  ReleaseInForkedChildren(claim_.Get(), &segment_.Header().abort);
  pids_ = std::move(joined.pids);
  pidfds_ = std::move(joined.pidfds);
  sendMessages_.assign(size_, 0);
  recvMessages_.assign(size_, 0);
  sendChunks_.assign(size_, 0);
  recvChunks_.assign(size_, 0);
  budget_ = WaitBudget{segment_.Header().spinNanos, segment_.Header().yieldNanos};
  if (segment_.Header().bindCpus != 0) BindToOwnCpu(rank_, size_);
  crossMemory_ = ProbeCrossMemory();
}

namespace {
uint64_t CrossMemoryProbe(pid_t pid) { return 0x636d612d70726f62ULL ^ static_cast<uint64_t>(pid); }

/// Yama's ptrace_scope 1 (Ubuntu's default, and every container's on such a host) lets a process
/// read another's memory only when it is the other's ancestor or was named by it, so sibling
/// ranks (torchrun's, mpirun's) would be refused and every byte staged twice. As OpenMPI's vader
/// BTL does there, each rank names any process as its ptracer: that is scope 0's rule for this
/// process (same user, dumpable), no looser. Only at scope 1: at 2 and 3 naming one does not
/// help. Called on every creation, not once, because a forked child is not named.
void LetSameUserPeersReadThisProcess() {
  std::ifstream file("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (file >> scope && scope == 1) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}
}  // namespace

bool ProcessCommunicator::ProbeCrossMemory() {
  // Every rank reads every peer's word and writes a word of its own into every peer's probe, and
  // all use process_vm_readv/writev only when all could: the kernel refuses them without ptrace
  // rights over the peer (a Yama ptrace_scope, a peer that is not dumpable reached by a rank
  // without CAP_SYS_PTRACE, seccomp), which may differ from pair to pair, and a piece must move
  // the same way on both sides. Two rounds, once per communicator (R <= 64); the segment's policy
  // is rank 0's, so all ranks skip them alike.
  if (size_ == 1 || segment_.Header().crossMemoryMinBytes == 0 || !segment_.HasDirectTables()) {
    return false;
  }
  op_ = "create";
  LetSameUserPeersReadThisProcess();  // before the round after which the peers read
  // [0]: what the peers read; [1 + r]: where rank r writes.
  probeWords_.assign(1 + size_, 0);
  probeWords_[0] = CrossMemoryProbe(getpid());
  RankControl& me = segment_.Rank(rank_);
  me.probeAddress.store(reinterpret_cast<uintptr_t>(probeWords_.data()), std::memory_order_relaxed);
  Round();
  bool reached = true;
  for (int r = 0; r < size_ && reached; ++r) {
    if (r == rank_) continue;
    const uintptr_t words = segment_.Rank(r).probeAddress.load(std::memory_order_relaxed);
    uint64_t seen = 0;
    iovec local{&seen, sizeof seen};
    iovec remote{reinterpret_cast<void*>(words), sizeof seen};
    reached =
        process_vm_readv(pids_[r], &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof seen) &&
        seen == CrossMemoryProbe(pids_[r]);
    uint64_t mine = probeWords_[0];
    iovec source{&mine, sizeof mine};
    iovec target{reinterpret_cast<void*>(words + (1 + rank_) * sizeof(uint64_t)), sizeof mine};
    reached = reached && process_vm_writev(pids_[r], &source, 1, &target, 1, 0) ==
                             static_cast<ssize_t>(sizeof mine);
  }
  me.probeReached.store(reached ? 1 : 0, std::memory_order_relaxed);
  Round();
  bool all = true;
  for (int r = 0; r < size_; ++r) {
    all = all && segment_.Rank(r).probeReached.load(std::memory_order_relaxed) != 0;
  }
  return all;
}

ProcessCommunicator::~ProcessCommunicator() { StopReleasingInForkedChildren(claim_.Get()); }

std::string ProcessCommunicator::Where() const {
  return Concat("lccl ", op_, " (rank ", rank_, " of ", size_, "): ");
}

void ProcessCommunicator::RefuseForkedChild(const char* op) const {
  Fail(ERROR_COMM_FAIL, "lccl ", op, " (rank ", rank_, " of ", size_,
       "): this communicator belongs to pid ", creatorPid_,
       ", which created it; a child of fork() cannot use it (create a new one in the child)");
}

void ProcessCommunicator::Enter(const char* op) {
  if (failureStatus_ != NO_ERROR) throw Error(failureStatus_, failureMessage_);
  // The peers know this rank by its creator's pid, whose memory they read and write: a forked
  // child's calls would move the parent's data or fail on addresses it does not have.
  if (InForkedChild()) RefuseForkedChild(op);
  op_ = op;
  // A peer that gave up on this communicator (its timeout, a lost rank) published an abort record:
  // without this check a rank arriving late would complete a call its peers already failed,
  // using what they posted before giving up, and the ranks would disagree on its outcome.
  ThrowIfAborted();
}

void ProcessCommunicator::Post() {
  RankControl& me = segment_.Rank(rank_);
  me.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  me.posted.store(++round_, std::memory_order_release);
  me.word.Notify();
}

void ProcessCommunicator::WaitAll() {
  const uint64_t round = round_;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    RankControl& peer = segment_.Rank(r);
    auto arrived = [&] { return peer.posted.load(std::memory_order_acquire) >= round; };
    if (Spin(arrived, r)) continue;
    deadline_ = Deadline::After(timeoutSeconds_);
    const WaitingInRound mark(segment_.Rank(rank_), round);
    if (peer.word.Wait(arrived, deadline_, [&] { AfterSlice([&] { CheckPeer(r); }); })) continue;
    std::vector<int> late;
    for (int j = 0; j < size_; ++j) {
      if (j != rank_ && segment_.Rank(j).posted.load(std::memory_order_acquire) < round) {
        late.push_back(j);
      }
    }
    const std::string missing =
        ListRanks(late, [this](int j) { return Concat(j, " (", PidOf(j), ")"); });
    Break(ERROR_TIMEOUT, late.empty() ? -1 : late.front(),
          Concat(Where(), "rank", late.size() == 1 ? " " : "s ", missing, " did not arrive within ",
                 timeoutSeconds_, " s (", timeoutSource_, ")"));
  }
}

bool ProcessCommunicator::PeerDead(int peer) const {
  return ProcessExited(pidfds_[peer], pids_[peer]);
}

void ProcessCommunicator::CheckCallOrder(int peer) {
  const uint64_t theirs = segment_.Rank(peer).waitingRound.load(std::memory_order_acquire);
  if (theirs == 0 || theirs <= round_) return;
  // The peer sleeps in a collective until this rank posts its round, and this rank waits in a
  // send or receive for the peer: neither can move again.
  Break(ERROR_RANK_MISMATCH, peer,
        Concat(Where(), "rank ", peer, " (", PidOf(peer),
               ") waits for this rank in a collective while this rank waits in ", op_,
               " with it: the ranks made their calls in different orders", kCallOrderRule));
}

void ProcessCommunicator::CheckPeer(int peer) {
  ThrowIfAborted();
  if (PeerDead(peer)) {
    Break(ERROR_PEER_LOST, peer, Concat(Where(), "rank ", peer, " (", PidOf(peer), ") died"));
  }
}

void ProcessCommunicator::ThrowIfAborted() {
  const uint64_t word = segment_.Header().abort.load(std::memory_order_acquire);
  if (word != 0) {
    const AbortRecord abort = UnpackAbort(word);
    if (abort.reporter < 0 || abort.reporter >= size_ || abort.culprit < -1 ||
        abort.culprit >= size_) {
      // Every rank writes itself as the reporter and a rank (or -1) as the culprit: anything
      // else was written over, and names no rank to look up.
      Break(ERROR_COMM_FAIL, -1,
            Concat(Where(), "the segment's abort record (culprit ", abort.culprit, ", reporter ",
                   abort.reporter, ") names no rank of ", size_,
                   ": a process wrote over the shared memory (memory corruption?)"));
    }
    const int culprit = abort.culprit >= 0 ? abort.culprit : 0;
    const Status status = abort.status == ERROR_TIMEOUT ? ERROR_TIMEOUT : ERROR_PEER_LOST;
    if (abort.status == ERROR_RANK_MISMATCH) {  // CheckCallOrder() on the reporter
      Break(ERROR_RANK_MISMATCH, culprit,
            Concat(Where(), "rank ", abort.reporter, " (", PidOf(abort.reporter),
                   ") waits in a send or receive with rank ", culprit, " while rank ", culprit,
                   " waits for it in a collective: the ranks made their calls in different orders",
                   kCallOrderRule));
    }
    if (abort.reporter == culprit) {  // Abort(): alive, but it failed outside this communicator
      Break(status, culprit,
            Concat(Where(), "rank ", culprit, " (", PidOf(culprit),
                   ") stopped this communicator after a failure outside it (", StatusName(status),
                   ", e.g. a lost peer on another host); that rank's error says which"));
    }
    if (culprit == rank_) {  // this rank came too late for a peer that timed out
      Break(status, culprit,
            Concat(Where(), "rank ", abort.reporter, " (", PidOf(abort.reporter),
                   ") gave up waiting for this rank (", StatusName(status),
                   ") and stopped the communicator; this rank arrived after it had"));
    }
    Break(status, culprit,
          Concat(Where(), "rank ", culprit, " (", PidOf(culprit), ") ",
                 status == ERROR_TIMEOUT ? "stopped responding" : "died", " (detected by rank ",
                 abort.reporter, ")"));
  }
}

void* ProcessCommunicator::AllocateShared(size_t bytes) {
  // The heap's pages are the parent's: what the child got would be the parent's next allocation.
  if (InForkedChild()) RefuseForkedChild("AllocateShared");
  return heap_.Allocate(bytes);
}

void ProcessCommunicator::Abort(Status status, const std::string& why) {
  // The abort record is in the segment: a child's would stop its parent's communicator.
  if (failureStatus_ != NO_ERROR || InForkedChild()) return;
  // This rank as its own culprit: how the peers tell an abort from a loss they detected.
  MarkBroken(status == ERROR_TIMEOUT ? ERROR_TIMEOUT : ERROR_PEER_LOST, rank_,
             Concat("lccl (rank ", rank_, " of ", size_, "): aborted: ", why));
}

void ProcessCommunicator::Break(Status status, int culprit, const std::string& message) {
  MarkBroken(status, culprit, message);
  throw Error(status, message);
}

void ProcessCommunicator::MarkBroken(Status status, int culprit, const std::string& message) {
  failureStatus_ = status;
  failureMessage_ = message;
  // A broken communicator never rendezvous again: free its rank's name now, so the replacement
  // the pool creates while still holding this one can claim it.
  StopReleasingInForkedChildren(claim_.Get());
  claim_.Reset();
  // Tell ranks waiting on someone else that this communicator is over; the first record wins.
  uint64_t expected = 0;
  segment_.Header().abort.compare_exchange_strong(expected, PackAbort({culprit, rank_, status}),
                                                  std::memory_order_acq_rel);
  for (int r = 0; r < size_; ++r) {
    segment_.Rank(r).word.Notify();
    segment_.Rank(r).bell.Notify();
  }
}

void ProcessCommunicator::Barrier() {
  Enter("Barrier");
  Round();
}

void ProcessCommunicator::Agree(const CallSignature& mine) {
  if (size_ == 1 || !segment_.CarriesAgreement()) {
    Communicator::Agree(mine);
    return;
  }
  Enter("Agree");
  // Writable now: every peer finished reading our record of round_ - 1 (same parity) before it
  // posted round_, which our last wait saw.
  const uint64_t round = round_ + 1;
  uint8_t* record = segment_.Record(rank_, round);
  std::memcpy(record, &round, sizeof round);
  EncodeAgreement(mine, size_, record + sizeof round);
  agreement_.opName = mine.opName;
  agreement_.sendField = mine.sendField;
  agreement_.recvField = mine.recvField;
  agreementPending_ = true;
  // A rank that will not make the call sends its record with a round of its own, which meets the
  // first round of its peers' call.
  if (mine.failedStatus != 0) Round();
}

void ProcessCommunicator::CheckCarriedAgreement() {
  agreementPending_ = false;
  for (int r = 0; r < size_; ++r) {
    uint64_t stamp = 0;
    std::memcpy(&stamp, segment_.Record(r, round_), sizeof stamp);
    if (stamp != round_) {
      Fail(ERROR_RANK_MISMATCH, agreement_.opName, ": rank ", r, " (", PidOf(r),
           ") made its call without the cross-rank check (a raw communicator call where the other "
           "ranks run an operation?)");
    }
  }
  CheckAgreementRecords(segment_.Record(0, round_) + sizeof(uint64_t), segment_.RecordRankStride(),
                        size_, agreement_);
}

namespace {

[[maybe_unused]] const bool kRegistered = RegisterCommunicatorBackend(
    "lccl", COMM_MULTI_PROCESS, [](const CommParam& param) -> std::shared_ptr<Communicator> {
      return std::make_shared<ProcessCommunicator>(param);
    });

}  // namespace

}  // namespace shm
}  // namespace collops
