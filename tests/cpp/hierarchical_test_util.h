// What the hierarchical communicator tests share: host layouts over pretend hosts, a rank's
// hierarchical communicator built from thread-mode lccl communicators, and one uneven AllToAllV
// with its golden output.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collops/backend.h"
#include "collops/hierarchical_communicator.h"
#include "collops/signature.h"
#include "collops/topology.h"
#include "thread_ranks.h"

namespace collops {
namespace testing {

/// A layout whose hosts are named host0, host1, ...
inline HostLayout Layout(const std::vector<int>& hostOfRank) {
  std::vector<std::string> names;
  for (int h = 0; h < 8; ++h) names.push_back(Concat("host", h));
  return NormalizeLayout(hostOfRank, names);
}

using WrapComm = std::function<std::shared_ptr<Communicator>(std::shared_ptr<Communicator>)>;

/// This rank's hierarchical communicator over thread-mode lccl communicators.
/// `wrapFlat` and `wrapRail` may put a test engine around the flat and rail communicators.
inline std::shared_ptr<Communicator> ThreadHierarchy(int rank, const HostLayout& layout,
                                                     const std::string& domain,
                                                     const WrapComm& wrapFlat = nullptr,
                                                     const WrapComm& wrapRail = nullptr) {
  const int size = static_cast<int>(layout.hostOfRank.size());
  const int host = layout.hostOfRank[rank];
  auto flat = CreateCommunicator(ThreadRankParam(rank, size, domain + "/flat"));
  if (wrapFlat) flat = wrapFlat(flat);
  auto intra = CreateCommunicator(ThreadRankParam(layout.LocalIndex(rank),
                                                  static_cast<int>(layout.RanksOn(host).size()),
                                                  Concat(domain, "/host", host)));
  const int local = layout.LocalIndex(rank);
  auto rail = CreateCommunicator(ThreadRankParam(layout.RailRank(rank),
                                                 static_cast<int>(layout.HostsOfRail(local).size()),
                                                 Concat(domain, "/rail", local)));
  if (wrapRail) rail = wrapRail(rail);
  return MakeHierarchicalCommunicator(flat, intra, rail, layout);
}

/// One uneven AllToAllV of int64 over `size` ranks: block (j -> i) has count(j, i) elements.
/// `reversed`: the received blocks lie in y from the highest rank down.
struct ExchangeCase {
  std::vector<int64_t> sendCounts, sdispls, recvCounts, rdispls, in, golden;

  ExchangeCase(int rank, int size, const std::function<int64_t(int, int)>& count,
               bool reversed = false)
      : sendCounts(size), sdispls(size), recvCounts(size), rdispls(size) {
    for (int i = 0; i < size; ++i) {
      sendCounts[i] = count(rank, i);
      sdispls[i] = static_cast<int64_t>(in.size());
      for (int64_t k = 0; k < sendCounts[i]; ++k) in.push_back(Value(rank, i, k));
    }
    int64_t total = 0;
    for (int n = 0; n < size; ++n) {
      const int j = reversed ? size - 1 - n : n;
      recvCounts[j] = count(j, rank);
      rdispls[j] = total;
      total += recvCounts[j];
    }
    golden.assign(total, -1);
    for (int j = 0; j < size; ++j) {
      for (int64_t k = 0; k < recvCounts[j]; ++k) golden[rdispls[j] + k] = Value(j, rank, k);
    }
  }
  static int64_t Value(int from, int to, int64_t k) { return 1000000 * from + 1000 * to + k; }
  CallSignature Signature() const {
    CallSignature s;
    s.opName = "AllToAllV";
    s.dtype = ACL_INT64;
    s.sendCounts = sendCounts;
    s.recvCounts = recvCounts;
    return s;
  }
  std::vector<int64_t> Run(Communicator& comm) const {
    std::vector<int64_t> out(golden.size(), -1);
    comm.AllToAllV(in.data(), sendCounts.data(), sdispls.data(), out.data(), recvCounts.data(),
                   rdispls.data(), ACL_INT64);
    return out;
  }
};

}  // namespace testing
}  // namespace collops
