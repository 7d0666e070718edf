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

/// "rank 2", "ranks 2, 3" or "ranks 0, 1, ..., 15 and 4080 more": `ranks` is any range of rank
/// numbers, in the order to print.
template <class Ranks>
std::string FormatRanks(const Ranks& ranks) {
  std::string list;
  size_t count = 0;
  for (int r : ranks) {
    if (count < kListedRanks) list += Concat(count == 0 ? "" : ", ", r);
    ++count;
  }
  if (count > kListedRanks) list += Concat(" and ", count - kListedRanks, " more");
  return Concat(count == 1 ? "rank " : "ranks ", list);
}

}  // namespace shm
}  // namespace collops
