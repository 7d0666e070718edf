// collops-bench: nccl-tests-style timing of collops operations, as users call them: each rank
// creates the operation by name from JSON, runs Setup once, then Execute in a loop, so per-call
// costs (the cross-rank signature check, count validation) are inside every timed iteration.
//
// Ranks are forked processes (--mode process, lccl commMode 0), threads of this process
// (--mode thread, commMode 1), or the processes mpirun started (--mode mpirun, backend "hccl",
// commMode 0: lccl when they share a host, hierarchical lccl + MPI when they span hosts). Each
// iteration starts after a BarrierOperation (not timed) so every rank's clock covers the same
// collective; the iteration's time is the max over ranks. --timing spin starts each call after a
// barrier outside collops instead (spin_barrier.h), --timing loop times the calls back to back.
// Forked and thread ranks write their times into a shared anonymous mapping that the parent reads
// and prints; mpirun ranks reduce theirs to rank 0 with collops' own AllReduce (after the timed
// loop), and rank 0 prints.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "bench/spin_barrier.h"
#include "collops/algorithms.h"
#include "collops/backend.h"
#include "collops/collops.h"

namespace collops_bench {
namespace {

using collops::DataType;
using collops::OperationPtr;
using collops::Tensor;

DataType ToCollops(Kind kind) {
  switch (kind) {
    case Kind::kFloat32:
      return collops::ACL_FLOAT;
    case Kind::kFloat64:
      return collops::ACL_DOUBLE;
    case Kind::kFloat16:
      return collops::ACL_FLOAT16;
    case Kind::kBFloat16:
      return collops::ACL_BF16;
    case Kind::kInt8:
      return collops::ACL_INT8;
    case Kind::kInt16:
      return collops::ACL_INT16;
    case Kind::kInt32:
      return collops::ACL_INT32;
    case Kind::kInt64:
      return collops::ACL_INT64;
    case Kind::kUint8:
      return collops::ACL_UINT8;
  }
  return collops::ACL_DT_UNDEFINED;
}

/// Where data buffers come from: null, the C++ heap; with --shared, the AllocateShared() memory of
/// the communicator the rank's operations use (set once per rank process).
collops::Communicator* gSharedSource = nullptr;

/// A CPU tensor owning its bytes (int64 count tensors also expose them as hostData).
class Buffer {
 public:
  Tensor tensor;

  /// `data`: an operation's data buffer, from gSharedSource when set (counts never are).
  Buffer(DataType dtype, std::vector<int64_t> shape, bool data = true) {
    tensor.desc.dtype = dtype;
    tensor.desc.shape = collops::MakeDims(shape);
    tensor.dataSize = collops::TensorBytes(tensor.desc);
    Allocate(tensor.dataSize + 64, data ? gSharedSource : nullptr);  // never null, even empty
    tensor.deviceData = this->data();
  }
  static Buffer Counts(const std::vector<int64_t>& v) {
    Buffer b(collops::ACL_INT64, {static_cast<int64_t>(v.size())}, /*data=*/false);
    std::memcpy(b.data(), v.data(), v.size() * 8);
    b.tensor.hostData = b.data();
    return b;
  }
  Buffer(const Buffer& o) : tensor(o.tensor) { CopyFrom(o); }
  Buffer& operator=(const Buffer& o) {
    if (this != &o) {
      tensor = o.tensor;
      CopyFrom(o);
    }
    return *this;
  }
  uint8_t* data() const { return storage_.get(); }

 private:
  void Allocate(size_t bytes, collops::Communicator* source) {
    bytes_ = bytes;
    source_ = source;
    if (source == nullptr) {
      storage_.reset(new uint8_t[bytes](), std::default_delete<uint8_t[]>());
      return;
    }
    auto* p = static_cast<uint8_t*>(source->AllocateShared(bytes));
    if (p == nullptr) {
      throw collops::Error(collops::ERROR_OUT_OF_HOST_MEMORY,
                           collops::Concat("--shared: AllocateShared(", bytes,
                                           ") gave null (raise COLLOPS_SHM_HEAP_BYTES)"));
    }
    storage_.reset(p, [source](uint8_t* q) { source->FreeShared(q); });
  }
  void CopyFrom(const Buffer& o) {
    Allocate(o.bytes_, o.source_);
    std::memcpy(data(), o.data(), bytes_);
    const bool host = tensor.hostData != nullptr;
    tensor.deviceData = data();
    if (host) tensor.hostData = data();
  }

