#include "random_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collops/signature.h"
#include "collops/status.h"
#include "op_harness.h"
#include "op_suite.h"

namespace collops {
namespace testing {
namespace {

enum class Kind {
  kAllReduce,
  kAllGatherV,
  kReduceScatterV,
  kAllToAllV,
  kBroadcast,
  kExchange,
  kBarrier,
  kAllGatherBytes,
  kKinds
};

const char* KindName(Kind kind) {
  static const char* const names[] = {"AllReduce", "AllGatherV",    "ReduceScatterV",
                                      "AllToAllV", "Broadcast",     "Exchange",
                                      "Barrier",   "AllGatherBytes"};
  return names[static_cast<int>(kind)];
}

constexpr uint8_t kSentinel = 0xA5;
constexpr uint8_t kPoison = 0xEE;
/// One generator's draws: the schedule's (same on every rank) or one rank's own.
class Draws {
 public:
  explicit Draws(uint64_t seed) : gen_(seed) {}
  uint64_t Pick(uint64_t n) { return gen_() % n; }
  bool Coin() { return Pick(2) == 0; }
  /// A count from one of the size classes the backends switch algorithms at: empty, a handful,
  /// one round, beyond a 64 KiB slot and the process_vm_readv threshold, many rounds.
  int64_t Count(int64_t most) {
    int64_t n;
    const uint64_t cls = Pick(10);
    if (cls == 0) {
      n = 0;
    } else if (cls <= 3) {
      n = 1 + static_cast<int64_t>(Pick(40));
    } else if (cls <= 6) {
      n = 200 + static_cast<int64_t>(Pick(5000));
    } else if (cls <= 8) {
      n = 15000 + static_cast<int64_t>(Pick(25000));
    } else {
      n = 100000 + static_cast<int64_t>(Pick(200000));
    }
    return std::min(n, most);
  }
  /// Displacements of `counts` laid out in order with gaps of 0-3 elements: returns the total.
  int64_t Layout(const std::vector<int64_t>& counts, std::vector<int64_t>* displs) {
    int64_t at = static_cast<int64_t>(Pick(3));
    displs->assign(counts.size(), 0);
    for (size_t j = 0; j < counts.size(); ++j) {
      (*displs)[j] = at;
      at += counts[j] + static_cast<int64_t>(Pick(4));
    }
    return at;
  }

 private:
  std::mt19937_64 gen_;
};

/// Ordinary buffers of the last calls, poisoned and kept out of malloc's reach: a peer that reads
/// or writes one late (process_vm_readv/writev of a stale address) meets the poison, never memory
/// malloc has handed out again (which may even hold the very values the check expects).
class Quarantine {
 public:
  void Keep(std::vector<uint8_t> bytes) { current_.push_back(std::move(bytes)); }
  /// Called after each step: frees what the step before the last one left.
  void NextStep() {
    previous_ = std::move(current_);
    current_.clear();
  }

 private:
  std::vector<std::vector<uint8_t>> previous_, current_;
};

/// A buffer of one call, from the communicator's heap or ordinary memory, full of the sentinel.
class CallBuffer {
 public:
  CallBuffer(Communicator& comm, Quarantine& quarantine, int64_t elements, DataType dtype,
             bool shared)
      : comm_(comm),
        quarantine_(quarantine),
        bytes_(static_cast<size_t>(elements) * DataTypeSize(dtype)) {
    if (shared && bytes_ > 0) shared_ = static_cast<uint8_t*>(comm.AllocateShared(bytes_));
    if (shared_ == nullptr) own_.resize(std::max<size_t>(bytes_, 1));
    std::memset(data(), kSentinel, bytes_);
  }
  /// Poisons the memory first: a peer that reads or writes it late then leaves a trace the next
  /// calls' checks see.
  ~CallBuffer() {
    std::memset(data(), kPoison, bytes_);
    if (shared_ != nullptr) {
      comm_.FreeShared(shared_);
    } else {
      quarantine_.Keep(std::move(own_));
    }
  }
  CallBuffer(const CallBuffer&) = delete;
  CallBuffer& operator=(const CallBuffer&) = delete;

