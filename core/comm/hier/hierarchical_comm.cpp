#include "core/comm/hier/hierarchical_comm.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <utility>

#include "collops/hierarchical_communicator.h"
#include "collops/signature.h"
#include "collops/status.h"
#include "core/comm/hier/job_rank_names.h"
#include "core/comm/hier/wide_accumulation.h"

namespace collops {
namespace hier {

uint8_t* ScratchPool::Get(size_t slot, size_t bytes) {
  if (slot >= buffers_.size()) buffers_.resize(slot + 1);
  Buffer& buffer = buffers_[slot];
  if (buffer.data == nullptr || buffer.bytes < bytes) {
    buffer.data.reset();  // before the new one: the peak stays one buffer
    buffer.bytes = std::max<size_t>(bytes, 1);
    buffer.data.reset(new uint8_t[buffer.bytes]);
  }
  return buffer.data.get();
}

std::vector<int64_t> Displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<Communicator> flat,
                                                   std::shared_ptr<Communicator> intra,
                                                   std::shared_ptr<Communicator> inter,
                                                   HostLayout layout)
    : flat_(std::move(flat)), intra_(std::move(intra)), inter_(std::move(inter)) {
  if (flat_ == nullptr || intra_ == nullptr) {
    Fail(ERROR_INVALID_PARAM, "hierarchical communicator: the ",
         flat_ == nullptr ? "flat" : "intra", " communicator is null");
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
  const bool leader = mine.front() == rank_;
  if (leader != (inter_ != nullptr)) {
    Fail(ERROR_INVALID_PARAM, "hierarchical communicator (rank ", rank_, "): ",
         leader ? "a host leader needs the inter-host communicator"
                : "only host leaders may have an inter-host communicator");
  }
  if (inter_ != nullptr && (inter_->Size() != HostCount() || inter_->Rank() != host_)) {
    Fail(ERROR_INVALID_PARAM, "hierarchical communicator (rank ", rank_, "): inter is rank ",
         inter_->Rank(), " of ", inter_->Size(), " but this leader is host ", host_, " of ",
         HostCount());
  }
  const std::string hostScope =
      Concat("host ", host_, "'s ", intra_->BackendName(), " communicator");
  intra_ = WithJobRankNames(std::move(intra_), hostScope, mine);
  if (inter_ != nullptr) {
    std::vector<int> leaders;
    for (const std::vector<int>& ranks : ranksOn_) leaders.push_back(ranks.front());
    const std::string leaderScope =
        Concat("the host leaders' ", inter_->BackendName(), " communicator");
    inter_ = WithJobRankNames(std::move(inter_), leaderScope, leaders);
  }
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
  if (inter_ != nullptr) inter_->SetFailureHook(stopHost);
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
  return flat_->Broken() || intra_->Broken() || (inter_ != nullptr && inter_->Broken());
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
  if (HostCount() > 1 && NeedsWideAccumulation(dtype, op)) {
    std::vector<float> wide(count);
    Widen(dtype, in, wide.data(), count);
    intra_->AllReduce(wide.data(), wide.data(), count, ACL_FLOAT, op);
    if (AcrossHosts()) {
      inter_->AllReduce(wide.data(), wide.data(), count, ACL_FLOAT, op);
      Narrow(dtype, wide.data(), out, count);
    }
    intra_->Broadcast(out, count, dtype, 0);
    return;
  }
  intra_->AllReduce(in, out, count, dtype, op);
  if (HostCount() == 1) return;
  if (AcrossHosts()) inter_->AllReduce(out, out, count, dtype, op);
  intra_->Broadcast(out, count, dtype, 0);
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
  Scratch hostBlock(scratch_, 0, hostCounts[host_] * es);
  intra_->AllGatherV(in, sendCount, hostBlock.get(), localCounts.data(), localDispls.data(), dtype);
  Scratch everything(scratch_, 1, HostCount() > 1 ? total * es : 0);
  const uint8_t* blocks = hostBlock.get();
  if (HostCount() > 1) {
    if (AcrossHosts()) {
      inter_->AllGatherV(hostBlock.get(), hostCounts[host_], everything.get(), hostCounts.data(),
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
  if (AcrossHosts()) inter_->Broadcast(buf, count, dtype, rootHost);
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
  if (AcrossHosts()) inter_->Barrier();
  intra_->Barrier();
}

std::shared_ptr<Communicator> HierarchicalCommunicator::Split(int color, int key) {
  return flat_->Split(color, key);
}

}  // namespace hier

std::shared_ptr<Communicator> MakeHierarchicalCommunicator(std::shared_ptr<Communicator> flat,
                                                           std::shared_ptr<Communicator> intra,
                                                           std::shared_ptr<Communicator> inter,
                                                           HostLayout layout) {
  return std::make_shared<hier::HierarchicalCommunicator>(std::move(flat), std::move(intra),
                                                          std::move(inter), std::move(layout));
}

}  // namespace collops
