#include "collops/comm_params.h"

#include "collops/status.h"

namespace collops {

void ValidateCommParam(const std::string& opName, const CommParam& p) {
  if (p.rankSize <= 0) {
    Fail(ERROR_INVALID_PARAM, opName, ": rankSize = ", p.rankSize, " must be > 0");
  }
  if (p.rank < 0 || p.rank >= p.rankSize) {
    Fail(ERROR_INVALID_PARAM, opName, ": rank = ", p.rank,
         " must be in [0, rankSize = ", p.rankSize, ")");
  }
  if (p.rankRoot < 0 || p.rankRoot >= p.rankSize) {
    Fail(ERROR_INVALID_PARAM, opName, ": rankRoot = ", p.rankRoot,
         " must be in [0, rankSize = ", p.rankSize, ")");
  }
  if (p.backend != "hccl" && p.backend != "lccl" && p.backend != "mpi" && p.backend != "c10d") {
    Fail(ERROR_INVALID_PARAM, opName, ": backend = \"", p.backend,
         "\" is not one of \"hccl\", \"lccl\", \"mpi\", \"c10d\"");
  }
  if (p.commMode != COMM_MULTI_PROCESS && p.commMode != COMM_MULTI_THREAD) {
    Fail(ERROR_INVALID_PARAM, opName, ": commMode = ", static_cast<int>(p.commMode),
         " must be 0 (multi-process) or 1 (multi-thread)");
  }
  if (p.commDomain.size() > kMaxCommDomainLength) {
    Fail(ERROR_INVALID_PARAM, opName, ": commDomain is ", p.commDomain.size(),
         " characters long; at most ", kMaxCommDomainLength, " are allowed");
  }
  for (size_t i = 0; i < p.rsv.size(); ++i) {
    if (p.rsv[i] != 0) {
      Fail(ERROR_INVALID_PARAM, opName, ": rsv[", i, "] = ", static_cast<int>(p.rsv[i]),
           " must be 0 (reserved)");
    }
  }
}

void ValidatePeerRank(const std::string& opName, const CommParam& p, const char* field, int peer,
                      const char* selfAction) {
  if (peer < 0 || peer >= p.rankSize) {
    Fail(ERROR_INVALID_PARAM, opName, " (rank ", p.rank, "): ", field, " = ", peer,
         " must be in [0, rankSize = ", p.rankSize, ")");
  }
  if (peer == p.rank) {
    Fail(ERROR_INVALID_PARAM, opName, " (rank ", p.rank, "): ", field, " = ", peer,
         " is this rank; a rank cannot ", selfAction);
  }
}

}  // namespace collops