  std::shared_ptr<uint8_t> storage_;
  size_t bytes_ = 0;
  collops::Communicator* source_ = nullptr;
};

const char* BackendOf(const Options& o) { return o.mode == Mode::kMpirun ? "hccl" : "lccl"; }

void Throw(collops::Status s, const char* what) {
  throw collops::Error(
      s, collops::Concat(what, ": ", collops::StatusName(s), ": ", collops::LastErrorMessage()));
}

/// One rank's operation for one size: the op(s), its tensors and workspace, ready to Execute.
class RankCase {
 public:
  /// `comm`: a communicator the caller created (mpirun mode), or null: the ops make their own.
  RankCase(const Options& o, int rank, int64_t sizeBytes, collops::Communicator* comm = nullptr)
      : o_(o),
        rank_(rank),
        comm_(comm),
        dtype_(ToCollops(o.dtype->kind)),
        layout_(MakeLayout(o.op, o.ranks, rank, sizeBytes, o.dtype->size)) {
    nlohmann::json p = {{"rank", rank},
                        {"rankSize", o.ranks},
                        {"backend", BackendOf(o)},
                        {"commMode", o.mode == Mode::kThread ? 1 : 0},
                        {"commDomain", "bench"}};
    barrier_ = collops::MakeOperation("BarrierOperation", p, comm_);
    voteOp_ = collops::MakeOperation("BroadcastOperation", p, comm_);
    const int64_t in = layout_.inCount;
    const int64_t out = layout_.outCount;
    x_.emplace_back(dtype_, std::vector<int64_t>{in});
    switch (o.op) {
      case Op::kAllReduce:
        Make("AllReduceOperation", p);
        break;
      case Op::kAllGather:
        Make("AllGatherOperation", p);
        break;
      case Op::kAllGatherV:
        x_.push_back(Buffer::Counts({in}));
        x_.push_back(Buffer::Counts(layout_.recvCounts));
        x_.push_back(Buffer::Counts(layout_.rdispls));
        x_.emplace_back(collops::ACL_INT8, std::vector<int64_t>{out});
        Make("AllGatherVOperation", p);
        break;
      case Op::kReduceScatter:
        Make("ReduceScatterOperation", p);
        break;
      case Op::kReduceScatterV:
        x_[0] = Buffer(dtype_, {in, 1});
        x_.push_back(Buffer::Counts(layout_.sendCounts));
        x_.push_back(Buffer::Counts(layout_.sdispls));
        x_.push_back(Buffer::Counts({out}));
        x_.emplace_back(collops::ACL_INT8, std::vector<int64_t>{out});
        Make("ReduceScatterVOperation", p);
        break;
      case Op::kBroadcast:
        Make("BroadcastOperation", p);
        break;
      case Op::kAllToAll:
        Make("AllToAllOperation", p);
        break;
      case Op::kAllToAllV:
        p["sendCounts"] = layout_.sendCounts;
        p["sdispls"] = layout_.sdispls;
        p["recvCounts"] = layout_.recvCounts;
        p["rdispls"] = layout_.rdispls;
        Make("AllToAllVOperation", p);
        break;
      case Op::kSendRecv:
        // Both directions at once, as MPI_Sendrecv and gloo's isend + irecv.
        p["destRank"] = (rank + 1) % o.ranks;
        p["srcRank"] = (rank + o.ranks - 1) % o.ranks;
        Make("SendRecvOperation", p);
        break;
    }
    FillInput(o.dtype->kind, o.dtype->size, o.op == Op::kBroadcast && rank != 0 ? 0 : rank, in,
              x_[0].data());
    if (o.op == Op::kBroadcast && rank != 0) Poison(x_[0]);
    SetupOperation();
  }

  void Barrier() {
    collops::VariantPack pack;
    RunWithoutWorkspace(*barrier_, pack);
  }

