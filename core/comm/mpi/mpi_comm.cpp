#include "core/comm/mpi/mpi_comm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collops/status.h"
#include "core/comm/mpi/mpi_runtime.h"
#include "core/comm/mpi/mpi_types.h"
#include "core/comm/mpi/mpi_watchdog.h"

namespace collops {
namespace mpi {
namespace {

// Tags of the library's point-to-point traffic. Collectives never match them, and each call
// completes before the next starts, so one tag per purpose is enough.
constexpr int kSendHeaderTag = 7001;
constexpr int kRecvHeaderTag = 7002;
constexpr int kDataTag = 7003;
constexpr int kExchangeTag = 7004;
constexpr int kDeliveredTag = 7005;

/// Calls body(offset, n) over consecutive pieces of at most MaxCount() elements of `count`.
template <class Body>
void ForEachChunk(size_t count, Body&& body) {
  const size_t limit = MaxCount();
  for (size_t offset = 0; offset < count; offset += limit) {
    body(offset, static_cast<int>(std::min(limit, count - offset)));
  }
}

/// True when every value fits one int argument of an MPI call (see MaxCount()).
bool FitsInt(const int64_t* values, int n) {
  const auto limit = static_cast<int64_t>(MaxCount());
  return std::all_of(values, values + n, [&](int64_t v) { return v <= limit; });
}

std::vector<int> Ints(const int64_t* values, int n) { return std::vector<int>(values, values + n); }

/// One contiguous range of elements to or from one peer.
struct Piece {
  int peer;
  uint8_t* data;
  size_t count;
};

/// Posts every piece as nonblocking MaxCount()-element chunks (the two sides cut a piece
/// identically, and MPI keeps messages of one pair and tag in order), appending the requests.
void PostPieces(MPI_Comm comm, const std::vector<Piece>& sends, const std::vector<Piece>& recvs,
                MPI_Datatype type, size_t elementBytes, int tag,
                std::vector<MPI_Request>& requests) {
  for (const Piece& p : recvs) {
    ForEachChunk(p.count, [&](size_t offset, int n) {
      requests.emplace_back();
      CheckMpi(
          MPI_Irecv(p.data + offset * elementBytes, n, type, p.peer, tag, comm, &requests.back()),
          "MPI_Irecv");
    });
  }
  for (const Piece& p : sends) {
    ForEachChunk(p.count, [&](size_t offset, int n) {
      requests.emplace_back();
      CheckMpi(
          MPI_Isend(p.data + offset * elementBytes, n, type, p.peer, tag, comm, &requests.back()),
          "MPI_Isend");
    });
  }
}

void WaitAll(std::vector<MPI_Request>& requests) {
  CheckMpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
           "MPI_Waitall");
}

/// The fallback of the v-collectives for counts beyond one int: every piece posted at once, then
/// all complete together so no pair ordering can deadlock.
void ExchangePieces(MPI_Comm comm, const std::vector<Piece>& sends, const std::vector<Piece>& recvs,
                    MPI_Datatype type, size_t elementBytes, int tag = kExchangeTag) {
  std::vector<MPI_Request> requests;
  PostPieces(comm, sends, recvs, type, elementBytes, tag, requests);
  WaitAll(requests);
}

/// One primitive's stay in MPI: watched (mpi_watchdog.h) and entered (EnterMpi: serialised,
/// refused once MPI is finalised) under the same name.
struct MpiCall {
  MpiCall(const char* primitive, int rank, int size)
      : watch(primitive, rank, size), lock(EnterMpi(primitive)) {}
  CallWatch watch;
  std::unique_lock<std::mutex> lock;
};

}  // namespace

std::shared_ptr<Communicator> WrapOwnedComm(MPI_Comm comm) {
  const int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) MPI_Comm_free(&comm);
  CheckMpi(rc, "MPI_Comm_set_errhandler");
  return std::make_shared<MpiCommunicator>(comm);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  CheckMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  CheckMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  // After MPI_Finalize (the library's atexit handler, or the application's own) the handle is
  // gone with the rest of MPI; freeing it then would be an error.
  if (comm_ == MPI_COMM_NULL || MpiFinalized()) return;
  auto lock = SerialiseMpi();
  MPI_Comm_free(&comm_);
}

void MpiCommunicator::AllGatherBytes(const void* in, void* out, size_t bytes) {
  const std::vector<int64_t> counts(size_, static_cast<int64_t>(bytes));
  std::vector<int64_t> displs(size_);
  for (int i = 0; i < size_; ++i) displs[i] = static_cast<int64_t>(bytes) * i;
  const MpiCall call("AllGatherBytes", rank_, size_);
  GatherV(in, bytes, out, counts.data(), displs.data(), ACL_UINT8);
}

