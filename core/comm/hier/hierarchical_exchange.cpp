// The hierarchical collectives whose data is addressed per destination rank: ReduceScatterV and
// AllToAllV (algorithms: collops/hierarchical_communicator.h).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/comm/hier/hierarchical_comm.h"
#include "core/comm/hier/wide_accumulation.h"

namespace collops {
namespace hier {
namespace {

int64_t Sum(const std::vector<int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

/// AllToAllV aggregates the blocks between two hosts into one message between their leaders while
/// the largest such message stays below this, else every block goes straight from rank to rank.
/// Few large TCP messages beat many small ones, until the leaders' message passes the engine's
/// eager limit (OpenMPI's btl_tcp_eager_limit, 64 KiB) and takes a rendezvous round trip; then the
/// leader's extra copies only add to it (measurements: docs/performance.md).
constexpr int64_t kAggregateBelowBytes = 60 << 10;

void CopyElements(uint8_t* dst, const uint8_t* src, int64_t count, size_t es) {
  if (count != 0) std::memcpy(dst, src, count * es);
}

}  // namespace

void HierarchicalCommunicator::ReduceScatterV(const void* in, const int64_t* sendCounts,
                                              const int64_t* sdispls, void* out, size_t recvCount,
                                              DataType dtype, ReduceOp op) {
  CheckUsable("ReduceScatterV");
  const std::vector<int>& local = ranksOn_[host_];
  if (HostCount() == 1) {
    // One host: the ranks are in global order on intra, so the call passes through unchanged.
    intra_->ReduceScatterV(in, sendCounts, sdispls, out, recvCount, dtype, op);
    return;
  }
  const size_t es = DataTypeSize(dtype);
  std::vector<int64_t> hostCounts(HostCount(), 0);
  for (int r = 0; r < size_; ++r) hostCounts[hostOf_[r]] += sendCounts[r];
  const std::vector<int64_t> hostDispls = Displacements(hostCounts);
  const int64_t total = Sum(hostCounts);
  if (total == 0) return;
  const bool wide = NeedsWideAccumulation(dtype, op);
  const DataType work = wide ? ACL_FLOAT : dtype;
  const size_t ws = DataTypeSize(work);

  // Every rank's send blocks, host by host, each host's in rank order.
  Scratch packed(*scratch_, 0, total * ws);
  std::vector<int64_t> next = hostDispls;
  const auto* src = static_cast<const uint8_t*>(in);
  for (int r = 0; r < size_; ++r) {
    int64_t& at = next[hostOf_[r]];
    if (wide) {
      Widen(dtype, src + sdispls[r] * es, reinterpret_cast<float*>(packed.get()) + at,
            sendCounts[r]);
    } else {
      CopyElements(packed.get() + at * ws, src + sdispls[r] * es, sendCounts[r], es);
    }
    at += sendCounts[r];
  }
  intra_->AllReduce(packed.get(), packed.get(), total, work, op);

  const int64_t mine = hostCounts[host_];
  Scratch hostBlock(*scratch_, 1, Leader() ? mine * ws : 0);
  if (AcrossHosts()) {
    rail_->ReduceScatterV(packed.get(), hostCounts.data(), hostDispls.data(), hostBlock.get(), mine,
                          work, op);
    if (wide) Narrow(dtype, reinterpret_cast<float*>(hostBlock.get()), hostBlock.get(), mine);
  }
  // The leader hands each rank of its host its slice of the host block.
  const int n = static_cast<int>(local.size());
  std::vector<int64_t> sendLocal(n, 0), sendDispls(n, 0), recvLocal(n, 0), recvDispls(n, 0);
  if (Leader()) {
    for (int k = 0; k < n; ++k) sendLocal[k] = sendCounts[local[k]];
    sendDispls = Displacements(sendLocal);
  }
  recvLocal[0] = static_cast<int64_t>(recvCount);
  intra_->AllToAllV(hostBlock.get(), sendLocal.data(), sendDispls.data(), out, recvLocal.data(),
                    recvDispls.data(), dtype);
}

void HierarchicalCommunicator::AllToAllV(const void* in, const int64_t* sendCounts,
                                         const int64_t* sdispls, void* out,
                                         const int64_t* recvCounts, const int64_t* rdispls,
                                         DataType dtype) {
  ThrowIfBroken("AllToAllV");
  const int R = size_, H = HostCount();
  const std::vector<int>& local = ranksOn_[host_];
  const int n = static_cast<int>(local.size()), me = localOf_[rank_];
  if (H == 1) {
    agreed_.clear();
    intra_->AllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype);
    return;
  }
  const size_t es = DataTypeSize(dtype);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  // counts[j * R + i]: elements rank j sends to rank i. Every rank knows all of it, so every rank
  // skips the same empty steps. After Agree() the records already hold it.
  std::vector<int64_t> counts(static_cast<size_t>(R) * R);
  if (!TakeAgreedCounts(sendCounts, recvCounts, counts)) {
    flat_->AllGatherBytes(sendCounts, counts.data(), R * sizeof(int64_t));
  }
  auto C = [&](int j, int i) { return counts[static_cast<size_t>(j) * R + i]; };
  auto remote = [&](int r) { return hostOf_[r] != host_; };
  // The order of every packed buffer: other hosts in host order, each host's ranks ascending (a
  // host's ranks need not be contiguous global ranks).
  auto ForEachRemoteRank = [&](auto&& visit) {
    for (int h = 0; h < H; ++h) {
      if (h == host_) continue;
      for (int r : ranksOn_[h]) visit(r);
    }
  };

