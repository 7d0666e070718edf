#include "op_suite.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "linear_golden.h"
#include "op_harness.h"
#include "quant_suite.h"

namespace collops {
namespace testing {

nlohmann::json SuiteJob::Param(nlohmann::json extra) const {
  extra["rank"] = rank;
  extra["rankSize"] = rankSize;
  extra["commMode"] = commMode;
  extra["commDomain"] = commDomain;
  if (!backend.empty()) extra["backend"] = backend;
  if (!rankTableFile.empty()) extra["rankTableFile"] = rankTableFile;
  return extra;
}

CommParam SuiteJob::Comm() const {
  CommParam param;
  param.rank = rank;
  param.rankSize = rankSize;
  param.commMode = static_cast<CommMode>(commMode);
  param.commDomain = commDomain;
  if (!backend.empty()) param.backend = backend;
  param.rankTableFile = rankTableFile;
  return param;
}

SuiteJob ThreadJob(int rank, int rankSize, const std::string& domain, Communicator* comm) {
  SuiteJob job;
  job.rank = rank;
  job.rankSize = rankSize;
  job.commMode = COMM_MULTI_THREAD;
  job.commDomain = domain;
  job.comm = comm;
  return job;
}

namespace {

using Grid = std::vector<std::vector<int64_t>>;

/// Elements of `dtype` that take more than the 64 KiB shared slot.
int64_t BigCount(DataType dtype) { return kSuiteShmBytes / DataTypeSize(dtype) + 1001; }

/// Runs the op and records a failure naming `what` when it does not succeed.
bool Runs(Operation& op, const std::vector<Tensor>& ins, const std::vector<Tensor>& outs,
          const std::string& what) {
  const Status status = RunOperation(op, ins, outs);
  EXPECT_EQ(status, NO_ERROR) << what << ": " << StatusName(status) << ": " << LastErrorMessage();
  return status == NO_ERROR;
}
bool Runs(Operation& op, std::vector<HostTensor>& ins, std::vector<HostTensor>& outs,
          const std::string& what) {
  return Runs(op, Tensors(ins), Tensors(outs), what);
}

std::vector<std::vector<double>> AllValues(DataType dtype, const std::vector<int64_t>& counts,
                                           uint64_t seed) {
  std::vector<std::vector<double>> values;
  for (size_t r = 0; r < counts.size(); ++r) {
    values.push_back(TestValues(dtype, counts[r], seed, static_cast<int>(r)));
  }
  return values;
}

double Fold(const std::string& op, double a, double b) {
  return op == "max" ? std::max(a, b) : a + b;
}

std::vector<int64_t> Exclusive(const std::vector<int64_t>& counts, int64_t gap = 0) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1] + gap;
  return displs;
}

void AllReduce(const SuiteJob& job, DataType dtype) {
  for (const char* reduce : {"sum", "max"}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, BigCount(dtype)}) {
      const std::string what = Concat("AllReduceOperation ", reduce, " n=", n, " rank ", job.rank);
      const auto values = AllValues(dtype, std::vector<int64_t>(job.rankSize, n), 11);
      std::vector<double> golden = values[0];
      for (int r = 1; r < job.rankSize; ++r) {
        for (int64_t i = 0; i < n; ++i) golden[i] = Fold(reduce, golden[i], values[r][i]);
      }
      OperationPtr op =
          MakeOperation("AllReduceOperation", job.Param({{"allReduceType", reduce}}), job.comm);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {n}, values[job.rank])};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      if (Runs(*op, ins, outs, what)) ExpectClose(outs[0], golden, what);
    }
  }
}

void AllGather(const SuiteJob& job, DataType dtype) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, BigCount(dtype)}) {
    const std::string what = Concat("AllGatherOperation n=", n, " rank ", job.rank);
    const auto values = AllValues(dtype, std::vector<int64_t>(job.rankSize, n), 12);
    std::vector<double> golden;
    for (const auto& v : values) golden.insert(golden.end(), v.begin(), v.end());
    OperationPtr op = MakeOperation("AllGatherOperation", job.Param(), job.comm);
    std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {n}, values[job.rank])};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    if (Runs(*op, ins, outs, what)) ExpectExactly(outs[0], golden, what);
  }
}