  /// Rank 0's `mine` on every rank (WarmUp's decision): one int32 broadcast from rank 0.
  bool RankZeroSays(bool mine) {
    auto* word = reinterpret_cast<int32_t*>(vote_.data());
    *word = mine ? 1 : 0;
    collops::VariantPack pack;
    pack.inTensors.push_back(vote_.tensor);
    RunWithoutWorkspace(*voteOp_, pack);
    return *word != 0;
  }

  void Execute() {
    const collops::Status s = op_->Execute(pack_, workspace_.data(), workspace_.size(), nullptr);
    if (s != collops::NO_ERROR) Throw(s, op_->GetName().c_str());
  }

  /// Poisons the output, runs once more and compares with the golden values.
  int64_t Check() {
    Buffer& result = ResultBuffer();
    if (o_.op == Op::kBroadcast && rank_ == 0) {
      // The root's x is its input, untouched by the collective; checking it is meaningful.
    } else {
      Poison(result);
    }
    Barrier();
    Execute();
    const int64_t count = o_.op == Op::kBroadcast ? layout_.inCount : layout_.outCount;
    return CountWrong(o_.op, o_.dtype->kind, o_.dtype->size, o_.ranks, rank_, layout_,
                      result.data(), count);
  }

  const Layout& layout() const { return layout_; }

 private:
  void Make(const char* name, const nlohmann::json& p) {
    op_ = collops::MakeOperation(name, p, comm_);
  }

  /// Every x_ is an input; the outputs are allocated from InferShape into y_.
  void SetupOperation() {
    std::vector<collops::TensorDesc> inDescs, outDescs;
    for (const Buffer& x : x_) {
      pack_.inTensors.push_back(x.tensor);
      inDescs.push_back(x.tensor.desc);
    }
    collops::Status s = op_->InferShape(inDescs, outDescs);
    if (s != collops::NO_ERROR) Throw(s, "InferShape");
    for (const auto& d : outDescs) {
      y_.emplace_back(d.dtype, std::vector<int64_t>(d.shape.dims, d.shape.dims + d.shape.dimNum));
      pack_.outTensors.push_back(y_.back().tensor);
    }
    uint64_t ws = 0;
    s = op_->Setup(pack_, ws, nullptr);
    if (s != collops::NO_ERROR) Throw(s, "Setup");
    if (ws > workspace_.size()) workspace_.resize(ws);
  }

  Buffer& ResultBuffer() { return o_.op == Op::kBroadcast ? x_[0] : y_.back(); }

  static void Poison(Buffer& b) { std::memset(b.data(), 0xA5, b.tensor.dataSize); }

  static void RunWithoutWorkspace(collops::Operation& op, collops::VariantPack& pack) {
    uint64_t ws = 0;
    collops::Status s = op.Setup(pack, ws, nullptr);
    if (s == collops::NO_ERROR) s = op.Execute(pack, nullptr, 0, nullptr);
    if (s != collops::NO_ERROR) Throw(s, op.GetName().c_str());
  }

  const Options& o_;
  int rank_;
  collops::Communicator* comm_;
  DataType dtype_;
  Layout layout_;
  std::vector<Buffer> x_;
  // Reserved so the tensors handed to Setup keep their addresses while more are added.
  std::vector<Buffer> y_ = Reserved();
  OperationPtr op_;
  collops::VariantPack pack_;
  std::vector<uint8_t> workspace_ = std::vector<uint8_t>(64);
  OperationPtr barrier_;
  OperationPtr voteOp_;
  Buffer vote_ = Buffer(collops::ACL_INT32, {1}, /*data=*/false);

  static std::vector<Buffer> Reserved() {
    std::vector<Buffer> v;
    v.reserve(4);
    return v;
  }
};

/// The parent's view of every rank's results, in a MAP_SHARED mapping so forked ranks can write.
struct Shared {
  int sizes, ranks, iters;
  double* seconds;  // [size][rank][iter]
  int64_t* wrong;   // [size][rank]
  int64_t* bytes;   // [size][rank]
  int64_t* count;   // [size][rank]
  char* errors;     // [rank][256]
  void* spinWords;  // SpinBarrier::Bytes(ranks), for --timing spin
  void* base;
  size_t length;

