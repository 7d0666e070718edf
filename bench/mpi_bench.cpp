// collops-mpi-bench: the peer measurement. The same ops, layouts (bench_layout.h), data, golden
// check and timing rule as collops-bench, through OpenMPI's collectives:
//   allreduce MPI_Allreduce, allgather MPI_Allgather, allgatherv MPI_Allgatherv,
//   reducescatter MPI_Reduce_scatter_block, reducescatterv MPI_Reduce_scatter,
//   broadcast MPI_Bcast, alltoall MPI_Alltoall, alltoallv MPI_Alltoallv, sendrecv MPI_Sendrecv
//   (to rank+1, from rank-1, as nccl-tests' sendrecv).
// Launch with mpirun -np R; the rank count is the communicator size (at least 2 for sendrecv,
// as collops-bench -r).
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "bench/bench_common.h"

namespace collops_bench {
namespace {

/// MPI has no float16/bfloat16 arithmetic: those move as 16-bit words and cannot be reduced.
MPI_Datatype ToMpi(Kind kind, bool reduces) {
  switch (kind) {
    case Kind::kFloat32:
      return MPI_FLOAT;
    case Kind::kFloat64:
      return MPI_DOUBLE;
    case Kind::kInt8:
      return MPI_INT8_T;
    case Kind::kUint8:
      return MPI_UINT8_T;
    case Kind::kInt16:
      return MPI_INT16_T;
    case Kind::kInt32:
      return MPI_INT32_T;
    case Kind::kInt64:
      return MPI_INT64_T;
    case Kind::kFloat16:
    case Kind::kBFloat16:
      return reduces ? MPI_DATATYPE_NULL : MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

std::vector<int> Ints(const std::vector<int64_t>& v) {
  return std::vector<int>(v.begin(), v.end());
}

struct Case {
  const Options& o;
  int rank;
  Layout l;
  MPI_Datatype type;
  std::vector<uint8_t> x, y;
  std::vector<int> sc, sd, rc, rd;

  Case(const Options& opt, int r, int64_t size)
      : o(opt),
        rank(r),
        l(MakeLayout(opt.op, opt.ranks, r, size, opt.dtype->size)),
        type(ToMpi(opt.dtype->kind, InfoOf(opt.op).reduces)) {
    x.assign(l.inCount * o.dtype->size + 64, 0);
    y.assign(l.outCount * o.dtype->size + 64, 0);
    sc = Ints(l.sendCounts), sd = Ints(l.sdispls), rc = Ints(l.recvCounts), rd = Ints(l.rdispls);
    FillInput(o.dtype->kind, o.dtype->size, o.op == Op::kBroadcast ? 0 : rank, l.inCount, x.data());
    if (o.op == Op::kBroadcast && rank != 0) std::memset(x.data(), 0xA5, x.size());
  }

  void Execute() {
    const int n = static_cast<int>(l.inCount);
    const int R = o.ranks;
    switch (o.op) {
      case Op::kAllReduce:
        MPI_Allreduce(x.data(), y.data(), n, type, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Op::kAllGather:
        MPI_Allgather(x.data(), n, type, y.data(), n, type, MPI_COMM_WORLD);
        break;
      case Op::kAllGatherV:
        MPI_Allgatherv(x.data(), n, type, y.data(), rc.data(), rd.data(), type, MPI_COMM_WORLD);
        break;
      case Op::kReduceScatter:
        MPI_Reduce_scatter_block(x.data(), y.data(), static_cast<int>(l.outCount), type, MPI_SUM,
                                 MPI_COMM_WORLD);
        break;
      case Op::kReduceScatterV:
        // Segments of x are the prefix-sum layout MPI_Reduce_scatter expects.
        MPI_Reduce_scatter(x.data(), y.data(), sc.data(), type, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Op::kBroadcast:
        MPI_Bcast(x.data(), n, type, 0, MPI_COMM_WORLD);
        break;
      case Op::kAllToAll:
        MPI_Alltoall(x.data(), n / R, type, y.data(), n / R, type, MPI_COMM_WORLD);
        break;
      case Op::kAllToAllV:
        MPI_Alltoallv(x.data(), sc.data(), sd.data(), type, y.data(), rc.data(), rd.data(), type,
                      MPI_COMM_WORLD);
        break;
      case Op::kSendRecv:
        MPI_Sendrecv(x.data(), n, type, (rank + 1) % R, 0, y.data(), n, type, (rank + R - 1) % R, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
    }
  }

  int64_t Check() {
    std::vector<uint8_t>& out = o.op == Op::kBroadcast ? x : y;
    if (!(o.op == Op::kBroadcast && rank == 0)) std::memset(out.data(), 0xA5, out.size());
    MPI_Barrier(MPI_COMM_WORLD);
    Execute();
    const int64_t count = o.op == Op::kBroadcast ? l.inCount : l.outCount;
    return CountWrong(o.op, o.dtype->kind, o.dtype->size, o.ranks, rank, l, out.data(), count);
  }
};

/// Rank 0's `mine` on every rank (WarmUp's decision).
bool RankZeroSays(bool mine) {
  int word = mine ? 1 : 0;
  MPI_Bcast(&word, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return word != 0;
}

int Main(int argc, char** argv) {
  // Before MPI_Init: a usage error (or --help) needs no MPI, and rank 0 alone reports it.
  Options o = ParseOptions(argc, argv, Tool::kMpiBench);
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &o.ranks);
  std::string refused;
  const std::string why = RankCountError(o.op, o.ranks);
  if (!why.empty()) {
    refused = "mpirun -np " + std::to_string(o.ranks) + ": " + why;
  } else if (ToMpi(o.dtype->kind, InfoOf(o.op).reduces) == MPI_DATATYPE_NULL) {
    refused = std::string("-d ") + o.dtype->name + ": MPI cannot reduce " + o.dtype->name;
  }
  if (!refused.empty()) {
    if (rank == 0) std::fprintf(stderr, "collops-mpi-bench: %s\n", refused.c_str());
    MPI_Finalize();
    return 2;
  }
  if (rank == 0) PrintHeader(o, "openmpi");
  bool failed = false;
  for (int64_t size : Sizes(o)) {
    // Every rank allocates, then all agree whether they all could: a rank that gave up alone
    // would leave its peers waiting in the first collective.
    std::unique_ptr<Case> c;
    int allocated = 1, everywhere = 0;
    try {
      c = std::make_unique<Case>(o, rank, size);
    } catch (const std::bad_alloc&) {
      allocated = 0;
    }
    MPI_Allreduce(&allocated, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!everywhere) {
      if (rank == 0) {
        Row row;
        row.bytes = size;
        row.count = size / static_cast<int64_t>(o.dtype->size);
        row.error = "out of memory allocating this size's buffers (std::bad_alloc) on a rank";
        PrintRow(o, "openmpi", row);
        if (!o.json) std::fprintf(stderr, "collops-mpi-bench: %s\n", row.error.c_str());
      }
      failed = true;
      break;
    }
    WarmUp(o, [&] { c->Execute(); }, RankZeroSays);
    std::vector<double> mine(o.iters);
    for (int i = 0; i < o.iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = NowSeconds();
      c->Execute();
      mine[i] = NowSeconds() - t0;
    }
    std::vector<double> worst(o.iters);
    MPI_Reduce(mine.data(), worst.data(), o.iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long long wrong = o.check ? c->Check() : -1, total = 0;
    MPI_Reduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      Row row;
      row.bytes = c->l.bytes;
      row.count = c->l.bytes / static_cast<int64_t>(o.dtype->size);
      row.iterSeconds = worst;
      row.wrong = o.check ? total : -1;
      PrintRow(o, "openmpi", row);
    }
  }
  MPI_Finalize();
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace collops_bench

int main(int argc, char** argv) { return collops_bench::Main(argc, argv); }
