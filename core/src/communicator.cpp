#include "collops/communicator.h"

#include "collops/signature.h"
#include "collops/status.h"

namespace collops {

void Communicator::Unsupported(const char* what) const {
  Fail(ERROR_BACKEND_UNAVAILABLE, "backend ", BackendName(), " does not support ", what);
}

void Communicator::AllReduce(const void*, void*, size_t, DataType, ReduceOp) {
  Unsupported("AllReduce");
}
void Communicator::AllGatherV(const void*, size_t, void*, const int64_t*, const int64_t*,
                              DataType) {
  Unsupported("AllGatherV");
}
void Communicator::ReduceScatterV(const void*, const int64_t*, const int64_t*, void*, size_t,
                                  DataType, ReduceOp) {
  Unsupported("ReduceScatterV");
}
void Communicator::AllToAllV(const void*, const int64_t*, const int64_t*, void*, const int64_t*,
                             const int64_t*, DataType) {
  Unsupported("AllToAllV");
}
void Communicator::StartAllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls,
                                  void* out, const int64_t* recvCounts, const int64_t* rdispls,
                                  DataType dtype) {
  AllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype);
}
void Communicator::Broadcast(void*, size_t, DataType, int) { Unsupported("Broadcast"); }
void Communicator::Send(const void*, size_t, DataType, int) { Unsupported("Send"); }
void Communicator::Recv(void*, size_t, DataType, int) { Unsupported("Recv"); }
void Communicator::Exchange(const std::vector<PointToPoint>& ops) {
  if (ops.size() != 1) Unsupported("Exchange");
  const PointToPoint& op = ops[0];
  if (op.kind == PointToPoint::Kind::kSend) {
    Send(op.buf, op.count, op.dtype, op.peer);
  } else {
    Recv(op.buf, op.count, op.dtype, op.peer);
  }
}
void Communicator::Barrier() { Unsupported("Barrier"); }
std::shared_ptr<Communicator> Communicator::Split(int, int) { Unsupported("Split"); }
void Communicator::Agree(const CallSignature& mine) { VerifyAgreement(*this, mine); }
void* Communicator::AllocateShared(size_t) { return nullptr; }
bool Communicator::FreeShared(void*) { return false; }

namespace {
constexpr const char* kOneThreadRule =
    "operations that share a communicator (the same commDomain, Context and rank) must be "
    "called by one thread at a time, in the same order on every rank; give threads that run "
    "at the same time their own commDomain";
}  // namespace

ExclusiveUse::ExclusiveUse(Communicator& comm, const std::string& caller)
    : comm_(comm), caller_(caller) {
  int free = 0;
  if (comm_.use_.compare_exchange_strong(free, 1, std::memory_order_acquire)) return;
  int held = 1;  // tell the holder, unless it is gone already or was told
  comm_.use_.compare_exchange_strong(held, 2, std::memory_order_relaxed);
  Fail(ERROR_COMM_FAIL, caller_, " (rank ", comm_.Rank(), "): another thread of this rank is in a ",
       "call on the same ", comm_.BackendName(), " communicator; ", kOneThreadRule,
       ". That call fails too, and the communicator is stopped on every rank");
}

ExclusiveUse::~ExclusiveUse() { comm_.use_.store(0, std::memory_order_release); }

void ExclusiveUse::Finish() {
  if (comm_.use_.load(std::memory_order_relaxed) != 2) return;
  const std::string message =
      Concat(caller_, " (rank ", comm_.Rank(), "): another thread of this rank called on the same ",
             comm_.BackendName(),
             " communicator during this call, so the peers may have paired this call with that "
             "one's; ",
             kOneThreadRule, ". The communicator is stopped on every rank");
  comm_.Abort(ERROR_COMM_FAIL, message);
  throw Error(ERROR_COMM_FAIL, message);
}

std::vector<int> PreviousOnChannel(const std::vector<PointToPoint>& ops) {
  std::vector<int> previous(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    for (size_t j = i; j-- > 0;) {
      if (ops[j].kind == ops[i].kind && ops[j].peer == ops[i].peer) {
        previous[i] = static_cast<int>(j);
        break;
      }
    }
  }
  return previous;
}

std::string SendRecvMismatchMessage(const std::string& backend, int sender, int64_t sendCount,
                                    int64_t sendType, int receiver, int64_t recvCount,
                                    int64_t recvType) {
  // A refusal's count is its Status (PointToPoint::Refusal).
  auto refused = [](int64_t status) {
    return Concat("(", StatusName(static_cast<int32_t>(status)),
                  ": the tensor it was given failed its own checks; that rank raises why)");
  };
  if (sendType == ACL_DT_UNDEFINED) {
    return Concat(backend, " Send/Recv: rank ", sender, " refused its send to rank ", receiver, " ",
                  refused(sendCount), ", so rank ", receiver, "'s receive of ", recvCount,
                  " elements of ", DataTypeName(static_cast<DataType>(recvType)), " gets nothing");
  }
  if (recvType == ACL_DT_UNDEFINED) {
    return Concat(backend, " Send/Recv: rank ", receiver, " refused its receive from rank ", sender,
                  " ", refused(recvCount), ", so rank ", sender, "'s send of ", sendCount,
                  " elements of ", DataTypeName(static_cast<DataType>(sendType)), " goes nowhere");
  }
  return Concat(backend, " Send/Recv: rank ", sender, " sends ", sendCount, " elements of ",
                DataTypeName(static_cast<DataType>(sendType)), " to rank ", receiver,
                ", which expects ", recvCount, " elements of ",
                DataTypeName(static_cast<DataType>(recvType)), " from rank ", sender);
}

bool IsSendRecvMismatchMessage(const std::string& message) {
  return message.find(" Send/Recv: rank ") != std::string::npos &&
         message.find(", which expects ") != std::string::npos;
}

}  // namespace collops
