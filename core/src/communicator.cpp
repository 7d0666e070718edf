#include "collops/communicator.h"

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
void Communicator::Broadcast(void*, size_t, DataType, int) { Unsupported("Broadcast"); }
void Communicator::Send(const void*, size_t, DataType, int) { Unsupported("Send"); }
void Communicator::Recv(void*, size_t, DataType, int) { Unsupported("Recv"); }
void Communicator::Barrier() { Unsupported("Barrier"); }
std::shared_ptr<Communicator> Communicator::Split(int, int) { Unsupported("Split"); }

}  // namespace collops