/// Rank j sends c_j elements (0 for j % 3 == 1) of an x two elements longer; the ranges land in
/// reverse rank order with a one-element hole after each, which must read zero.
void AllGatherV(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize;
  for (int64_t base : {int64_t{5}, BigCount(dtype)}) {
    std::vector<int64_t> counts(R), xSizes(R), rdispls(R, 0);
    for (int j = 0; j < R; ++j) {
      counts[j] = j % 3 == 1 ? 0 : base + 2 * j;
      xSizes[j] = counts[j] + 2;
    }
    for (int j = R - 2; j >= 0; --j) rdispls[j] = rdispls[j + 1] + counts[j + 1] + 1;
    const int64_t m = rdispls[0] + counts[0] + 1;
    const std::string what = Concat("AllGatherVOperation base=", base, " rank ", job.rank);
    const auto values = AllValues(dtype, xSizes, 13);
    std::vector<double> golden(m, 0.0);
    for (int j = 0; j < R; ++j) {
      for (int64_t k = 0; k < counts[j]; ++k) golden[rdispls[j] + k] = values[j][k];
    }
    OperationPtr op = MakeOperation("AllGatherVOperation", job.Param(), job.comm);
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(dtype, {xSizes[job.rank]}, values[job.rank]),
        HostTensor::Counts({counts[job.rank]}), HostTensor::Counts(counts),
        HostTensor::Counts(rdispls), HostTensor(ACL_INT8, {m})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    if (Runs(*op, ins, outs, what)) ExpectExactly(outs[0], golden, what);
  }
}

void ReduceScatter(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize;
  for (const auto& [rows, inner] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {1, 1}, {7, 3}, {BigCount(dtype), 1}}) {
    const std::string what =
        Concat("ReduceScatterOperation rows=", rows, " inner=", inner, " rank ", job.rank);
    const int64_t n = R * rows * inner, slice = rows * inner;
    const auto values = AllValues(dtype, std::vector<int64_t>(R, n), 14);
    std::vector<double> golden(slice, 0.0);
    for (int64_t k = 0; k < slice; ++k) {
      golden[k] = values[0][job.rank * slice + k];
      for (int j = 1; j < R; ++j) golden[k] += values[j][job.rank * slice + k];
    }
    OperationPtr op = MakeOperation("ReduceScatterOperation", job.Param(), job.comm);
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(dtype, {R * rows, inner}, values[job.rank])};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    if (Runs(*op, ins, outs, what)) ExpectClose(outs[0], golden, what);
  }
}

/// Every rank sends cnt[i] elements to rank i (0 for i % 3 == 1) from sdispls shifted by j % 2;
/// out has a tail past recvCount that must read zero.
void ReduceScatterV(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize;
  for (int64_t base : {int64_t{3}, BigCount(dtype)}) {
    std::vector<int64_t> cnt(R);
    for (int i = 0; i < R; ++i) cnt[i] = i % 3 == 1 ? 0 : base + i;
    const std::vector<int64_t> prefix = Exclusive(cnt);
    const int64_t total = std::accumulate(cnt.begin(), cnt.end(), int64_t{0});
    const int64_t d0 = (total + 2) / 2, recv = cnt[job.rank], m = recv / 2 + 2;
    const std::string what = Concat("ReduceScatterVOperation max base=", base, " rank ", job.rank);
    const auto values = AllValues(dtype, std::vector<int64_t>(R, 2 * d0), 15);
    std::vector<double> golden(2 * m, 0.0);
    for (int64_t k = 0; k < recv; ++k) {
      golden[k] = values[0][prefix[job.rank] + k];
      for (int j = 1; j < R; ++j)
        golden[k] = std::max(golden[k], values[j][prefix[job.rank] + j % 2 + k]);
    }
    std::vector<int64_t> sdispls = prefix;
    for (int64_t& d : sdispls) d += job.rank % 2;
    OperationPtr op =
        MakeOperation("ReduceScatterVOperation", job.Param({{"reduceType", "max"}}), job.comm);
    std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {d0, 2}, values[job.rank]),
                                   HostTensor::Counts(cnt), HostTensor::Counts(sdispls),
                                   HostTensor::Counts({recv}), HostTensor(ACL_INT8, {m})};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    if (Runs(*op, ins, outs, what)) ExpectClose(outs[0], golden, what);
  }
}