  // pairTotal[a * H + b]: elements host a sends to host b.
  std::vector<int64_t> pairTotal(static_cast<size_t>(H) * H, 0);
  for (int j = 0; j < R; ++j) {
    for (int i = 0; i < R; ++i) {
      if (hostOf_[i] != hostOf_[j])
        pairTotal[static_cast<size_t>(hostOf_[j]) * H + hostOf_[i]] += C(j, i);
    }
  }
  const int64_t largestPair = *std::max_element(pairTotal.begin(), pairTotal.end());
  // Straight from rank to rank over the engine, each host's links carrying every local rank's
  // traffic at once: gathering at the leader costs two more copies and funnels the host's
  // traffic through one process.
  // Every rank knows the matrix, so all take the same path.
  const bool direct = largestPair * static_cast<int64_t>(es) >= kAggregateBelowBytes;

  // Blocks between ranks of this host: straight to their place. On the direct path the blocks for
  // other hosts are already on their way meanwhile (an engine that can, mpi, posted them), as flat
  // OpenMPI moves both at once.
  std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
  int64_t intraTotal = 0;
  for (int k = 0; k < n; ++k) {
    sc[k] = sendCounts[local[k]];
    sd[k] = sdispls[local[k]];
    rc[k] = recvCounts[local[k]];
    rd[k] = rdispls[local[k]];
    for (int i : local) intraTotal += C(local[k], i);
  }
  auto intraPart = [&] {
    if (intraTotal != 0)
      intra_->AllToAllV(src, sc.data(), sd.data(), dst, rc.data(), rd.data(), dtype);
  };
  if (direct) {
    std::vector<int64_t> sendRemote(R, 0), recvRemote(R, 0);
    for (int r = 0; r < R; ++r) {
      if (!remote(r)) continue;
      sendRemote[r] = sendCounts[r];
      recvRemote[r] = recvCounts[r];
    }
    flat_->StartAllToAllV(src, sendRemote.data(), sdispls, dst, recvRemote.data(), rdispls, dtype);
    try {
      intraPart();
    } catch (...) {
      // The peers on other hosts may still be moving data to and from this rank's buffers.
      try {
        flat_->FinishAllToAllV();
      } catch (const Error&) {  // the host's error is the one to report
      }
      throw;
    }
    flat_->FinishAllToAllV();
    return;
  }
  intraPart();
  if (largestPair == 0) return;