  Shared(int s, int r, int n) : sizes(s), ranks(r), iters(n) {
    const size_t ns = static_cast<size_t>(s) * r * n, nr = static_cast<size_t>(s) * r;
    length = ns * 8 + 3 * nr * 8 + static_cast<size_t>(r) * 256 + SpinBarrier::Bytes(r) + 64;
    base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) std::perror("mmap"), std::exit(1);
    seconds = static_cast<double*>(base);
    wrong = reinterpret_cast<int64_t*>(seconds + ns);
    bytes = wrong + nr;
    count = bytes + nr;
    errors = reinterpret_cast<char*>(count + nr);
    // Cache-line aligned, after the errors.
    const auto end = reinterpret_cast<uintptr_t>(errors + static_cast<size_t>(r) * 256);
    spinWords = reinterpret_cast<void*>((end + 63) / 64 * 64);
    for (size_t i = 0; i < nr; ++i) wrong[i] = -1;
  }
  ~Shared() { munmap(base, length); }
};

/// --shared: this rank's data buffers come from the communicator its operations use (the one the
/// default context's pool holds for their params).
void UseSharedBuffers(const Options& o, int rank) {
  collops::CommParam param;
  param.rank = rank;
  param.rankSize = o.ranks;
  param.backend = BackendOf(o);
  param.commMode = collops::COMM_MULTI_PROCESS;
  param.commDomain = "bench";
  static std::shared_ptr<collops::Communicator> comm;
  comm = collops::DefaultContext().Communicators().Get(param);
  gSharedSource = comm.get();
}

std::string OutOfMemory() {
  return "out of memory allocating this size's buffers (std::bad_alloc)";
}

/// The timed calls of one size into `seconds[0..iters)`, by o.timing: each after `barrier()` (a
/// BarrierOperation) or `spin` (a barrier outside collops), or back to back, their mean in every
/// slot.
template <class Barrier>
void TimeCalls(const Options& o, RankCase& c, Barrier&& barrier, SpinBarrier* spin,
               double* seconds) {
  if (o.timing == Timing::kLoop) {
    barrier();
    const double t0 = NowSeconds();
    for (int i = 0; i < o.iters; ++i) c.Execute();
    const double mean = (NowSeconds() - t0) / o.iters;
    for (int i = 0; i < o.iters; ++i) seconds[i] = mean;
    return;
  }
  for (int i = 0; i < o.iters; ++i) {
    if (spin != nullptr) {
      spin->Wait();
    } else {
      barrier();
    }
    const double t0 = NowSeconds();
    c.Execute();
    seconds[i] = NowSeconds() - t0;
  }
}

/// One rank's whole run over every size. Returns 0, or 1 after recording an error.
int RunRank(const Options& o, int rank, Shared& sh) {
  const std::vector<int64_t> sizes = Sizes(o);
  try {
    if (o.shared) UseSharedBuffers(o, rank);
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    SpinBarrier spin(sh.spinWords, o.ranks, rank, /*yield=*/cpus > 0 && o.ranks > cpus);
    for (size_t s = 0; s < sizes.size(); ++s) {
      RankCase c(o, rank, sizes[s]);
      WarmUp(o, [&] { c.Execute(); }, [&](bool more) { return c.RankZeroSays(more); });
      double* out = sh.seconds + (s * o.ranks + rank) * o.iters;
      TimeCalls(o, c, [&] { c.Barrier(); }, o.timing == Timing::kSpin ? &spin : nullptr, out);
      const size_t at = s * o.ranks + rank;
      sh.bytes[at] = c.layout().bytes;
      sh.count[at] = c.layout().bytes / static_cast<int64_t>(o.dtype->size);
      if (o.check) sh.wrong[at] = c.Check();
    }
  } catch (const std::bad_alloc&) {
    std::snprintf(sh.errors + rank * 256, 256, "rank %d: %s", rank, OutOfMemory().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::snprintf(sh.errors + rank * 256, 256, "rank %d: %s", rank, e.what());
    return 1;
  }
  return 0;
}

int EnvInt(const char* name) {
  const char* text = std::getenv(name);
  return text == nullptr || *text == '\0' ? -1 : std::atoi(text);
}

/// `values` reduced over every rank ("max" or "sum") by collops' AllReduce on `comm`: ranks
/// started by mpirun have no other channel to each other here. int64 (float64 does not reduce).
std::vector<int64_t> Reduced(collops::Communicator* comm, const char* type,
                             const std::vector<int64_t>& values) {
  const nlohmann::json p = {{"rank", comm->Rank()},
                            {"rankSize", comm->Size()},
                            {"backend", "hccl"},
                            {"commDomain", "bench"},
                            {"allReduceType", type}};
  OperationPtr op = collops::MakeOperation("AllReduceOperation", p, comm);
  const int64_t n = static_cast<int64_t>(values.size());
  Buffer x(collops::ACL_INT64, {n}), y(collops::ACL_INT64, {n});
  std::memcpy(x.data(), values.data(), n * sizeof(int64_t));
  collops::VariantPack pack;
  pack.inTensors = {x.tensor};
  pack.outTensors = {y.tensor};
  uint64_t ws = 0;
  collops::Status s = op->Setup(pack, ws, nullptr);
  std::vector<uint8_t> workspace(ws + 64);
  if (s == collops::NO_ERROR) s = op->Execute(pack, workspace.data(), ws, nullptr);
  if (s != collops::NO_ERROR) Throw(s, "AllReduceOperation (gathering the results)");
  std::vector<int64_t> out(values.size());
  std::memcpy(out.data(), y.data(), n * sizeof(int64_t));
  return out;
}

/// --mode mpirun: this process is one rank of the job mpirun started. Rank 0 prints.
int RunMpirun(Options o) {
  const int rank = EnvInt("OMPI_COMM_WORLD_RANK");
  o.ranks = EnvInt("OMPI_COMM_WORLD_SIZE");
  if (rank < 0 || o.ranks < 1) {
    std::fprintf(stderr,
                 "collops-bench --mode mpirun: OMPI_COMM_WORLD_RANK/SIZE are not set; start it "
                 "with mpirun -np R (OpenMPI)\n");
    return 2;
  }
  const std::string why = RankCountError(o.op, o.ranks);
  if (!why.empty()) {
    if (rank == 0) std::fprintf(stderr, "collops-bench: mpirun -np %d: %s\n", o.ranks, why.c_str());
    return 2;
  }
  // mpirun ranks share no parent: a job key from mpirun's job id keeps concurrent runs apart.
  const char* jobId = std::getenv("OMPI_MCA_ess_base_jobid");
  if (std::getenv("COLLOPS_JOB_ID") == nullptr && jobId != nullptr) {
    setenv("COLLOPS_JOB_ID", (std::string("collops-bench-mpirun-") + jobId).c_str(), 1);
  }
  const char* system = "collops-mpirun";
  if (rank == 0) PrintHeader(o, system);
  std::string backend, error;
  std::shared_ptr<collops::Communicator> comm;
  try {
    collops::CommParam param;
    param.rank = rank;
    param.rankSize = o.ranks;
    param.backend = BackendOf(o);
    param.commDomain = "bench";
    comm = collops::CreateCommunicator(param);
    backend = comm->BackendName();
  } catch (const std::exception& e) {
    error = collops::Concat("rank ", rank, ": ", e.what());
  }
  for (int64_t size : Sizes(o)) {
    Row row;
    row.bytes = size;
    row.backend = backend;
    if (error.empty()) {
      try {
        RankCase c(o, rank, size, comm.get());
        WarmUp(o, [&] { c.Execute(); }, [&](bool more) { return c.RankZeroSays(more); });
        std::vector<double> seconds(o.iters);
        TimeCalls(o, c, [&] { c.Barrier(); }, nullptr, seconds.data());
        std::vector<int64_t> nanos(o.iters);
        for (int i = 0; i < o.iters; ++i) nanos[i] = static_cast<int64_t>(seconds[i] * 1e9);
        for (int64_t worst : Reduced(comm.get(), "max", nanos)) {
          row.iterSeconds.push_back(worst * 1e-9);
        }
        if (o.check) row.wrong = Reduced(comm.get(), "sum", {c.Check()})[0];
        row.bytes = c.layout().bytes;
      } catch (const std::bad_alloc&) {
        error = collops::Concat("rank ", rank, ": ", OutOfMemory());
      } catch (const std::exception& e) {
        error = collops::Concat("rank ", rank, ": ", e.what());
      }
    }
    row.count = row.bytes / static_cast<int64_t>(o.dtype->size);
    if (!error.empty()) {
      row.iterSeconds.clear();
      row.error = error;
    }
    if (rank == 0) PrintRow(o, system, row);
  }
  if (!error.empty()) std::fprintf(stderr, "collops-bench: %s\n", error.c_str());
  return error.empty() ? 0 : 1;
}

int Main(int argc, char** argv) {
  // Refuses what cannot run (bad sizes, -r 1 for sendrecv, --shared outside process mode).
  const Options o = ParseOptions(argc, argv, Tool::kBench);
  if (o.algorithms) {
    std::fputs(collops::AlgorithmTableMarkdown().c_str(), stdout);
    return 0;
  }
  if (o.mode == Mode::kMpirun) return RunMpirun(o);
  const std::vector<int64_t> sizes = Sizes(o);
  Shared sh(static_cast<int>(sizes.size()), o.ranks, o.iters);
  const bool threadMode = o.mode == Mode::kThread;
  const char* system = threadMode ? "collops-thread"
                       : o.shared ? "collops-process-shared"
                                  : "collops-process";
  PrintHeader(o, system);
  std::fflush(stdout);

  bool failed = false;
  if (threadMode) {
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int r = 0; r < o.ranks; ++r) {
      threads.emplace_back([&, r] { failures += RunRank(o, r, sh); });
    }
    for (auto& t : threads) t.join();
    failed = failures > 0;
  } else {
    // A job key of our own, so concurrent benchmark runs never rendezvous with each other.
    const std::string job = "collops-bench-" + std::to_string(getpid());
    setenv("COLLOPS_JOB_ID", job.c_str(), 1);
    std::vector<pid_t> pids;
    for (int r = 0; r < o.ranks; ++r) {
      const pid_t pid = fork();
      if (pid < 0) std::perror("fork"), std::exit(1);
      if (pid == 0) _exit(RunRank(o, r, sh));
      pids.push_back(pid);
    }
    for (size_t r = 0; r < pids.size(); ++r) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failed = true;
        if (sh.errors[r * 256] == '\0') {
          std::snprintf(sh.errors + r * 256, 256, "rank %zu died (wait status %d)", r, status);
        }
      }
    }
  }

  std::string error;
  for (int r = 0; r < o.ranks; ++r) {
    if (sh.errors[r * 256] != '\0')
      error += (error.empty() ? "" : "; ") + std::string(sh.errors + r * 256);
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    Row row;
    const size_t at0 = s * o.ranks;
    row.bytes = sh.bytes[at0];
    row.count = sh.count[at0];
    if (row.bytes == 0) {  // this size never completed on rank 0
      row.bytes = sizes[s];
      row.error = error.empty() ? "not run" : error;
      PrintRow(o, system, row);
      continue;
    }
    bool complete = true;
    for (int i = 0; i < o.iters; ++i) {
      double worst = 0;
      for (int r = 0; r < o.ranks; ++r) {
        worst = std::max(worst, sh.seconds[(at0 + r) * o.iters + i]);
      }
      row.iterSeconds.push_back(worst);
    }
    if (o.check) {
      row.wrong = 0;
      for (int r = 0; r < o.ranks; ++r) {
        if (sh.wrong[at0 + r] < 0)
          complete = false;
        else
          row.wrong += sh.wrong[at0 + r];
      }
    }
    if (!complete) row.error = error;
    PrintRow(o, system, row);
  }
  if (failed && !o.json) std::fprintf(stderr, "collops-bench: %s\n", error.c_str());
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace collops_bench

int main(int argc, char** argv) { return collops_bench::Main(argc, argv); }