void Broadcast(const SuiteJob& job, DataType dtype) {
  const int root = job.rankSize - 1;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, BigCount(dtype)}) {
    const std::string what = Concat("BroadcastOperation root ", root, " n=", n, " rank ", job.rank);
    OperationPtr op =
        MakeOperation("BroadcastOperation", job.Param({{"rankRoot", root}}), job.comm);
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(dtype, {n}, TestValues(dtype, n, 16, job.rank))};
    std::vector<HostTensor> outs;
    if (Runs(*op, ins, outs, what)) ExpectExactly(ins[0], TestValues(dtype, n, 16, root), what);
  }
}

void AllToAll(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize;
  const int64_t bigChunk = BigCount(dtype) / R + 1;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, bigChunk}) {
    const std::string what = Concat("AllToAllOperation plain chunk=", n, " rank ", job.rank);
    const auto values = AllValues(dtype, std::vector<int64_t>(R, R * n), 17);
    std::vector<double> golden;
    for (int j = 0; j < R; ++j) {
      for (int64_t k = 0; k < n; ++k) golden.push_back(values[j][job.rank * n + k]);
    }
    OperationPtr op =
        MakeOperation("AllToAllOperation", job.Param({{"transpose", false}}), job.comm);
    std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {R * n}, values[job.rank])};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    if (Runs(*op, ins, outs, what)) ExpectExactly(outs[0], golden, what);
  }
  for (const auto& [h, w] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {3, 1}, {5, 3}, {bigChunk / 3 + 1, 3}}) {
    const std::string what =
        Concat("AllToAllOperation transpose H=", h, " W/R=", w, " rank ", job.rank);
    const int64_t W = w * R;
    const auto values = AllValues(dtype, std::vector<int64_t>(R, h * W), 18);
    std::vector<double> golden;  // [H*R, w]: block j = x_j[:, rank*w : (rank+1)*w]
    for (int j = 0; j < R; ++j) {
      for (int64_t row = 0; row < h; ++row) {
        for (int64_t c = 0; c < w; ++c) golden.push_back(values[j][row * W + job.rank * w + c]);
      }
    }
    OperationPtr op =
        MakeOperation("AllToAllOperation", job.Param({{"transpose", true}}), job.comm);
    std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {h, W}, values[job.rank])};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    if (Runs(*op, ins, outs, what)) ExpectExactly(outs[0], golden, what);
  }
}

/// counts[j][i]: what rank j sends to rank i; 0 where (i + j) % 3 == 1 (never every block of a
/// rank, so sum(recvCounts) > 0).
Grid Matrix(int R, int64_t base) {
  Grid counts(R, std::vector<int64_t>(R));
  for (int j = 0; j < R; ++j) {
    for (int i = 0; i < R; ++i) counts[j][i] = (i + j) % 3 == 1 ? 0 : base + 2 * i + j;
  }
  return counts;
}

