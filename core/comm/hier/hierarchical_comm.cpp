#include "core/comm/hier/hierarchical_comm.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <utility>

#include "collops/hierarchical_communicator.h"
#include "collops/reduce.h"
#include "collops/signature.h"
#include "collops/status.h"
#include "core/comm/hier/job_rank_names.h"
#include "core/comm/hier/wide_accumulation.h"

namespace collops {
namespace hier {

ScratchPool::~ScratchPool() {
  for (Buffer& buffer : buffers_) {
    try {
      Release(buffer);
    } catch (const std::exception&) {  // a heap that cannot take it back keeps it; never throw here
    }
  }
}

void ScratchPool::Release(Buffer& buffer) {
  if (buffer.shared) {
    heap_->FreeShared(buffer.data);
  } else {
    delete[] buffer.data;
  }
  buffer = Buffer();
}

uint8_t* ScratchPool::Get(size_t slot, size_t bytes) {
  if (slot >= buffers_.size()) buffers_.resize(slot + 1);
  Buffer& buffer = buffers_[slot];
  if (buffer.data == nullptr || buffer.bytes < bytes) {
    Release(buffer);  // before the new one: the peak stays one buffer
    const size_t size = std::max<size_t>(bytes, 1);
    void* shared = heap_ != nullptr ? heap_->AllocateShared(size) : nullptr;
    buffer.shared = shared != nullptr;
    buffer.data = shared != nullptr ? static_cast<uint8_t*>(shared) : new uint8_t[size];
    buffer.bytes = size;
  }
  return buffer.data;
}

namespace {

/// The smallest block that ReduceOnRail swaps in halves between two hosts (see there).
constexpr size_t kRailExchangeMinBytes = 8 << 20;

}  // namespace

std::vector<int64_t> Displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<Communicator> flat,
                                                   std::shared_ptr<Communicator> intra,
                                                   std::shared_ptr<Communicator> rail,
                                                   HostLayout layout)
    : flat_(std::move(flat)), intra_(std::move(intra)), rail_(std::move(rail)) {
  if (flat_ == nullptr || intra_ == nullptr || rail_ == nullptr) {
    Fail(ERROR_INVALID_PARAM, "hierarchical communicator: the ",
         flat_ == nullptr    ? "flat"
         : intra_ == nullptr ? "intra"
                             : "rail",
         " communicator is null (every rank needs all three)");
  }
  rank_ = flat_->Rank();
  size_ = flat_->Size();
  if (static_cast<int>(layout.hostOfRank.size()) != size_) {
    Fail(ERROR_INVALID_PARAM, "hierarchical communicator: the host layout has ",
         layout.hostOfRank.size(), " ranks but the flat communicator has ", size_);
  }
  hostOf_ = layout.hostOfRank;
  for (int h = 0; h < layout.HostCount(); ++h) ranksOn_.push_back(layout.RanksOn(h));
  for (int r = 0; r < size_; ++r) localOf_.push_back(layout.LocalIndex(r));
  host_ = hostOf_[rank_];
  const std::vector<int>& mine = ranksOn_[host_];
  if (intra_->Size() != static_cast<int>(mine.size()) || intra_->Rank() != localOf_[rank_]) {
    Fail(ERROR_INVALID_PARAM, "hierarchical communicator (rank ", rank_, "): intra is rank ",
         intra_->Rank(), " of ", intra_->Size(), " but host ", host_, " (", layout.hostNames[host_],
         ") holds ", mine.size(), " ranks with this one at index ", localOf_[rank_]);
  }
  const std::vector<int> railHosts = layout.HostsOfRail(localOf_[rank_]);
  const int railRank = layout.RailRank(rank_);
  if (rail_->Size() != static_cast<int>(railHosts.size()) || rail_->Rank() != railRank) {
    Fail(ERROR_INVALID_PARAM, "hierarchical communicator (rank ", rank_, "): its rail is rank ",
         rail_->Rank(), " of ", rail_->Size(), " but local index ", localOf_[rank_], " exists on ",
         railHosts.size(), " hosts, this one (host ", host_, ") at position ", railRank);
  }
  railsCarryAllReduce_ = layout.Uniform() && HostCount() > 1 && mine.size() > 1;
  const std::string hostScope =
      Concat("host ", host_, "'s ", intra_->BackendName(), " communicator");
  intra_ = WithJobRankNames(std::move(intra_), hostScope, mine);
  std::vector<int> railRanks;
  for (int h : railHosts) railRanks.push_back(ranksOn_[h][localOf_[rank_]]);
  const std::string railScope =
      Leader() ? Concat("the host leaders' ", rail_->BackendName(), " communicator")
               : Concat("local index ", localOf_[rank_], "'s ", rail_->BackendName(), " rail");
  rail_ = WithJobRankNames(std::move(rail_), railScope, railRanks);
  // A cross-host message this rank sent just before it went to wait inside its host may still
  // be queued in its engine (OpenMPI over TCP moves data only inside MPI calls), and the rank
  // waiting for it may be the one this rank waits for: the intra waits keep the engine moving.
  // Weak: a caller-made intra communicator may outlive this one.
  std::weak_ptr<Communicator> engine = flat_;
  intra_->SetIdleHook([engine] {
    if (std::shared_ptr<Communicator> e = engine.lock()) e->Progress();
  });
  // When the engine loses a peer or times out on this rank, the ranks of this host may be waiting
  // in lccl for this one (a leader's broadcast of the cross-host result): stop them now rather
  // than when this process exits or their timeout runs out.
  std::weak_ptr<Communicator> host = intra_;
  auto stopHost = [host, rank = rank_](Status status, const std::string& why) {
    if (std::shared_ptr<Communicator> h = host.lock()) {
      h->Abort(status, Concat("hierarchical rank ", rank, "'s cross-host engine failed: ", why));
    }
  };
  flat_->SetFailureHook(stopHost);
  rail_->SetFailureHook(stopHost);
  scratch_ = std::make_unique<ScratchPool>(intra_.get());
}

void HierarchicalCommunicator::CheckUsable(const char* primitive) {
  agreed_.clear();
  ThrowIfBroken(primitive);
}

void HierarchicalCommunicator::ThrowIfBroken(const char* primitive) const {
  if (Broken()) {
    Fail(ERROR_COMM_FAIL, "hierarchical ", primitive, " (rank ", rank_, " of ", size_,
         "): the communicator failed earlier (timeout or lost peer); the error of that call says "
         "where");
  }
}

std::string HierarchicalCommunicator::BackendName() const {
  return Concat("hccl(", intra_->BackendName(), "+", flat_->BackendName(), ")");
}

bool HierarchicalCommunicator::Broken() const {
  return flat_->Broken() || intra_->Broken() || rail_->Broken();
}

void HierarchicalCommunicator::AllGatherBytes(const void* in, void* out, size_t bytes) {
  std::vector<int64_t> counts(size_, static_cast<int64_t>(bytes));
  const std::vector<int64_t> displs = Displacements(counts);
  AllGatherV(in, bytes, out, counts.data(), displs.data(), ACL_UINT8);
}

void HierarchicalCommunicator::Agree(const CallSignature& mine) {
  std::vector<uint8_t> records = ExchangeAgreement(*this, mine);
  if (!mine.sendCounts.empty()) agreed_ = std::move(records);
}

bool HierarchicalCommunicator::TakeAgreedCounts(const int64_t* sendCounts,
                                                const int64_t* recvCounts,
                                                std::vector<int64_t>& counts) {
  if (agreed_.empty()) return false;
  const std::vector<uint8_t> records = std::move(agreed_);
  agreed_.clear();
  const size_t stride = AgreementRecordBytes(size_);
  const uint8_t* own = records.data() + rank_ * stride;
  for (int j = 0; j < size_; ++j) {
    // The records passed the check, so they agree with each other; they must also be this very
    // call's, or the matrix describes another exchange.
    if (RecordedCount(own, size_, false, j) != sendCounts[j] ||
        RecordedCount(own, size_, true, j) != recvCounts[j]) {
      Fail(ERROR_INTERNAL_ERROR, "hierarchical AllToAllV (rank ", rank_,
           "): the counts differ from those of the Agree() before it (at rank ", j, ")");
    }
  }
  for (int j = 0; j < size_; ++j) {
    for (int i = 0; i < size_; ++i) {
      counts[static_cast<size_t>(j) * size_ + i] =
          RecordedCount(records.data() + j * stride, size_, false, i);
    }
  }
  return true;
}

void HierarchicalCommunicator::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                         ReduceOp op) {
  CheckUsable("AllReduce");
  if (count == 0) return;
  if (railsCarryAllReduce_) {
    AllReduceOnRails(in, out, count, dtype, op);
    return;
  }
  if (HostCount() > 1 && NeedsWideAccumulation(dtype, op)) {
    std::vector<float> wide(count);
    Widen(dtype, in, wide.data(), count);
    intra_->AllReduce(wide.data(), wide.data(), count, ACL_FLOAT, op);
    if (AcrossHosts()) {
      rail_->AllReduce(wide.data(), wide.data(), count, ACL_FLOAT, op);
      Narrow(dtype, wide.data(), out, count);
    }
    intra_->Broadcast(out, count, dtype, 0);
    return;
  }
  intra_->AllReduce(in, out, count, dtype, op);
  if (HostCount() == 1) return;
  if (AcrossHosts()) rail_->AllReduce(out, out, count, dtype, op);
  intra_->Broadcast(out, count, dtype, 0);
}