void MpiCommunicator::AllReduce(const void* in, void* out, size_t count, DataType dtype,
                                ReduceOp op) {
  const MpiCall call("AllReduce", rank_, size_);
  const size_t e = DataTypeSize(dtype);
  if (InRankOrder(dtype, op)) {
    if (count == 0) return;
    // Reduce-scatter in rank order over R blocks as even as can be, then gather the blocks:
    // each element is folded once, by one rank, so every rank holds the same bits.
    std::vector<int64_t> counts(size_), displs(size_);
    for (int j = 0; j < size_; ++j) {
      counts[j] = static_cast<int64_t>(count / size_ + (static_cast<size_t>(j) < count % size_));
      displs[j] = j == 0 ? 0 : displs[j - 1] + counts[j - 1];
    }
    uint8_t* mine = static_cast<uint8_t*>(out) + displs[rank_] * e;
    ReduceScatterInRankOrder(in, counts.data(), displs.data(), mine, dtype, op);
    GatherV(mine, static_cast<size_t>(counts[rank_]), out, counts.data(), displs.data(), dtype);
    return;
  }
  const MPI_Datatype type = ElementType(dtype);
  const MPI_Op mpiOp = ReductionOp(dtype, op);
  const bool inPlace = in == out;
  ForEachChunk(count, [&](size_t offset, int n) {
    uint8_t* chunk = static_cast<uint8_t*>(out) + offset * e;
    const void* send = inPlace ? MPI_IN_PLACE : static_cast<const uint8_t*>(in) + offset * e;
    CheckMpi(MPI_Allreduce(send, chunk, n, type, mpiOp, comm_), "MPI_Allreduce");
  });
}

void MpiCommunicator::AllGatherV(const void* in, size_t sendCount, void* out,
                                 const int64_t* recvCounts, const int64_t* rdispls,
                                 DataType dtype) {
  const MpiCall call("AllGatherV", rank_, size_);
  GatherV(in, sendCount, out, recvCounts, rdispls, dtype);
}

void MpiCommunicator::GatherV(const void* in, size_t sendCount, void* out,
                              const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) {
  const MPI_Datatype type = ElementType(dtype);
  const size_t e = DataTypeSize(dtype);
  auto* bytes = static_cast<uint8_t*>(out);
  uint8_t* mine = bytes + rdispls[rank_] * e;
  // Every rank must pick the same path, so the choice rests on the counts, which all ranks share
  // (sendCount is recvCounts[Rank()]); the displacements are each rank's own, and a rank whose
  // rdispls are beyond one int gathers into a packed buffer and places the pieces itself.
  int64_t total = 0;
  for (int j = 0; j < size_; ++j) total += recvCounts[j];
  if (total <= static_cast<int64_t>(MaxCount())) {
    if (FitsInt(rdispls, size_)) {
      const std::vector<int> counts = Ints(recvCounts, size_), displs = Ints(rdispls, size_);
      CheckMpi(MPI_Allgatherv(in == mine ? MPI_IN_PLACE : in, static_cast<int>(sendCount), type,
                              out, counts.data(), displs.data(), type, comm_),
               "MPI_Allgatherv");
      return;
    }
    std::vector<int> counts = Ints(recvCounts, size_), displs(size_);
    for (int j = 1; j < size_; ++j) displs[j] = displs[j - 1] + counts[j - 1];
    std::vector<uint8_t> packed(static_cast<size_t>(total) * e);
    CheckMpi(MPI_Allgatherv(in, static_cast<int>(sendCount), type, packed.data(), counts.data(),
                            displs.data(), type, comm_),
             "MPI_Allgatherv");
    for (int j = 0; j < size_; ++j) {
      if (counts[j] == 0) continue;
      std::memmove(bytes + rdispls[j] * e, packed.data() + static_cast<size_t>(displs[j]) * e,
                   static_cast<size_t>(counts[j]) * e);
    }
    return;
  }
  if (in != mine) std::memmove(mine, in, sendCount * e);
  std::vector<Piece> sends, recvs;
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    sends.push_back({j, mine, sendCount});
    recvs.push_back({j, bytes + rdispls[j] * e, static_cast<size_t>(recvCounts[j])});
  }
  ExchangePieces(comm_, sends, recvs, type, e);
}