/// Both V all-to-alls: the send blocks sit in x in reverse rank order with a hole after each.
void AllToAllVs(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize, me = job.rank;
  for (int64_t base : {int64_t{3}, BigCount(dtype) / R + 1}) {
    const Grid counts = Matrix(R, base);
    Grid sdispls(R, std::vector<int64_t>(R, 0));
    std::vector<int64_t> xSizes(R);
    for (int j = 0; j < R; ++j) {
      for (int i = R - 2; i >= 0; --i) sdispls[j][i] = sdispls[j][i + 1] + counts[j][i + 1] + 1;
      xSizes[j] = sdispls[j][0] + counts[j][0] + 1;
    }
    std::vector<int64_t> recvCounts(R);
    for (int j = 0; j < R; ++j) recvCounts[j] = counts[j][me];
    const std::vector<int64_t> rdispls = Exclusive(recvCounts);
    const int64_t total = rdispls[R - 1] + recvCounts[R - 1];
    const auto values = AllValues(dtype, xSizes, 19);
    std::vector<double> golden(total, 0.0);
    for (int j = 0; j < R; ++j) {
      for (int64_t k = 0; k < recvCounts[j]; ++k) {
        golden[rdispls[j] + k] = values[j][sdispls[j][me] + k];
      }
    }
    {
      const std::string what = Concat("AllToAllVOperation base=", base, " rank ", me);
      OperationPtr op = MakeOperation("AllToAllVOperation",
                                      job.Param({{"sendCounts", counts[me]},
                                                 {"sdispls", sdispls[me]},
                                                 {"recvCounts", recvCounts},
                                                 {"rdispls", rdispls}}),
                                      job.comm);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {xSizes[me]}, values[me])};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      if (Runs(*op, ins, outs, what)) ExpectExactly(outs[0], golden, what);
    }
    {
      const std::string what = Concat("AllToAllVV2Operation base=", base, " rank ", me);
      OperationPtr op = MakeOperation("AllToAllVV2Operation", job.Param(), job.comm);
      std::vector<HostTensor> ins = {HostTensor::FromValues(dtype, {xSizes[me]}, values[me]),
                                     HostTensor::Counts(counts[me]),
                                     HostTensor::Counts(sdispls[me]),
                                     HostTensor::Counts(recvCounts),
                                     HostTensor::Counts(rdispls),
                                     HostTensor(ACL_INT8, {total})};
      std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
      if (Runs(*op, ins, outs, what)) ExpectExactly(outs[0], golden, what);
    }
  }
}

/// Rank r sends to r + 1 and receives from r - 1; even ranks send first so the ring cannot
/// deadlock for any R (Send returns only once the receiver took the message).
void SendRecvRing(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize, me = job.rank;
  if (R < 2) return;
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  for (int64_t n : {int64_t{1}, int64_t{37}, BigCount(dtype)}) {
    const std::string what = Concat("Send/RecvOperation ring n=", n, " rank ", me);
    OperationPtr send = MakeOperation("SendOperation", job.Param({{"destRank", next}}), job.comm);
    OperationPtr recv = MakeOperation("RecvOperation", job.Param({{"srcRank", prev}}), job.comm);
    std::vector<HostTensor> sendIns = {
        HostTensor::FromValues(dtype, {n}, TestValues(dtype, n, 20, me))};
    std::vector<HostTensor> sendOuts;
    std::vector<HostTensor> recvIns = {HostTensor(dtype, {n})};
    std::vector<HostTensor> recvOuts = AllocateOutputs(*recv, Tensors(recvIns));
    bool ok;
    if (me % 2 == 0) {
      ok = Runs(*send, sendIns, sendOuts, what + " send") && Runs(*recv, recvIns, recvOuts, what);
    } else {
      ok = Runs(*recv, recvIns, recvOuts, what) && Runs(*send, sendIns, sendOuts, what + " send");
    }
    if (ok) ExpectExactly(recvOuts[0], TestValues(dtype, n, 20, prev), what);
  }
}

/// SendRecvOperation: every rank sends to r + 1 and receives from r - 1 in one call, with no
/// ordering between ranks (one group per call: MPI_Sendrecv). At R = 2 this is a pair swap.
void SendRecvOperationRing(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize, me = job.rank;
  if (R < 2) return;
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  OperationPtr op = MakeOperation("SendRecvOperation",
                                  job.Param({{"destRank", next}, {"srcRank", prev}}), job.comm);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, BigCount(dtype)}) {
    const std::string what = Concat("SendRecvOperation ring n=", n, " rank ", me);
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(dtype, {n}, TestValues(dtype, n, 21, me))};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    if (Runs(*op, ins, outs, what)) ExpectExactly(outs[0], TestValues(dtype, n, 21, prev), what);
  }
}

