#include "core/comm/shm/process_comm.h"

#include <memory>

#include "collops/backend.h"
#include "core/comm/shm/algorithm_table.h"

namespace collops {
namespace shm {

ProcessCommunicator::ProcessCommunicator(const CommParam& param) : transport_(param) {}

void ProcessCommunicator::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                    ReduceOp op) {
  transport_.Enter("AllReduce");
  allReduce_.AllReduce(in, out, count, dtype, op);
}

void ProcessCommunicator::AllGatherBytes(const void* in, void* out, size_t bytes) {
  transport_.Enter("AllGatherBytes");
  gather_.AllGatherBytes(in, out, bytes);
}

void ProcessCommunicator::AllGatherV(const void* in, size_t sendCount, void* out,
                                     const int64_t* recvCounts, const int64_t* rdispls,
                                     DataType dtype) {
  transport_.Enter("AllGatherV");
  gather_.AllGatherV(in, sendCount, out, recvCounts, rdispls, dtype);
}

void ProcessCommunicator::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  transport_.Enter("Broadcast");
  gather_.Broadcast(buf, count, dtype, root);
}

void ProcessCommunicator::ReduceScatterV(const void* in, const int64_t* sendCounts,
                                         const int64_t* sdispls, void* out, size_t recvCount,
                                         DataType dtype, ReduceOp op) {
  transport_.Enter("ReduceScatterV");
  reduceScatter_.ReduceScatterV(in, sendCounts, sdispls, out, recvCount, dtype, op);
}

void ProcessCommunicator::AllToAllV(const void* in, const int64_t* sendCounts,
                                    const int64_t* sdispls, void* out, const int64_t* recvCounts,
                                    const int64_t* rdispls, DataType dtype) {
  transport_.Enter("AllToAllV");
  allToAll_.AllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype);
}

bool ProcessCommunicator::AllReduceQuantised(const int8_t* in, void* out, size_t count,
                                             const QuantScale& quant, DataType outDtype) {
  transport_.Enter("AllReduceQuantised");
  quantAllReduce_.AllReduceQuantised(in, out, count, quant, outDtype);
  return true;
}

void ProcessCommunicator::Send(const void* buf, size_t count, DataType dtype, int peer) {
  transport_.Enter("Send");
  channels_.Run({PointToPoint::Send(buf, count, dtype, peer)});
}

void ProcessCommunicator::Recv(void* buf, size_t count, DataType dtype, int peer) {
  transport_.Enter("Recv");
  channels_.Run({PointToPoint::Recv(buf, count, dtype, peer)});
}

void ProcessCommunicator::Exchange(const std::vector<PointToPoint>& ops) {
  transport_.Enter("Exchange");
  channels_.Run(ops);
}

void ProcessCommunicator::Barrier() {
  transport_.Enter("Barrier");
  transport_.Round();
}

void ProcessCommunicator::Agree(const CallSignature& mine) {
  if (!transport_.CarriesAgreement()) {
    Communicator::Agree(mine);
    return;
  }
  transport_.Enter("Agree");
  transport_.CarryAgreement(mine);
}

namespace {

[[maybe_unused]] const bool kRegistered = RegisterCommunicatorBackend(
    "lccl", COMM_MULTI_PROCESS, [](const CommParam& param) -> std::shared_ptr<Communicator> {
      return std::make_shared<ProcessCommunicator>(param);
    });

}  // namespace

}  // namespace shm
}  // namespace collops
