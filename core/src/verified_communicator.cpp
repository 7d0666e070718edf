#include "collops/verified_communicator.h"

#include "collops/signature.h"
#include "collops/status.h"

namespace collops {

VerifiedCommunicator::VerifiedCommunicator(std::shared_ptr<Communicator> inner, std::string label)
    : inner_(std::move(inner)), label_(std::move(label)) {
  if (inner_ == nullptr) Fail(ERROR_COMM_EMPTY, label_, ": no communicator to verify");
  names_.allGatherBytes = Name("AllGatherBytes");
  names_.allGatherV = Name("AllGatherV");
  names_.allToAllV = Name("AllToAllV");
  names_.broadcast = Name("Broadcast");
  names_.barrier = Name("Barrier");
  for (size_t i = 0; i < kReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    names_.allReduce[i] = ReducingOpName(Name("AllReduce").c_str(), op);
    names_.reduceScatterV[i] = ReducingOpName(Name("ReduceScatterV").c_str(), op);
  }
}

std::string VerifiedCommunicator::Name(const char* primitive) const {
  return std::string(label_).append(1, ' ').append(primitive);
}

void VerifiedCommunicator::Reducing(const std::array<std::string, kReduceOps>& names,
                                    const char* primitive, ReduceOp op, std::string* name) const {
  const auto i = static_cast<size_t>(op);
  if (i < kReduceOps) {
    *name = names[i];
  } else {
    *name = ReducingOpName(Name(primitive).c_str(), op);
  }
}

void VerifiedCommunicator::AllGatherBytes(const void* in, void* out, size_t bytes) {
  CallSignature s;
  s.opName = names_.allGatherBytes;
  s.count = static_cast<int64_t>(bytes);
  inner_->Agree(s);
  inner_->AllGatherBytes(in, out, bytes);
}

void VerifiedCommunicator::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                     ReduceOp op) {
  // One signature per thread, reused: the name (longer than a string holds inline) is copied
  // into memory allocated once instead of allocated and freed on every call. Only the fields set
  // here differ between calls.
  thread_local CallSignature s;
  Reducing(names_.allReduce, "AllReduce", op, &s.opName);
  s.dtype = dtype;
  s.count = static_cast<int64_t>(count);
  inner_->Agree(s);
  inner_->AllReduce(in, out, count, dtype, op);
}

void VerifiedCommunicator::AllGatherV(const void* in, size_t sendCount, void* out,
                                      const int64_t* recvCounts, const int64_t* rdispls,
                                      DataType dtype) {
  Gather(names_.allGatherV, in, sendCount, out, recvCounts, rdispls, dtype);
}

void VerifiedCommunicator::AllGatherVAs(const std::string& purpose, const void* in,
                                        size_t sendCount, void* out, const int64_t* recvCounts,
                                        const int64_t* rdispls, DataType dtype) {
  Gather(Name(purpose.c_str()), in, sendCount, out, recvCounts, rdispls, dtype);
}

void VerifiedCommunicator::Gather(std::string name, const void* in, size_t sendCount, void* out,
                                  const int64_t* recvCounts, const int64_t* rdispls,
                                  DataType dtype) {
  CallSignature s;
  s.opName = std::move(name);
  s.dtype = dtype;
  s.sendCounts.assign(Size(), static_cast<int64_t>(sendCount));
  s.recvCounts.assign(recvCounts, recvCounts + Size());
  s.sendField = "its element count";
  s.recvField = "the output split";
  inner_->Agree(s);
  inner_->AllGatherV(in, sendCount, out, recvCounts, rdispls, dtype);
}

void VerifiedCommunicator::ReduceScatterV(const void* in, const int64_t* sendCounts,
                                          const int64_t* sdispls, void* out, size_t recvCount,
                                          DataType dtype, ReduceOp op) {
  CallSignature s;
  Reducing(names_.reduceScatterV, "ReduceScatterV", op, &s.opName);
  s.dtype = dtype;
  s.sendCounts.assign(sendCounts, sendCounts + Size());
  s.recvCounts.assign(Size(), static_cast<int64_t>(recvCount));
  s.sendField = "the input split";
  s.recvField = "its output size";
  inner_->Agree(s);
  inner_->ReduceScatterV(in, sendCounts, sdispls, out, recvCount, dtype, op);
}

void VerifiedCommunicator::AllToAllV(const void* in, const int64_t* sendCounts,
                                     const int64_t* sdispls, void* out, const int64_t* recvCounts,
                                     const int64_t* rdispls, DataType dtype) {
  CallSignature s;
  s.opName = names_.allToAllV;
  s.dtype = dtype;
  s.sendCounts.assign(sendCounts, sendCounts + Size());
  s.recvCounts.assign(recvCounts, recvCounts + Size());
  s.sendField = "input split";
  s.recvField = "output split";
  inner_->Agree(s);
  inner_->AllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype);
}

void VerifiedCommunicator::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  CallSignature s;
  s.opName = names_.broadcast;
  s.dtype = dtype;
  s.count = static_cast<int64_t>(count);
  s.root = root;
  inner_->Agree(s);
  inner_->Broadcast(buf, count, dtype, root);
}

void VerifiedCommunicator::Send(const void* buf, size_t count, DataType dtype, int peer) {
  inner_->Send(buf, count, dtype, peer);
}

void VerifiedCommunicator::Recv(void* buf, size_t count, DataType dtype, int peer) {
  inner_->Recv(buf, count, dtype, peer);
}

void VerifiedCommunicator::Exchange(const std::vector<PointToPoint>& ops) { inner_->Exchange(ops); }

void VerifiedCommunicator::Barrier() {
  CallSignature s;
  s.opName = names_.barrier;
  inner_->Agree(s);
  inner_->Barrier();
}

}  // namespace collops