  uint8_t* data() { return shared_ != nullptr ? shared_ : own_.data(); }
  bool shared() const { return shared_ != nullptr; }

 private:
  Communicator& comm_;
  Quarantine& quarantine_;
  size_t bytes_;
  uint8_t* shared_ = nullptr;
  std::vector<uint8_t> own_;
};

/// Writes `values` into `buf` from element `at` on.
void Fill(uint8_t* buf, DataType dtype, int64_t at, const std::vector<double>& values) {
  const size_t e = DataTypeSize(dtype);
  for (size_t k = 0; k < values.size(); ++k) DoubleToElement(dtype, values[k], buf + (at + k) * e);
}

/// What a buffer must hold: the sentinel except where a call writes.
class Expected {
 public:
  Expected(int64_t elements, DataType dtype)
      : dtype_(dtype), bytes_(static_cast<size_t>(elements) * DataTypeSize(dtype), kSentinel) {}
  /// Elements [at, at + values.size()) must hold `values`.
  void Set(int64_t at, const std::vector<double>& values) {
    Fill(bytes_.data(), dtype_, at, values);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  DataType dtype_;
  std::vector<uint8_t> bytes_;
};

std::string Describe(const uint8_t* element, DataType dtype) {
  const size_t e = DataTypeSize(dtype);
  bool sentinel = true;
  for (size_t b = 0; b < e; ++b) sentinel = sentinel && element[b] == kSentinel;
  return sentinel ? std::string("untouched") : Concat(ElementToDouble(dtype, element));
}

void ExpectBuffer(const uint8_t* got, const Expected& want, DataType dtype,
                  const std::string& call) {
  const std::vector<uint8_t>& bytes = want.bytes();
  if (bytes.empty() || std::memcmp(got, bytes.data(), bytes.size()) == 0) return;
  const size_t e = DataTypeSize(dtype);
  size_t i = 0;
  while (std::memcmp(got + i * e, bytes.data() + i * e, e) == 0) ++i;
  ADD_FAILURE() << call << ": element " << i << " of " << bytes.size() / e << " is "
                << Describe(got + i * e, dtype) << ", want "
                << Describe(bytes.data() + i * e, dtype);
}

std::string CountsText(const std::vector<int64_t>& counts) {
  std::string s = "[";
  for (size_t i = 0; i < counts.size(); ++i) s += Concat(i ? " " : "", counts[i]);
  return s + "]";
}

/// One step of the schedule on one rank.
class Step {
 public:
  Step(Communicator& comm, Quarantine& quarantine, uint64_t seed, int step, int64_t maxCount)
      : comm_(comm),
        quarantine_(quarantine),
        rank_(comm.Rank()),
        size_(comm.Size()),
        step_(step),
        maxCount_(maxCount),
        all_(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step)),
        mine_((seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step)) * 31 +
              static_cast<uint64_t>(rank_) + 1) {}

  void Run() {
    const auto kind = static_cast<Kind>(all_.Pick(static_cast<int>(Kind::kKinds)));
    const std::vector<DataType>& movable = MovableDtypes();
    dtype_ = movable[all_.Pick(movable.size())];
    if (kind == Kind::kAllReduce || kind == Kind::kReduceScatterV) {
      while (!IsReducibleDtype(dtype_)) dtype_ = movable[all_.Pick(movable.size())];
      reduceOp_ = static_cast<ReduceOp>(all_.Pick(4));
    }
    agree_ = all_.Coin();
    call_ = Concat("step ", step_, " rank ", rank_, " of ", size_, ": ", KindName(kind), " ",
                   DataTypeName(dtype_));
    switch (kind) {
      case Kind::kAllReduce:
        return AllReduce();
      case Kind::kAllGatherV:
        return AllGatherV();
      case Kind::kReduceScatterV:
        return ReduceScatterV();
      case Kind::kAllToAllV:
        return AllToAllV();
      case Kind::kBroadcast:
        return Broadcast();
      case Kind::kExchange:
        return Exchange();
      case Kind::kBarrier:
        Starting();
        return comm_.Barrier();
      case Kind::kAllGatherBytes:
        return AllGatherBytes();
      case Kind::kKinds:
        break;
    }
  }

