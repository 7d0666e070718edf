// The hierarchical communicator's parts number their ranks their own way: a host's lccl
// communicator 0..k-1 within the host, the leaders' engine by host. Their errors ("rank 1 died")
// would point the user at the wrong process; this wrapper adds which job ranks those are.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collops/communicator.h"

namespace collops {
namespace hier {

/// `inner`, whose errors also say which job rank each of its rank numbers stands for:
/// `scope` ("host 1's lccl") and jobRanks[i] = the job rank of inner's rank i.
std::shared_ptr<Communicator> WithJobRankNames(std::shared_ptr<Communicator> inner,
                                               const std::string& scope,
                                               const std::vector<int>& jobRanks);

}  // namespace hier
}  // namespace collops