void MpiCommunicator::ReduceScatterV(const void* in, const int64_t* sendCounts,
                                     const int64_t* sdispls, void* out,
                                     size_t /*recvCount = sendCounts[Rank()], as verified*/,
                                     DataType dtype, ReduceOp op) {
  const MpiCall call("ReduceScatterV", rank_, size_);
  if (InRankOrder(dtype, op)) {
    ReduceScatterInRankOrder(in, sendCounts, sdispls, out, dtype, op);
    return;
  }
  const MPI_Datatype type = ElementType(dtype);
  const MPI_Op mpiOp = ReductionOp(dtype, op);
  const size_t e = DataTypeSize(dtype);
  const auto* input = static_cast<const uint8_t*>(in);
  int64_t total = 0, extent = 0;
  bool rankOrder = true;  // x already holds the ranks' ranges back to back, in rank order
  for (int i = 0; i < size_; ++i) {
    rankOrder = rankOrder && sdispls[i] == total;
    total += sendCounts[i];
    extent = std::max(extent, sdispls[i] + sendCounts[i]);
  }
  // In place (out on this rank's own range of in): MPI forbids a receive buffer that aliases the
  // send buffer, so the result goes through scratch.
  const size_t resultBytes = static_cast<size_t>(sendCounts[rank_]) * e;
  const auto* outBytes = static_cast<uint8_t*>(out);
  std::vector<uint8_t> scratch;
  uint8_t* result = static_cast<uint8_t*>(out);
  if (resultBytes > 0 && outBytes < input + extent * e && input < outBytes + resultBytes) {
    scratch.resize(resultBytes);
    result = scratch.data();
  }
  const auto copyResultOut = [&] {
    if (result != out) std::memcpy(out, result, resultBytes);
  };
  if (total <= static_cast<int64_t>(MaxCount())) {
    // MPI_Reduce_scatter wants the ranges in rank order; the contract allows any sdispls.
    std::vector<uint8_t> packed;
    if (!rankOrder) {
      packed.resize(static_cast<size_t>(total) * e);
      uint8_t* cursor = packed.data();
      for (int i = 0; i < size_; ++i) {
        if (sendCounts[i] == 0) continue;  // all empty: no packed buffer (null) to copy into
        std::memcpy(cursor, input + sdispls[i] * e, sendCounts[i] * e);
        cursor += sendCounts[i] * e;
      }
      input = packed.data();
    }
    const std::vector<int> counts = Ints(sendCounts, size_);
    CheckMpi(MPI_Reduce_scatter(input, result, counts.data(), type, mpiOp, comm_),
             "MPI_Reduce_scatter");
    copyResultOut();
    return;
  }
  // Beyond one int: rank i's range is reduced to rank i, chunk by chunk.
  for (int root = 0; root < size_; ++root) {
    ForEachChunk(static_cast<size_t>(sendCounts[root]), [&](size_t offset, int n) {
      void* recv = root == rank_ ? result + offset * e : nullptr;
      CheckMpi(MPI_Reduce(input + (sdispls[root] + offset) * e, recv, n, type, mpiOp, root, comm_),
               "MPI_Reduce");
    });
  }
  copyResultOut();
}

void MpiCommunicator::ReduceScatterInRankOrder(const void* in, const int64_t* sendCounts,
                                               const int64_t* sdispls, void* out, DataType dtype,
                                               ReduceOp op) {
  const MPI_Datatype type = ElementType(dtype);
  const size_t e = DataTypeSize(dtype);
  const auto n = static_cast<size_t>(sendCounts[rank_]);  // every rank's count for this rank
  auto* input = const_cast<uint8_t*>(static_cast<const uint8_t*>(in));  // only ever sent from
  std::vector<uint8_t> pieces(static_cast<size_t>(size_) * n * e);      // rank j's at j * n
  if (n > 0) std::memcpy(pieces.data() + rank_ * n * e, input + sdispls[rank_] * e, n * e);
  std::vector<Piece> sends, recvs;
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    sends.push_back({j, input + sdispls[j] * e, static_cast<size_t>(sendCounts[j])});
    recvs.push_back({j, pieces.data() + j * n * e, n});
  }
  ExchangePieces(comm_, sends, recvs, type, e);
  if (n == 0) return;
  std::vector<const void*> srcs(size_);
  for (int j = 0; j < size_; ++j) srcs[j] = pieces.data() + j * n * e;
  ReduceArrays(dtype, op, srcs.data(), srcs.size(), out, n);
}

void MpiCommunicator::AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls,
                                void* out, const int64_t* recvCounts, const int64_t* rdispls,
                                DataType dtype) {
  StartAllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype);
  FinishAllToAllV();
}

