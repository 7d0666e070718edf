// The "collops" backend's group: joining it, its communicator, the per-call wrapper, and the
// collectives that neither reduce nor gather (collops_backend.h).
#include "collops_backend.h"

#include <utility>

#include "c10d_engine.h"
#include "c10d_groups.h"
#include "collops/backend.h"
#include "collops/hierarchical_communicator.h"
#include "collops_backend_tensors.h"
#include "group_join.h"
#include "intra_op_threads.h"
#include "ops/ops.h"
#include "shared_tensor.h"

namespace collops {
namespace {

constexpr char kBackendName[] = "collops";

}  // namespace

CollopsBackend::CollopsBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                               double timeoutSeconds)
    : Backend(rank, size), store_(store), timeoutSeconds_(timeoutSeconds) {
  // Agree on a domain now, while every rank is constructing; the communicator itself is
  // created on first use, so groups that never communicate cost no rendezvous.
  try {
    domain_ = JoinGroup(*store, rank, size, timeoutSeconds);
  } catch (const Error& e) {
    TORCH_CHECK(false, StatusName(e.status()), ": ", e.what());
  }
  layout_ = ExchangeHostLayout(*store, domain_, rank, size);
  ShareCpusWithLocalRanks(static_cast<int>(layout_.RanksOn(layout_.hostOfRank[rank]).size()));
  p2p_ = std::make_shared<DeferredP2P>(
      [this](const std::vector<PointToPoint>& ops) { return RunP2P(ops); });
}

CollopsBackend::~CollopsBackend() { p2p_->Close(); }

std::string CollopsBackend::CommunicatorName() {
  std::lock_guard<std::mutex> lock(mu_);
  return comm_ ? comm_->BackendName() : "";
}

at::Tensor CollopsBackend::EmptySharedBytes(int64_t bytes) {
  Comm();
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    comm = comm_;
  }
  return SharedOrEmpty({bytes}, at::kByte, std::move(comm));
}

const std::string CollopsBackend::getBackendName() const { return kBackendName; }