// Each of the host's L ranks owns one block of the vector: the host reduces each block onto its
// owner, the owners of one block (a rail, one per host) reduce it across the hosts, and the host
// gathers the blocks. Every host link then carries L streams of 1/L of the vector instead of the
// leader's one stream of all of it, and no rank broadcasts the whole result: parallel streams
// move the same bytes sooner, and the leaders spend no CPU on a broadcast (docs/performance.md
// has the measurements).
void HierarchicalCommunicator::AllReduceOnRails(const void* in, void* out, size_t count,
                                                DataType dtype, ReduceOp op) {
  const int n = static_cast<int>(ranksOn_[host_].size()), me = localOf_[rank_];
  std::vector<int64_t> blockCounts(n);
  for (int k = 0; k < n; ++k) {
    blockCounts[k] = static_cast<int64_t>(count / n + (static_cast<size_t>(k) < count % n));
  }
  const std::vector<int64_t> blockDispls = Displacements(blockCounts);
  const bool wide = NeedsWideAccumulation(dtype, op);
  const DataType work = wide ? ACL_FLOAT : dtype;
  const size_t mine = static_cast<size_t>(blockCounts[me]);
  const void* source = in;
  Scratch widened(*scratch_, 0, wide ? count * sizeof(float) : 0);
  if (wide) {
    Widen(dtype, in, reinterpret_cast<float*>(widened.get()), count);
    source = widened.get();
  }
  Scratch block(*scratch_, 1, mine * DataTypeSize(work));
  intra_->ReduceScatterV(source, blockCounts.data(), blockDispls.data(), block.get(), mine, work,
                         op);
  // A rail's ranks share a local index, so all of them skip an empty block alike.
  if (mine != 0) ReduceOnRail(block.get(), mine, work, op);
  if (wide) Narrow(dtype, reinterpret_cast<const float*>(block.get()), block.get(), mine);
  intra_->AllGatherV(block.get(), mine, out, blockCounts.data(), blockDispls.data(), dtype);
}