/// Each rank leaves a marker before the barrier; after it every rank's marker must exist.
void Barrier(const SuiteJob& job) {
  const std::string prefix = Concat("/tmp/collops-barrier-", job.markerTag, "-");
  OperationPtr op = MakeOperation("BarrierOperation", job.Param(), job.comm);
  std::vector<HostTensor> none, noneOut;
  // Markers only once a barrier works: in jobs that are meant to fail (a bad rank table) every
  // rank fails here, exits, and mpirun kills the ranks still running, which would leave their
  // markers in /tmp.
  if (!Runs(*op, none, noneOut, Concat("BarrierOperation (first) rank ", job.rank))) return;
  const std::string mine = Concat(prefix, job.rank);
  std::FILE* file = std::fopen(mine.c_str(), "w");
  ASSERT_NE(file, nullptr) << mine;
  std::fclose(file);
  // The marker goes on every way out, a failed barrier included.
  const std::unique_ptr<const std::string, void (*)(const std::string*)> removeMine(
      &mine, [](const std::string* path) { std::remove(path->c_str()); });
  if (!Runs(*op, none, noneOut, Concat("BarrierOperation rank ", job.rank))) return;
  for (int r = 0; r < job.rankSize; ++r) {
    EXPECT_EQ(access(Concat(prefix, r).c_str(), F_OK), 0)
        << "BarrierOperation: rank " << job.rank << " passed before rank " << r << " arrived";
  }
  // A second barrier, so no rank removes its marker while a peer may still look for it.
  Runs(*op, none, noneOut, Concat("BarrierOperation (second) rank ", job.rank));
}

/// The in-place form of every op that has one (InPlaceForm): AllReduce x == y, ReduceScatter y ==
/// x[rank], ReduceScatterV out at x.flat[sdispls[rank]], each at a size within and one beyond
/// the shared slot.
void ReductionsInPlace(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize, me = job.rank;
  for (int64_t n : {int64_t{37}, BigCount(dtype)}) {
    const auto values = AllValues(dtype, std::vector<int64_t>(R, R * n), 21);
    std::vector<double> sum = values[0];
    for (int j = 1; j < R; ++j) {
      for (int64_t k = 0; k < R * n; ++k) sum[k] += values[j][k];
    }
    {
      const std::string what = Concat("AllReduceOperation in place n=", R * n, " rank ", me);
      OperationPtr op = MakeOperation("AllReduceOperation", job.Param(), job.comm);
      HostTensor buffer = HostTensor::FromValues(dtype, {R * n}, values[me]);
      const Tensor x = View(buffer, 0, {R * n});
      if (Runs(*op, {x}, {x}, what)) ExpectClose(buffer, sum, what);
    }
    {
      const std::string what = Concat("ReduceScatterOperation in place n=", n, " rank ", me);
      OperationPtr op = MakeOperation("ReduceScatterOperation", job.Param(), job.comm);
      HostTensor buffer = HostTensor::FromValues(dtype, {R * n}, values[me]);
      if (Runs(*op, {View(buffer, 0, {R * n})}, {View(buffer, me * n, {n})}, what)) {
        const std::vector<double> got = buffer.ToDoubles();
        const std::vector<double> mine(got.begin() + me * n, got.begin() + (me + 1) * n);
        const std::vector<double> want(sum.begin() + me * n, sum.begin() + (me + 1) * n);
        ExpectClose(HostTensor::FromValues(dtype, {n}, mine), want, what);
      }
    }
    {
      // Rank i's piece is n + i elements long, pieces packed in rank order.
      std::vector<int64_t> counts(R);
      for (int i = 0; i < R; ++i) counts[i] = n + i;
      const std::vector<int64_t> sdispls = Exclusive(counts);
      const int64_t total = sdispls[R - 1] + counts[R - 1], recv = counts[me];
      const auto pieces = AllValues(dtype, std::vector<int64_t>(R, total), 22);
      std::vector<double> want(recv, 0.0);
      for (int j = 0; j < R; ++j) {
        for (int64_t k = 0; k < recv; ++k) want[k] += pieces[j][sdispls[me] + k];
      }
      const std::string what = Concat("ReduceScatterVOperation in place n=", n, " rank ", me);
      OperationPtr op = MakeOperation("ReduceScatterVOperation", job.Param(), job.comm);
      HostTensor buffer = HostTensor::FromValues(dtype, {total, 1}, pieces[me]);
      std::vector<HostTensor> hosts = {HostTensor::Counts(counts), HostTensor::Counts(sdispls),
                                       HostTensor::Counts({recv}), HostTensor(ACL_INT8, {recv})};
      const std::vector<Tensor> ins = {View(buffer, 0, {total, 1}), hosts[0].tensor(),
                                       hosts[1].tensor(), hosts[2].tensor(), hosts[3].tensor()};
      if (Runs(*op, ins, {View(buffer, sdispls[me], {recv, 1})}, what)) {
        const std::vector<double> got = buffer.ToDoubles();
        const std::vector<double> mine(got.begin() + sdispls[me], got.begin() + sdispls[me] + recv);
        ExpectClose(HostTensor::FromValues(dtype, {recv}, mine), want, what);
      }
    }
  }
}