uint64_t CollopsBackend::getSequenceNumberForGroup() {
  p2p_->Flush();
  return collectivesIssued_.load();
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                         const c10d::BroadcastOptions& opts) {
  CheckEntry("broadcast", tensors, "tensor");
  return Run(c10d::OpType::BROADCAST, tensors, [&] {
    for (auto& t : tensors) {
      InPlace(t, "broadcast", [&](at::Tensor& c) {
        // In elements of its dtype, so ranks whose tensors differ in dtype fail the check.
        const auto [dtype, es] = MovedAs(c);
        Comm().Broadcast(c.data_ptr(), NumBytes(c) / es, dtype, static_cast<int>(opts.rootRank));
      });
    }
  });
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::barrier(const c10d::BarrierOptions&) {
  return Run(c10d::OpType::BARRIER, {}, [&] { Comm().Barrier(); });
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::send(std::vector<at::Tensor>& tensors, int dst,
                                                    int /*tag*/) {
  return QueueP2P(PointToPoint::Kind::kSend, tensors, dst);
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::recv(std::vector<at::Tensor>& tensors, int src,
                                                    int /*tag*/) {
  return QueueP2P(PointToPoint::Kind::kRecv, tensors, src);
}

// Deferred until waited on or until the next call of any other kind (deferred_p2p.h). A refused
// tensor is queued as a refusal, which tells the peer, and its Work raises the refusal when
// waited on: raised here, it would leave the peer waiting for an op this rank never runs.
c10::intrusive_ptr<c10d::Work> CollopsBackend::QueueP2P(PointToPoint::Kind kind,
                                                        std::vector<at::Tensor>& tensors,
                                                        int peer) {
  const bool send = kind == PointToPoint::Kind::kSend;
  const char* what = send ? "send" : "recv";
  TORCH_CHECK(tensors.size() == 1, "collops backend: ", what, " takes one tensor, got ",
              tensors.size());
  try {
    CheckCpu(tensors[0], what);
  } catch (const c10::Error& e) {
    return p2p_->Refuse(kind, peer, getRank(), e.what_without_backtrace());
  }
  return send ? p2p_->Send(tensors[0], peer, getRank()) : p2p_->Recv(tensors[0], peer, getRank());
}

VerifiedCommunicator& CollopsBackend::Comm() {
  // A plain load and store, not a read-modify-write: this runs on every call, and Run only asks
  // whether its own body got here (a group's collectives are issued from one thread at a time).
  commUses_.store(commUses_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (VerifiedCommunicator* ready = commReady_.load(std::memory_order_acquire)) return *ready;
  std::lock_guard<std::mutex> lock(mu_);
  // Created once. A communicator that broke (lost peer, timeout) stays: every later call fails
  // fast with its error, as torch's own backends do. Rebuilding it would start a rendezvous
  // that waits the whole timeout for a rank that is gone.
  if (!comm_) {
    std::shared_ptr<Communicator> inner;
    if (layout_.SingleHost()) {
      inner = CreateCommunicator(LcclParam(domain_, getRank(), getSize()));
    } else {
      inner = CreateHierarchical();
    }
    // Verified: torch.distributed callers pass shapes per rank, and ranks that disagree must
    // get ERROR_RANK_MISMATCH, not a lost peer or silently wrong data.
    engine_ = inner;
    comm_ = std::make_shared<VerifiedCommunicator>(inner, "collops backend");
    commReady_.store(comm_.get(), std::memory_order_release);
  }
  return *comm_;
}

void CollopsBackend::ShareRefusal(const char* what, Status status) {
  try {
    p2p_->Flush();  // as RunCollective: the peers' queued sends and receives ran before theirs
    // The engine: the check comm_ runs is its Agree. Created here when the refused call is the
    // group's first: the peers wait in the creation's rendezvous, and a rank that stayed out
    // would leave them there for the timeout, or, when its next call is a collective, paired
    // with that call instead of the refused one.
    Communicator& comm = OperationComm();
    if (!comm.Broken()) ShareLocalFailure(comm, what, status);
  } catch (const std::exception&) {
    // The communicator could not be made (a peer is gone, or the timeout): the refusal is still
    // this rank's error to report.
  }
}

Communicator& CollopsBackend::OperationComm() {
  Comm();
  std::lock_guard<std::mutex> lock(mu_);
  return *engine_;
}

CollopsBackend* CollopsOf(const c10d::ProcessGroup& group) {
  auto& pg = const_cast<c10d::ProcessGroup&>(group);
  try {
    return dynamic_cast<CollopsBackend*>(pg.getBackend(c10::DeviceType::CPU).get());
  } catch (const c10::Error&) {
    return nullptr;  // no backend for CPU tensors
  }
}

OperationPtr NewQuantAllReduce(int rank, int rankSize, int quantType, int outDataType,
                               Communicator* comm) {
  AllReduceParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.quantType = quantType;
  param.outDataType = outDataType;
  param.comm = comm;
  Operation* created = nullptr;
  const Status made = CreateOperation(param, &created);
  TORCH_CHECK(made == NO_ERROR, "collops.quant_all_reduce: ", StatusName(made), ": ",
              LastErrorMessage());
  return OperationPtr(created);
}

Operation& CollopsBackend::QuantAllReduceOperation(int quantType, int outDataType) {
  Communicator& comm = OperationComm();
  std::lock_guard<std::mutex> lock(mu_);
  OperationPtr& op = quantOps_[{quantType, outDataType}];
  if (!op) op = NewQuantAllReduce(getRank(), getSize(), quantType, outDataType, &comm);
  return *op;
}

void CollopsBackend::RunOperation(Operation& op, const VariantPack& pack) {
  RunCollective([&] {
    uint64_t workspaceSize = 0;
    Status status = op.Setup(pack, workspaceSize, nullptr);
    at::Tensor workspace;
    if (status == NO_ERROR) {
      // Most calls need none (lccl's quantised AllReduce stages in its own segment).
      if (workspaceSize > 0)
        workspace = at::empty({static_cast<int64_t>(workspaceSize)}, at::kByte);
      status = op.Execute(pack, workspaceSize > 0 ? workspace.data_ptr<uint8_t>() : nullptr,
                          workspaceSize, nullptr);
    }
    TORCH_CHECK(status == NO_ERROR, "collops backend: ", op.GetName(), " failed with ",
                StatusName(status), ": ", LastErrorMessage());
  });
}

CommParam CollopsBackend::LcclParam(const std::string& domain, int rank, int size) const {
  CommParam p;
  p.rank = rank;
  p.rankSize = size;
  p.backend = "lccl";
  p.commMode = COMM_MULTI_PROCESS;
  p.commDomain = domain;
  p.timeoutSeconds = timeoutSeconds_;
  return p;
}

// Every rank creates, in this order: its host's lccl communicator, the gloo group of all ranks,
// and the gloo group of its rail (the ranks at its local index, one per host; rail 0 is the
// leaders). The gloo groups live under a Store prefix per creation, so a group re-created after
// a failure never reads its predecessor's addresses.
std::shared_ptr<Communicator> CollopsBackend::CreateHierarchical() {
  const int rank = getRank();
  const int host = layout_.hostOfRank[rank];
  const int local = layout_.LocalIndex(rank);
  std::shared_ptr<Communicator> intra = CreateCommunicator(LcclParam(
      Concat(domain_, "@host", host), local, static_cast<int>(layout_.RanksOn(host).size())));
  // Under the token: the Store outlives restarts (group_join.h).
  const std::string prefix = Concat("collops/hier.", domain_, ".", generation_++, "/");
  auto flat = std::make_shared<ProcessGroupCommunicator>(
      MakeGlooBackend(store_, prefix + "flat/", rank, getSize(), timeoutSeconds_), store_,
      prefix + "flat");
  const std::string railPrefix = Concat(prefix, "rail", local);
  auto rail = std::make_shared<ProcessGroupCommunicator>(
      MakeGlooBackend(store_, railPrefix + "/", layout_.RailRank(rank),
                      static_cast<int>(layout_.HostsOfRail(local).size()), timeoutSeconds_),
      store_, railPrefix);
  return MakeHierarchicalCommunicator(std::move(flat), std::move(intra), std::move(rail), layout_);
}

std::string CollopsBackend::Describe(const Error& e) const {
  return Concat("collops backend (rank ", getRank(), " of ", getSize(), ", domain ", domain_,
                "): ", StatusName(e.status()), ": ", e.what());
}

std::string CollopsBackend::RunP2P(const std::vector<PointToPoint>& ops) {
  try {
    Comm().Exchange(ops);
    return "";
  } catch (const Error& e) {
    // The sizes in a send/recv mismatch are the engine's, who saw bytes (deferred_p2p.cpp).
    if (e.status() != ERROR_RANK_MISMATCH || !IsSendRecvMismatchMessage(e.what())) {
      return Describe(e);
    }
    return Concat(Describe(e),
                  " (send and recv move bytes here, as gloo's do, so the counts "
                  "are bytes: a float32 tensor of 5 elements is 20 int8 elements)");
  }
}

}  // namespace collops
