#include "core/comm/shm/transport.h"

#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "collops/backend.h"
#include "collops/reduce.h"
#include "core/comm/shm/cpu_binding.h"
#include "core/comm/shm/process_copy.h"
#include "core/comm/shm/process_rendezvous.h"
#include "core/comm/shm/rank_list.h"

namespace collops {
namespace shm {

Transport::Transport(const CommParam& param) : rank_(param.rank), size_(param.rankSize) {
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
    created.Header().policy = ChoosePolicy(size_);
    segment_ = std::move(created);
    return fd;
  });
  if (rank_ != 0) segment_ = Segment::Attach(joined.memory.Get(), size_);
  policy_ = segment_.Header().policy;
  memory_ = std::move(joined.memory);
  if (segment_.HasHeaps()) {
    const SegmentLayout& layout = segment_.Layout();
    heap_.Reset(memory_.Get(), segment_.Heap(rank_), layout.heapOffset + rank_ * layout.heapBytes,
                layout.heapBytes, heapCacheBytes);
  }
  claim_ = std::move(joined.claim);
  ReleaseInForkedChildren(claim_.Get(), &segment_.Header().abort);
  pids_ = std::move(joined.pids);
  pidfds_ = std::move(joined.pidfds);
  budget_ = WaitBudget{Policy().spinNanos, Policy().yieldNanos};
  if (Policy().bindCpus != 0) BindToOwnCpu(rank_, size_);
  crossMemory_ = ProbeCrossMemory();
}

Transport::~Transport() { StopReleasingInForkedChildren(claim_.Get()); }

std::string Transport::Where() const {
  return Concat("lccl ", op_, " (rank ", rank_, " of ", size_, "): ");
}

void Transport::FailDtype(DataType dtype, const char* what) const {
  Fail(ERROR_INVALID_TENSOR_DTYPE, Where(), "dtype ", DataTypeName(dtype), " ", what);
}

void Transport::CheckReducible(DataType dtype) const {
  if (!IsReducibleDtype(dtype)) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, Where(), "cannot reduce dtype ", DataTypeName(dtype));
  }
}

void Transport::Post() {
  RankControl& me = segment_.Rank(rank_);
  me.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  me.posted.store(++round_, std::memory_order_release);
  me.word.Notify();
}

void Transport::WaitAll() {
  const uint64_t round = round_;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    RankControl& peer = segment_.Rank(r);
    auto arrived = [&] { return peer.posted.load(std::memory_order_acquire) >= round; };
    if (Spin(arrived, r)) continue;
    deadline_ = Deadline::After(timeoutSeconds_);
    const WaitingInRound mark(segment_.Rank(rank_), round);
    const WaitingFor waiting(segment_.Rank(rank_), r);
    if (peer.word.Wait(arrived, deadline_, [&] { AfterSlice([&] { CheckPeer(r); }); })) continue;
    std::vector<int> late;
    for (int j = 0; j < size_; ++j) {
      if (j != rank_ && segment_.Rank(j).posted.load(std::memory_order_acquire) < round) {
        late.push_back(j);
      }
    }
    BreakOnTimeout(late);
  }
}

void Transport::CarryAgreement(const CallSignature& mine) {
  // Writable now: every peer finished reading our record of round_ - 1 (same parity) before it
  // posted round_, which our last wait saw.
  const uint64_t round = round_ + 1;
  uint8_t* record = segment_.Record(rank_, round);
  std::memcpy(record, &round, sizeof round);
  EncodeAgreement(mine, size_, record + sizeof round);
  // Its names, for the messages; a call repeating the last one's names (a loop) copies nothing.
  if (agreement_.opName != mine.opName) agreement_.opName = mine.opName;
  if (agreement_.sendField != mine.sendField) agreement_.sendField = mine.sendField;
  if (agreement_.recvField != mine.recvField) agreement_.recvField = mine.recvField;
  agreementPending_ = true;
  // A rank that will not make the call sends its record with a round of its own, which meets the
  // first round of its peers' call.
  if (mine.failedStatus != 0) Round();
}

void Transport::CheckCarriedAgreement() {
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

bool Transport::StreamsOutput(size_t outputBytes) const {
  const uint64_t streamFrom = Policy().streamOutputBytes;
  return streamFrom != 0 && outputBytes >= streamFrom;
}

void Transport::CopyOut(uint8_t* dst, const uint8_t* src, size_t bytes, size_t outputBytes) const {
  if (StreamsOutput(outputBytes)) {
    StreamBytes(dst, src, bytes);
  } else {
    CopyBytes(dst, src, bytes);
  }
}

void* Transport::AllocateShared(size_t bytes) {
  // The heap's pages are the parent's: what the child got would be the parent's next allocation.
  if (InForkedChild()) RefuseForkedChild("AllocateShared");
  return heap_.Allocate(bytes);
}

}  // namespace shm
}  // namespace collops