/// Integer sums wrap (two's complement), on every engine: OpenMPI's AVX op component saturates
/// 8- and 16-bit sums, which the small TestValues never reach. Every rank adds 100 (int8) or 20000
/// (int16), so any two ranks overflow.
void IntegerSumsWrap(const SuiteJob& job, DataType dtype) {
  if (dtype != ACL_INT8 && dtype != ACL_INT16) return;
  const int R = job.rankSize;
  const double each = dtype == ACL_INT8 ? 100 : 20000;
  const double wrapped = RoundTrip(dtype, each * R);
  for (int64_t n : {int64_t{64}, BigCount(dtype)}) {
    const std::string what = Concat("AllReduceOperation sum wraps n=", n, " rank ", job.rank);
    OperationPtr op = MakeOperation("AllReduceOperation", job.Param(), job.comm);
    std::vector<HostTensor> ins = {
        HostTensor::FromValues(dtype, {n}, std::vector<double>(n, each))};
    std::vector<HostTensor> outs = AllocateOutputs(*op, Tensors(ins));
    if (Runs(*op, ins, outs, what)) ExpectExactly(outs[0], std::vector<double>(n, wrapped), what);
  }
}

/// NCCL's in-place gathers: x is this rank's own block of the output (AllGather y[rank],
/// AllGatherV out.flat[rdispls[rank]:]); the blocks land in reverse rank order with a hole.
void GathersInPlace(const SuiteJob& job, DataType dtype) {
  const int R = job.rankSize, me = job.rank;
  for (int64_t n : {int64_t{37}, BigCount(dtype)}) {
    {
      const std::string what = Concat("AllGatherOperation in place n=", n, " rank ", me);
      const auto values = AllValues(dtype, std::vector<int64_t>(R, n), 23);
      std::vector<double> golden, start(R * n, 0.0);
      for (const auto& v : values) golden.insert(golden.end(), v.begin(), v.end());
      std::copy(values[me].begin(), values[me].end(), start.begin() + me * n);
      OperationPtr op = MakeOperation("AllGatherOperation", job.Param(), job.comm);
      HostTensor y = HostTensor::FromValues(dtype, {R, n}, start);
      if (Runs(*op, {View(y, me * n, {n})}, {y.tensor()}, what)) {
        ExpectExactly(y, golden, what);
      }
    }
    {
      std::vector<int64_t> counts(R), rdispls(R, 0);
      for (int j = 0; j < R; ++j) counts[j] = n + j;
      for (int j = R - 2; j >= 0; --j) rdispls[j] = rdispls[j + 1] + counts[j + 1] + 1;
      const int64_t m = rdispls[0] + counts[0] + 1;
      const auto values = AllValues(dtype, counts, 24);
      std::vector<double> golden(m, 0.0), start(m, 0.0);
      for (int j = 0; j < R; ++j) {
        std::copy(values[j].begin(), values[j].end(), golden.begin() + rdispls[j]);
      }
      std::copy(values[me].begin(), values[me].end(), start.begin() + rdispls[me]);
      const std::string what = Concat("AllGatherVOperation in place n=", n, " rank ", me);
      OperationPtr op = MakeOperation("AllGatherVOperation", job.Param(), job.comm);
      HostTensor out = HostTensor::FromValues(dtype, {m}, start);
      std::vector<HostTensor> hosts = {HostTensor::Counts({counts[me]}), HostTensor::Counts(counts),
                                       HostTensor::Counts(rdispls), HostTensor(ACL_INT8, {m})};
      const std::vector<Tensor> ins = {View(out, rdispls[me], {counts[me]}), hosts[0].tensor(),
                                       hosts[1].tensor(), hosts[2].tensor(), hosts[3].tensor()};
      if (Runs(*op, ins, {out.tensor()}, what)) ExpectExactly(out, golden, what);
    }
  }
}