// Two hosts, large blocks: the engine's AllReduce of two ranks (OpenMPI: recursive doubling)
// sends the whole block both ways, reduces all of it on both sides and allocates a fresh
// temporary each call (every page faulted in again). Swapping halves instead, reducing one's own
// half into the pooled scratch and swapping the results back sends the same bytes and does half
// the reduction. Below kRailExchangeMinBytes the engine's own AllReduce wins (each Exchange swaps
// a header and a delivery report first). Measurements: docs/performance.md.
void HierarchicalCommunicator::ReduceOnRail(void* data, size_t count, DataType dtype, ReduceOp op) {
  if (rail_->Size() != 2 || count * DataTypeSize(dtype) < kRailExchangeMinBytes) {
    rail_->AllReduce(data, data, count, dtype, op);
    return;
  }
  const int me = rail_->Rank(), peer = 1 - me;
  const size_t es = DataTypeSize(dtype);
  const size_t half[2] = {count / 2, count - count / 2};
  auto* bytes = static_cast<uint8_t*>(data);
  uint8_t* part[2] = {bytes, bytes + half[0] * es};
  Scratch theirs(*scratch_, 2, half[me] * es);
  rail_->Exchange({PointToPoint::Send(part[peer], half[peer], dtype, peer),
                   PointToPoint::Recv(theirs.get(), half[me], dtype, peer)});
  const void* srcs[2];
  srcs[me] = part[me];
  srcs[peer] = theirs.get();
  ReduceArrays(dtype, op, srcs, 2, part[me], half[me]);
  rail_->Exchange({PointToPoint::Send(part[me], half[me], dtype, peer),
                   PointToPoint::Recv(part[peer], half[peer], dtype, peer)});
}