void MpiCommunicator::StartAllToAllV(const void* in, const int64_t* sendCounts,
                                     const int64_t* sdispls, void* out, const int64_t* recvCounts,
                                     const int64_t* rdispls, DataType dtype) {
  if (allToAllVStarted_) {
    Fail(ERROR_INTERNAL_ERROR, "mpi StartAllToAllV (rank ", rank_,
         "): the AllToAllV started before it was not finished");
  }
  const MpiCall call("AllToAllV", rank_, size_);
  allToAllVStarted_ = true;
  const MPI_Datatype type = ElementType(dtype);
  const size_t e = DataTypeSize(dtype);
  // Always point to point, every piece posted at once: a rank knows
  // only its own row and column of the counts, so a choice between MPI_Alltoallv and chunked
  // sends that rested on them could differ between ranks and hang both. Each piece is cut by its
  // count alone, which its two ranks share.
  auto* input = const_cast<uint8_t*>(static_cast<const uint8_t*>(in));  // only ever sent from
  auto* output = static_cast<uint8_t*>(out);
  if (recvCounts[rank_] != 0) {  // else the buffers may be empty vectors' null data()
    std::memmove(output + rdispls[rank_] * e, input + sdispls[rank_] * e, recvCounts[rank_] * e);
  }
  std::vector<Piece> sends, recvs;
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    sends.push_back({j, input + sdispls[j] * e, static_cast<size_t>(sendCounts[j])});
    recvs.push_back({j, output + rdispls[j] * e, static_cast<size_t>(recvCounts[j])});
  }
  PostPieces(comm_, sends, recvs, type, e, kExchangeTag, started_);
}

void MpiCommunicator::FinishAllToAllV() {
  if (!allToAllVStarted_) return;
  allToAllVStarted_ = false;
  const MpiCall call("AllToAllV", rank_, size_);
  std::vector<MPI_Request> requests;
  requests.swap(started_);  // a failed wait leaves nothing for the next Start to trip on
  WaitAll(requests);
}

void MpiCommunicator::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  const MpiCall call("Broadcast", rank_, size_);
  const MPI_Datatype type = ElementType(dtype);
  const size_t e = DataTypeSize(dtype);
  ForEachChunk(count, [&](size_t offset, int n) {
    CheckMpi(MPI_Bcast(static_cast<uint8_t*>(buf) + offset * e, n, type, root, comm_), "MPI_Bcast");
  });
}

void MpiCommunicator::CheckPeer(int peer, const char* role) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    Fail(ERROR_INVALID_PARAM, "mpi Send/Recv: ", role, " rank ", peer, " is not another rank of ",
         size_, " (this is rank ", rank_, ")");
  }
}