/// LinearParallelOperation's golden cases (linear_golden.h) for its float dtypes.
void LinearParallel(const SuiteJob& job, DataType dtype) {
  if (dtype != ACL_FLOAT16 && dtype != ACL_BF16 && dtype != ACL_FLOAT) return;
  for (const LinearCase& c : LinearSuiteCases(dtype, job.rankSize)) {
    RunLinearCase(c, job.Param(), job.rank, job.rankSize, job.comm, "op suite");
  }
}

bool IsReducible(DataType dtype) {
  const auto& r = ReducibleDtypes();
  return std::find(r.begin(), r.end(), dtype) != r.end();
}

/// The movement-only ops run on this subset to keep the grid short.
bool InMovementSubset(DataType dtype) {
  return dtype == ACL_INT8 || dtype == ACL_FLOAT16 || dtype == ACL_BF16 || dtype == ACL_FLOAT ||
         dtype == ACL_DOUBLE;
}

}  // namespace

void RunBarrier(const SuiteJob& job, const std::string& what) {
  OperationPtr op = MakeOperation("BarrierOperation", job.Param(), job.comm);
  std::vector<HostTensor> none, noneOut;
  EXPECT_EQ(RunOperation(*op, Tensors(none), Tensors(noneOut)), NO_ERROR)
      << what << ": " << LastErrorMessage();
}

void RunEveryOp(const SuiteJob& job, DataType dtype) {
  if (IsReducible(dtype)) {
    AllReduce(job, dtype);
    ReduceScatter(job, dtype);
    ReduceScatterV(job, dtype);
    ReductionsInPlace(job, dtype);
    IntegerSumsWrap(job, dtype);
    AllToAllVs(job, dtype);
    LinearParallel(job, dtype);
  }
  if (dtype == ACL_INT8) {  // quantised AllReduce: int8 in, float out (quant_suite.h)
    RunQuantAllReduceCases(job);
    RunQuantAllReduceErrors(job);
  }
  if (InMovementSubset(dtype)) {
    AllGather(job, dtype);
    AllGatherV(job, dtype);
    GathersInPlace(job, dtype);
    Broadcast(job, dtype);
    AllToAll(job, dtype);
    SendRecvRing(job, dtype);
    SendRecvOperationRing(job, dtype);
    Barrier(job);
  }
}

void RunInPlaceForms(const SuiteJob& job, DataType dtype) {
  if (IsReducible(dtype)) ReductionsInPlace(job, dtype);
  if (InMovementSubset(dtype)) GathersInPlace(job, dtype);
}

const std::vector<DataType>& SuiteDtypes() {
  static const std::vector<DataType> dtypes = {ACL_INT8,    ACL_INT16, ACL_INT32, ACL_INT64,
                                               ACL_FLOAT16, ACL_BF16,  ACL_FLOAT, ACL_DOUBLE};
  return dtypes;
}

}  // namespace testing
}  // namespace collops