 private:
  /// COLLOPS_TEST_SCHEDULE_TRACE=1: names each call before it starts (to find the one that hangs).
  void Starting() const {
    static const bool trace = std::getenv("COLLOPS_TEST_SCHEDULE_TRACE") != nullptr;
    if (trace) std::fprintf(stderr, "%s\n", call_.c_str());
  }

  /// The agreement check an operation runs first, on the steps that draw it.
  void Agree(const std::string& opName, int64_t count = -1, int root = -1,
             std::vector<int64_t> sendCounts = {}, std::vector<int64_t> recvCounts = {}) {
    if (!agree_) return;
    CallSignature signature;
    signature.opName = opName;
    signature.dtype = dtype_;
    signature.count = count;
    signature.root = root;
    signature.sendCounts = std::move(sendCounts);
    signature.recvCounts = std::move(recvCounts);
    comm_.Agree(signature);
  }

  /// A buffer for `role` of `elements`, from the heap (AllocateShared) when this rank draws that
  /// and the communicator has one; the call's description says where it lies.
  std::unique_ptr<CallBuffer> Buffer(const char* role, int64_t elements) {
    auto buffer = std::make_unique<CallBuffer>(comm_, quarantine_, elements, dtype_, mine_.Coin());
    if (buffer->shared()) call_ += Concat(" ", role, "@heap");
    return buffer;
  }

  /// Piece `piece` of rank `rank`'s data in this step (TestValues: exact in the dtype, and
  /// reductions of them over 7 ranks too); every rank computes any rank's.
  std::vector<double> Values(int rank, int piece, int64_t count) const {
    return TestValues(dtype_, count, static_cast<uint64_t>(step_) * 4099 + piece, rank,
                      reduceOp_ == ReduceOp::kProd);
  }
  /// The golden of reducing piece `piece` of every rank.
  std::vector<double> Reduced(int piece, int64_t count) const {
    std::vector<std::vector<double>> perRank;
    for (int r = 0; r < size_; ++r) perRank.push_back(Values(r, piece, count));
    return FoldRanks(perRank, reduceOp_);
  }

  std::vector<int64_t> CountsOfAll(int64_t most) {
    std::vector<int64_t> counts(size_);
    for (auto& c : counts) c = all_.Count(most);
    return counts;
  }

  void AllReduce() {
    const int64_t count = all_.Count(maxCount_);
    const bool inPlace = mine_.Coin();
    call_ += Concat("/", ReduceOpName(reduceOp_), " count ", count, inPlace ? " in place" : "");
    const std::unique_ptr<CallBuffer> in = Buffer("in", count);
    Fill(in->data(), dtype_, 0, Values(rank_, 0, count));
    const std::unique_ptr<CallBuffer> out = Buffer("out", inPlace ? 0 : count);
    uint8_t* result = inPlace ? in->data() : out->data();
    Starting();
    Agree(ReducingOpName("AllReduce", reduceOp_), count);
    comm_.AllReduce(in->data(), result, static_cast<size_t>(count), dtype_, reduceOp_);
    Expected want(count, dtype_);
    want.Set(0, Reduced(0, count));
    ExpectBuffer(result, want, dtype_, call_);
  }

