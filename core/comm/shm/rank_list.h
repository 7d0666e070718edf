// How lccl's messages name a set of ranks, in thread and process mode alike.
#pragma once

#include <string>

#include "collops/status.h"

namespace collops {
namespace shm {

/// The most ranks an lccl communicator has, in process and thread mode alike.
constexpr int kMaxLcclRanks = 4096;

/// How many ranks a message lists before "and N more": a timeout in a job of thousands of ranks
/// stays a sentence, not pages of numbers.
constexpr size_t kListedRanks = 16;

/// "a, b, c" of show(r) for the first kListedRanks of `ranks` (a sized range of rank numbers, in
/// the order to print), then " and N more".
template <class Ranks, class Show>
std::string ListRanks(const Ranks& ranks, Show&& show) {
  std::string list;
  size_t n = 0;
  for (int r : ranks) {
    if (n == kListedRanks) break;
    list += Concat(n++ == 0 ? "" : ", ", show(r));
  }
  if (ranks.size() > kListedRanks) list += Concat(" and ", ranks.size() - kListedRanks, " more");
  return list;
}

/// "rank 2", "ranks 2, 3" or "ranks 0, 1, ..., 15 and 4080 more".
template <class Ranks>
std::string FormatRanks(const Ranks& ranks) {
  return Concat(ranks.size() == 1 ? "rank " : "ranks ", ListRanks(ranks, [](int r) { return r; }));
}

}  // namespace shm
}  // namespace collops