// Every op first swaps a (count, dtype) header with its peer, so a mismatch fails on both sides
// and moves nothing. All headers are posted at once, and each op posts its data as soon as its
// own header swap is done (after the op before it on the same channel did): waiting for every
// header first would deadlock against a peer whose blocking Recv needs this group's data before
// its next Send can answer a later header.
//
// A send completes only once its receiver reports the data delivered. OpenMPI's ob1 over TCP may
// complete a large send whose data has not left yet and move it only while the sender is inside
// another MPI call: a sender that returned and then waited in lccl starved its receiver (seen
// across network namespaces as a hang in the Barrier after a Send/Recv ring between hosts).
void MpiCommunicator::RunGroup(const std::vector<PointToPoint>& ops) {
  const size_t n = ops.size();
  std::vector<int64_t> mine(2 * n), theirs(2 * n);
  std::vector<MPI_Request> requests(2 * n, MPI_REQUEST_NULL);
  const std::vector<int> previous = PreviousOnChannel(ops);
  for (size_t i = 0; i < n; ++i) {
    const PointToPoint& op = ops[i];
    const bool send = op.kind == PointToPoint::Kind::kSend;
    mine[2 * i] = static_cast<int64_t>(op.count);
    mine[2 * i + 1] = op.dtype;
    CheckMpi(MPI_Isend(&mine[2 * i], 2, MPI_INT64_T, op.peer,
                       send ? kSendHeaderTag : kRecvHeaderTag, comm_, &requests[2 * i]),
             "MPI_Isend");
    CheckMpi(MPI_Irecv(&theirs[2 * i], 2, MPI_INT64_T, op.peer,
                       send ? kRecvHeaderTag : kSendHeaderTag, comm_, &requests[2 * i + 1]),
             "MPI_Irecv");
  }
  enum Stage { kSwapping, kMoving, kDone };
  std::vector<Stage> stage(n, kSwapping);
  std::vector<size_t> dataFrom(n, 0), dataTo(n, 0);  // the op's data requests
  std::vector<uint8_t> delivered(n, 1);              // one-byte delivery reports
  std::string mismatch;
  auto complete = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) {
      if (requests[k] != MPI_REQUEST_NULL) return false;
    }
    return true;
  };
  auto post = [&](bool send, void* data, int bytes, int peer, int tag) {
    requests.emplace_back();
    CheckMpi(send ? MPI_Isend(data, bytes, MPI_BYTE, peer, tag, comm_, &requests.back())
                  : MPI_Irecv(data, bytes, MPI_BYTE, peer, tag, comm_, &requests.back()),
             send ? "MPI_Isend" : "MPI_Irecv");
  };
  auto startData = [&](size_t i) {
    const PointToPoint& op = ops[i];
    const bool send = op.kind == PointToPoint::Kind::kSend;
    const int64_t* m = &mine[2 * i];
    const int64_t* t = &theirs[2 * i];
    dataFrom[i] = dataTo[i] = requests.size();
    stage[i] = kDone;
    if (m[0] != t[0] || m[1] != t[1]) {
      if (mismatch.empty()) {
        mismatch = send ? SendRecvMismatchMessage("mpi", rank_, m[0], m[1], op.peer, t[0], t[1])
                        : SendRecvMismatchMessage("mpi", op.peer, t[0], t[1], rank_, m[0], m[1]);
      }
      return;
    }
    auto* data = static_cast<uint8_t*>(op.buf);
    ForEachChunk(op.count * DataTypeSize(op.dtype), [&](size_t offset, int bytes) {
      post(send, data + offset, bytes, op.peer, kDataTag);
    });
    if (send) post(false, &delivered[i], 1, op.peer, kDeliveredTag);
    dataTo[i] = requests.size();
    if (!send) stage[i] = kMoving;  // reports delivery once its data is in
  };
  std::vector<int> done(2 * n);
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      if (stage[i] == kSwapping && complete(2 * i, 2 * i + 2) &&
          (previous[i] < 0 || stage[previous[i]] != kSwapping)) {
        startData(i);
      }
      if (stage[i] == kMoving && complete(dataFrom[i], dataTo[i])) {
        post(true, &delivered[i], 1, ops[i].peer, kDeliveredTag);
        stage[i] = kDone;
      }
    }
    int count = 0;
    done.resize(requests.size());
    CheckMpi(MPI_Waitsome(static_cast<int>(requests.size()), requests.data(), &count, done.data(),
                          MPI_STATUSES_IGNORE),
             "MPI_Waitsome");
    if (count == MPI_UNDEFINED) break;  // every request completed: every op is done
  }
  if (!mismatch.empty()) Fail(ERROR_RANK_MISMATCH, mismatch);
}

void MpiCommunicator::Send(const void* buf, size_t count, DataType dtype, int peer) {
  CheckPeer(peer, "destination");
  const MpiCall call("Send", rank_, size_);
  RunGroup({PointToPoint::Send(buf, count, dtype, peer)});
}

void MpiCommunicator::Recv(void* buf, size_t count, DataType dtype, int peer) {
  CheckPeer(peer, "source");
  const MpiCall call("Recv", rank_, size_);
  RunGroup({PointToPoint::Recv(buf, count, dtype, peer)});
}

void MpiCommunicator::Exchange(const std::vector<PointToPoint>& ops) {
  for (const PointToPoint& op : ops) {
    CheckPeer(op.peer, op.kind == PointToPoint::Kind::kSend ? "destination" : "source");
    if (DataTypeSize(op.dtype) == 0 && !op.IsRefusal()) {
      Fail(ERROR_INVALID_TENSOR_DTYPE, "mpi Exchange: dtype ", DataTypeName(op.dtype),
           " has no size");
    }
  }
  const MpiCall call("Exchange", rank_, size_);
  RunGroup(ops);
}

void MpiCommunicator::Barrier() {
  const MpiCall call("Barrier", rank_, size_);
  CheckMpi(MPI_Barrier(comm_), "MPI_Barrier");
}

void MpiCommunicator::Progress() {
  const auto lock = TrySerialiseMpi();
  if (!lock || MpiFinalized()) return;
  int flag = 0;
  // An error here belongs to no call of the user's; the engine's next call reports it.
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
}

std::shared_ptr<Communicator> MpiCommunicator::Split(int color, int key) {
  const MpiCall call("Split", rank_, size_);
  MPI_Comm sub = MPI_COMM_NULL;
  CheckMpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
  if (sub == MPI_COMM_NULL) return nullptr;
  return WrapOwnedComm(sub);
}

}  // namespace mpi
}  // namespace collops