void HierarchicalCommunicator::AllGatherV(const void* in, size_t sendCount, void* out,
                                          const int64_t* recvCounts, const int64_t* rdispls,
                                          DataType dtype) {
  CheckUsable("AllGatherV");
  const size_t es = DataTypeSize(dtype);
  std::vector<int64_t> hostCounts(HostCount(), 0);
  for (int r = 0; r < size_; ++r) hostCounts[hostOf_[r]] += recvCounts[r];
  const std::vector<int64_t> hostDispls = Displacements(hostCounts);
  const int64_t total = hostDispls.back() + hostCounts.back();
  if (total == 0) return;
  const std::vector<int>& local = ranksOn_[host_];
  std::vector<int64_t> localCounts;
  for (int r : local) localCounts.push_back(recvCounts[r]);
  const std::vector<int64_t> localDispls = Displacements(localCounts);

  // Host blocks in host order, each holding its ranks' contributions in rank order.
  Scratch hostBlock(*scratch_, 0, hostCounts[host_] * es);
  intra_->AllGatherV(in, sendCount, hostBlock.get(), localCounts.data(), localDispls.data(), dtype);
  Scratch everything(*scratch_, 1, HostCount() > 1 ? total * es : 0);
  const uint8_t* blocks = hostBlock.get();
  if (HostCount() > 1) {
    if (AcrossHosts()) {
      rail_->AllGatherV(hostBlock.get(), hostCounts[host_], everything.get(), hostCounts.data(),
                        hostDispls.data(), dtype);
    }
    intra_->Broadcast(everything.get(), total, dtype, 0);
    blocks = everything.get();
  }
  std::vector<int64_t> next = HostCount() > 1 ? hostDispls : std::vector<int64_t>(1, 0);
  auto* dst = static_cast<uint8_t*>(out);
  for (int r = 0; r < size_; ++r) {
    int64_t& at = next[HostCount() > 1 ? hostOf_[r] : 0];
    if (recvCounts[r] != 0)
      std::memcpy(dst + rdispls[r] * es, blocks + at * es, recvCounts[r] * es);
    at += recvCounts[r];
  }
}

void HierarchicalCommunicator::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  CheckUsable("Broadcast");
  if (count == 0) return;
  const int rootHost = hostOf_[root];
  if (host_ == rootHost) intra_->Broadcast(buf, count, dtype, localOf_[root]);
  if (HostCount() == 1) return;
  if (AcrossHosts()) rail_->Broadcast(buf, count, dtype, rootHost);
  if (host_ != rootHost) intra_->Broadcast(buf, count, dtype, 0);
}

void HierarchicalCommunicator::Send(const void* buf, size_t count, DataType dtype, int peer) {
  Exchange({PointToPoint::Send(buf, count, dtype, peer)});
}

void HierarchicalCommunicator::Recv(void* buf, size_t count, DataType dtype, int peer) {
  Exchange({PointToPoint::Recv(buf, count, dtype, peer)});
}

// Every rank runs the ops with peers on its host first (one intra group), then those with other
// hosts (one flat group), so the intra groups of a host depend only on each other and no order of
// a group deadlocks. A mismatch in either part is thrown once both parts ran, as the peers expect
// both. That a send between hosts returns only once its data is through is the engine's part of
// the Exchange contract (the mpi engine waits for a delivery report; gloo progresses by itself).
void HierarchicalCommunicator::Exchange(const std::vector<PointToPoint>& ops) {
  CheckUsable("Exchange");
  std::vector<PointToPoint> local, remote;
  for (const PointToPoint& op : ops) {
    if (op.peer < 0 || op.peer >= size_ || op.peer == rank_) {
      Fail(ERROR_INVALID_PARAM, "hierarchical ", ops.size() == 1 ? "Send/Recv" : "Exchange",
           " (rank ", rank_, "): peer ", op.peer, " is not another rank of ", size_);
    }
    if (hostOf_[op.peer] == host_) {
      PointToPoint onHost = op;
      onHost.peer = localOf_[op.peer];
      local.push_back(onHost);
    } else {
      remote.push_back(op);
    }
  }
  std::exception_ptr mismatch;
  auto run = [&](Communicator& comm, const std::vector<PointToPoint>& group) {
    if (group.empty()) return;
    try {
      comm.Exchange(group);
    } catch (const Error& e) {
      if (e.status() != ERROR_RANK_MISMATCH) throw;
      if (!mismatch) mismatch = std::current_exception();
    }
  };
  run(*intra_, local);
  run(*flat_, remote);
  if (mismatch) std::rethrow_exception(mismatch);
}

void HierarchicalCommunicator::Barrier() {
  CheckUsable("Barrier");
  intra_->Barrier();
  if (HostCount() == 1) return;
  if (AcrossHosts()) rail_->Barrier();
  intra_->Barrier();
}

std::shared_ptr<Communicator> HierarchicalCommunicator::Split(int color, int key) {
  return flat_->Split(color, key);
}

}  // namespace hier

std::shared_ptr<Communicator> MakeHierarchicalCommunicator(std::shared_ptr<Communicator> flat,
                                                           std::shared_ptr<Communicator> intra,
                                                           std::shared_ptr<Communicator> rail,
                                                           HostLayout layout) {
  return std::make_shared<hier::HierarchicalCommunicator>(std::move(flat), std::move(intra),
                                                          std::move(rail), std::move(layout));
}

}  // namespace collops