  void AllGatherV() {
    const std::vector<int64_t> counts = CountsOfAll(maxCount_ / size_);
    std::vector<int64_t> rdispls;
    const int64_t total = mine_.Layout(counts, &rdispls);
    call_ += Concat(" recvCounts ", CountsText(counts), " rdispls ", CountsText(rdispls));
    const std::unique_ptr<CallBuffer> in = Buffer("in", counts[rank_]);
    Fill(in->data(), dtype_, 0, Values(rank_, 0, counts[rank_]));
    const std::unique_ptr<CallBuffer> out = Buffer("out", total);
    Starting();
    Agree("AllGatherV");
    comm_.AllGatherV(in->data(), static_cast<size_t>(counts[rank_]), out->data(), counts.data(),
                     rdispls.data(), dtype_);
    Expected want(total, dtype_);
    for (int j = 0; j < size_; ++j) want.Set(rdispls[j], Values(j, 0, counts[j]));
    ExpectBuffer(out->data(), want, dtype_, call_);
  }

  /// Rank i's piece of every input is piece i of the data.
  void ReduceScatterV() {
    const std::vector<int64_t> counts = CountsOfAll(maxCount_ / size_);
    std::vector<int64_t> sdispls;
    const int64_t total = mine_.Layout(counts, &sdispls);
    call_ += Concat("/", ReduceOpName(reduceOp_), " counts ", CountsText(counts), " sdispls ",
                    CountsText(sdispls));
    const std::unique_ptr<CallBuffer> in = Buffer("in", total);
    for (int i = 0; i < size_; ++i)
      Fill(in->data(), dtype_, sdispls[i], Values(rank_, i, counts[i]));
    const std::unique_ptr<CallBuffer> out = Buffer("out", counts[rank_]);
    Starting();
    Agree(ReducingOpName("ReduceScatterV", reduceOp_));
    comm_.ReduceScatterV(in->data(), counts.data(), sdispls.data(), out->data(),
                         static_cast<size_t>(counts[rank_]), dtype_, reduceOp_);
    Expected want(counts[rank_], dtype_);
    want.Set(0, Reduced(rank_, counts[rank_]));
    ExpectBuffer(out->data(), want, dtype_, call_);
  }

  /// The piece for rank i is piece i of the sender's data.
  void AllToAllV() {
    // counts[j * R + i]: elements rank j sends to rank i.
    std::vector<int64_t> matrix(static_cast<size_t>(size_) * size_);
    for (auto& c : matrix) c = all_.Count(maxCount_ / (size_ * size_));
    std::vector<int64_t> sendCounts(size_), recvCounts(size_), sdispls, rdispls;
    for (int i = 0; i < size_; ++i) {
      sendCounts[i] = matrix[rank_ * size_ + i];
      recvCounts[i] = matrix[i * size_ + rank_];
    }
    const int64_t inTotal = mine_.Layout(sendCounts, &sdispls);
    const int64_t outTotal = mine_.Layout(recvCounts, &rdispls);
    call_ += Concat(" sendCounts ", CountsText(sendCounts), " recvCounts ", CountsText(recvCounts));
    const std::unique_ptr<CallBuffer> in = Buffer("in", inTotal);
    for (int i = 0; i < size_; ++i) {
      Fill(in->data(), dtype_, sdispls[i], Values(rank_, i, sendCounts[i]));
    }
    const std::unique_ptr<CallBuffer> out = Buffer("out", outTotal);
    Starting();
    Agree("AllToAllV", -1, -1, sendCounts, recvCounts);
    comm_.AllToAllV(in->data(), sendCounts.data(), sdispls.data(), out->data(), recvCounts.data(),
                    rdispls.data(), dtype_);
    Expected want(outTotal, dtype_);
    for (int j = 0; j < size_; ++j) want.Set(rdispls[j], Values(j, rank_, recvCounts[j]));
    ExpectBuffer(out->data(), want, dtype_, call_);
  }

  void Broadcast() {
    const int root = static_cast<int>(all_.Pick(size_));
    const int64_t count = all_.Count(maxCount_);
    call_ += Concat(" root ", root, " count ", count);
    const std::unique_ptr<CallBuffer> buf = Buffer("buf", count);
    // Non-roots start from values of their own (piece 1), which must all be replaced.
    Fill(buf->data(), dtype_, 0, Values(rank_, rank_ == root ? 0 : 1, count));
    Starting();
    Agree("Broadcast", count, root);
    comm_.Broadcast(buf->data(), static_cast<size_t>(count), dtype_, root);
    Expected want(count, dtype_);
    want.Set(0, Values(root, 0, count));
    ExpectBuffer(buf->data(), want, dtype_, call_);
  }

