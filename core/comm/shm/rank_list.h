// How lccl's messages name a set of ranks, in thread and process mode alike.
#pragma once

#include <string>

#include "collops/status.h"

namespace collops {
namespace shm {

/// "rank 2" or "ranks 2, 3": `ranks` is any range of rank numbers, in the order to print.
template <class Ranks>
std::string FormatRanks(const Ranks& ranks) {
  std::string list;
  size_t count = 0;
  for (int r : ranks) list += Concat(count++ == 0 ? "" : ", ", r);
  return Concat(count == 1 ? "rank " : "ranks ", list);
}

}  // namespace shm
}  // namespace collops
