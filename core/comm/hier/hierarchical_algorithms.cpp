// The hierarchical engine's rows of the algorithm table (collops/algorithms.h): the collectives
// where it chooses between algorithms. collops/hierarchical_communicator.h describes every
// collective's steps.
#include <vector>

#include "collops/algorithms.h"

namespace collops {
namespace hier {
namespace {

const AlgorithmInfo kHierarchicalAlgorithms[] = {
    {"AllReduce", "AllReduce", "rails",
     "intra ReduceScatterV onto the block owners, each rail AllReduces its block across hosts "
     "(two hosts and blocks of 8 MiB or more: by swapping halves), intra AllGatherV",
     "every host holds the same number L > 1 of ranks, and there are several hosts",
     "whenever it can run"},
    {"AllReduce", "AllReduce", "leaders",
     "intra AllReduce, the leaders AllReduce across hosts, intra Broadcast from the leader",
     "any call", "otherwise"},
    {"AllToAll", "AllToAllV", "aggregated",
     "blocks between ranks of one host go intra; blocks for other hosts are gathered to the "
     "leader, exchanged as one message per host pair among the leaders, and scattered",
     "any call",
     "the largest host-pair message stays below 60 KiB (under the engine's eager limit)"},
    {"AllToAll", "AllToAllV", "direct",
     "blocks for other hosts go straight from rank to rank in one flat AllToAllV, started before "
     "the intra AllToAllV and finished after it",
     "any call", "the largest host-pair message reaches 60 KiB"},
};

[[maybe_unused]] const bool kRegistered =
    RegisterAlgorithms({"hierarchical (`hccl` across hosts)", 2, "",
                        std::vector<AlgorithmInfo>(std::begin(kHierarchicalAlgorithms),
                                                   std::end(kHierarchicalAlgorithms))});

}  // namespace
}  // namespace hier
}  // namespace collops