  /// A ring, every rank sending right and receiving left, one or two messages per channel (they
  /// must arrive in the order sent); message m is piece m of the sender's data.
  void Exchange() {
    if (size_ == 1) return;
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    const int messages = all_.Coin() ? 1 : 2;
    std::vector<std::vector<int64_t>> counts;
    for (int m = 0; m < messages; ++m) counts.push_back(CountsOfAll(maxCount_ / size_));
    std::vector<std::unique_ptr<CallBuffer>> sends, recvs;
    std::vector<PointToPoint> ops;
    for (int m = 0; m < messages; ++m) {
      const int64_t out = counts[m][rank_], in = counts[m][left];
      call_ += Concat(" message ", m, " sends ", out, " receives ", in);
      sends.push_back(Buffer("send", out));
      recvs.push_back(Buffer("recv", in));
      Fill(sends[m]->data(), dtype_, 0, Values(rank_, m, out));
      ops.push_back(PointToPoint::Send(sends[m]->data(), static_cast<size_t>(out), dtype_, right));
      ops.push_back(PointToPoint::Recv(recvs[m]->data(), static_cast<size_t>(in), dtype_, left));
    }
    // Receives first on odd steps: a group's order must not matter.
    if (step_ % 2 == 1) std::reverse(ops.begin(), ops.end());
    Starting();
    comm_.Exchange(ops);
    for (int m = 0; m < messages; ++m) {
      const int64_t in = counts[m][left];
      Expected want(in, dtype_);
      want.Set(0, Values(left, m, in));
      ExpectBuffer(recvs[m]->data(), want, dtype_, Concat(call_, " (message ", m, ")"));
    }
  }

  void AllGatherBytes() {
    const size_t bytes = all_.Pick(300);
    call_ = Concat("step ", step_, " rank ", rank_, ": AllGatherBytes of ", bytes);
    const auto byteOf = [&](int r, size_t b) { return static_cast<uint8_t>(r * 31 + b + step_); };
    std::vector<uint8_t> in(bytes + 1), out(bytes * size_ + 1, kSentinel);
    for (size_t b = 0; b < bytes; ++b) in[b] = byteOf(rank_, b);
    Starting();
    comm_.AllGatherBytes(in.data(), out.data(), bytes);
    std::vector<uint8_t> want(out.size(), kSentinel);
    for (int r = 0; r < size_; ++r) {
      for (size_t b = 0; b < bytes; ++b) want[r * bytes + b] = byteOf(r, b);
    }
    EXPECT_EQ(out, want) << call_;
  }

  Communicator& comm_;
  Quarantine& quarantine_;
  const int rank_, size_, step_;
  const int64_t maxCount_;
  Draws all_;   ///< the schedule's draws: equal on every rank
  Draws mine_;  ///< this rank's own: buffers, in place, displacements
  DataType dtype_ = ACL_FLOAT;
  ReduceOp reduceOp_ = ReduceOp::kSum;
  bool agree_ = false;
  std::string call_;
};

}  // namespace

void RunRandomSchedule(Communicator& comm, uint64_t seed, int steps, int64_t maxCount) {
  // Soak runs: other schedules without a rebuild (every rank of a job sees the same environment).
  if (const char* offset = std::getenv("COLLOPS_TEST_SCHEDULE_SEED")) {
    seed += std::strtoull(offset, nullptr, 10) * 1000;
  }
  if (const char* more = std::getenv("COLLOPS_TEST_SCHEDULE_STEPS")) steps = std::atoi(more);
  Quarantine quarantine;
  for (int step = 0; step < steps; ++step) {
    Step(comm, quarantine, seed, step, maxCount).Run();
    quarantine.NextStep();
  }
}

}  // namespace testing
}  // namespace collops