  // out[k]: what local rank k sends to other hosts; in[k]: what it receives from them.
  std::vector<int64_t> outOf(n, 0), into(n, 0);
  for (int k = 0; k < n; ++k) {
    for (int r = 0; r < R; ++r) {
      if (!remote(r)) continue;
      outOf[k] += C(local[k], r);
      into[k] += C(r, local[k]);
    }
  }
  const std::vector<int64_t> outDispls = Displacements(outOf), intoDispls = Displacements(into);
  const std::vector<int64_t> zeros(n, 0);

  // Gather to the leader: each rank's blocks for other hosts, by destination host then rank.
  Scratch gathered(*scratch_, 1, Leader() ? Sum(outOf) * es : 0);
  if (Sum(outOf) != 0) {
    Scratch mine(*scratch_, 0, outOf[me] * es);
    int64_t at = 0;
    ForEachRemoteRank([&](int i) {
      CopyElements(mine.get() + at * es, src + sdispls[i] * es, C(rank_, i), es);
      at += C(rank_, i);
    });
    std::vector<int64_t> send(n, 0);
    send[0] = outOf[me];
    intra_->AllToAllV(mine.get(), send.data(), zeros.data(), gathered.get(),
                      Leader() ? outOf.data() : zeros.data(),
                      Leader() ? outDispls.data() : zeros.data(), dtype);
  }

  // Leaders: one message per host pair, (source rank, destination rank) in rank order.
  Scratch scattered(*scratch_, 2, Leader() ? Sum(into) * es : 0);
  if (AcrossHosts()) {
    std::vector<int64_t> toHost(H, 0), fromHost(H, 0);
    for (int j : local) {
      for (int i = 0; i < R; ++i) toHost[hostOf_[i]] += remote(i) ? C(j, i) : 0;
    }
    for (int i : local) {
      for (int j = 0; j < R; ++j) fromHost[hostOf_[j]] += remote(j) ? C(j, i) : 0;
    }
    const std::vector<int64_t> toDispls = Displacements(toHost),
                               fromDispls = Displacements(fromHost);
    Scratch outbound(*scratch_, 3, Sum(toHost) * es), inbound(*scratch_, 4, Sum(fromHost) * es);
    // gathered holds source k's blocks ordered by destination host; regroup by host.
    std::vector<int64_t> readAt = outDispls, writeAt = toDispls;
    for (int h = 0; h < H; ++h) {
      if (h == host_) continue;
      for (int k = 0; k < n; ++k) {
        int64_t segment = 0;
        for (int i : ranksOn_[h]) segment += C(local[k], i);
        CopyElements(outbound.get() + writeAt[h] * es, gathered.get() + readAt[k] * es, segment,
                     es);
        writeAt[h] += segment;
        readAt[k] += segment;
      }
    }
    rail_->AllToAllV(outbound.get(), toHost.data(), toDispls.data(), inbound.get(), fromHost.data(),
                     fromDispls.data(), dtype);
    // inbound holds, per source host, source j's blocks for this host's ranks in rank order;
    // regroup by destination rank.
    std::vector<int64_t> fill = intoDispls;
    int64_t at = 0;
    for (int h = 0; h < H; ++h) {
      if (h == host_) continue;
      for (int j : ranksOn_[h]) {
        for (int k = 0; k < n; ++k) {
          CopyElements(scattered.get() + fill[k] * es, inbound.get() + at * es, C(j, local[k]), es);
          fill[k] += C(j, local[k]);
          at += C(j, local[k]);
        }
      }
    }
  }

  // Scatter from the leader and unpack by source rank.
  if (Sum(into) != 0) {
    Scratch received(*scratch_, 0, into[me] * es);  // mine is done with slot 0
    std::vector<int64_t> recv(n, 0);
    recv[0] = into[me];
    intra_->AllToAllV(scattered.get(), Leader() ? into.data() : zeros.data(),
                      Leader() ? intoDispls.data() : zeros.data(), received.get(), recv.data(),
                      zeros.data(), dtype);
    int64_t at = 0;
    ForEachRemoteRank([&](int j) {
      CopyElements(dst + rdispls[j] * es, received.get() + at * es, C(j, rank_), es);
      at += C(j, rank_);
    });
  }
}

}  // namespace hier
}  // namespace collops
