#include "collops/verified_communicator.h"

#include "collops/signature.h"
#include "collops/status.h"

namespace collops {

VerifiedCommunicator::VerifiedCommunicator(std::shared_ptr<Communicator> inner, std::string label)
    : inner_(std::move(inner)), label_(std::move(label)) {
  if (inner_ == nullptr) Fail(ERROR_COMM_EMPTY, label_, ": no communicator to verify");
}

// Runs on every call, so no stream (Concat): see ReducingOpName.
std::string VerifiedCommunicator::Name(const char* primitive) const {
  return std::string(label_).append(1, ' ').append(primitive);
}

void VerifiedCommunicator::AllGatherBytes(const void* in, void* out, size_t bytes) {
  CallSignature s;
  s.opName = Name("AllGatherBytes");
  s.count = static_cast<int64_t>(bytes);
  inner_->Agree(s);
  inner_->AllGatherBytes(in, out, bytes);
}

void VerifiedCommunicator::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                     ReduceOp op) {
  CallSignature s;
  s.opName = ReducingOpName(Name("AllReduce").c_str(), op);
  s.dtype = dtype;
  s.count = static_cast<int64_t>(count);
  inner_->Agree(s);
  inner_->AllReduce(in, out, count, dtype, op);
}

void VerifiedCommunicator::AllGatherV(const void* in, size_t sendCount, void* out,
                                      const int64_t* recvCounts, const int64_t* rdispls,
                                      DataType dtype) {
  AllGatherVAs("AllGatherV", in, sendCount, out, recvCounts, rdispls, dtype);
}

void VerifiedCommunicator::AllGatherVAs(const std::string& purpose, const void* in,
                                        size_t sendCount, void* out, const int64_t* recvCounts,
                                        const int64_t* rdispls, DataType dtype) {
  CallSignature s;
  s.opName = Name(purpose.c_str());
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
  s.opName = ReducingOpName(Name("ReduceScatterV").c_str(), op);
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
  s.opName = Name("AllToAllV");
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
  s.opName = Name("Broadcast");
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
  s.opName = Name("Barrier");
  inner_->Agree(s);
  inner_->Barrier();
}

}  // namespace collops
