#include "ops/all_to_allv/all_to_allv_plan.h"

#include <numeric>

#include "collops/operation_base.h"
#include "collops/status.h"

namespace collops {
namespace {

void CheckVector(const std::string& where, const std::vector<int64_t>& values, const char* name,
                 int rankSize) {
  if (values.size() != static_cast<size_t>(rankSize)) {
    Fail(ERROR_INVALID_PARAM, where, ": ", name, " has ", values.size(),
         " entries; rankSize = ", rankSize, " needs ", rankSize);
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0) {
      Fail(ERROR_INVALID_PARAM, where, ": ", name, "[", i, "] = ", values[i], " must be >= 0");
    }
  }
}

}  // namespace

AllToAllVPlan AllToAllVPlan::Uniform(int rankSize, int64_t chunk) {
  AllToAllVPlan plan;
  plan.sendCounts.assign(rankSize, chunk);
  plan.recvCounts.assign(rankSize, chunk);
  for (int j = 0; j < rankSize; ++j) {
    plan.sdispls.push_back(j * chunk);
    plan.rdispls.push_back(j * chunk);
  }
  return plan;
}

int64_t AllToAllVPlan::RecvTotal() const {
  return std::accumulate(recvCounts.begin(), recvCounts.end(), int64_t{0});
}

void AllToAllVPlan::Validate(const std::string& where, int rankSize) const {
  CheckVector(where, sendCounts, "sendCounts", rankSize);
  CheckVector(where, sdispls, "sdispls", rankSize);
  CheckVector(where, recvCounts, "recvCounts", rankSize);
  CheckVector(where, rdispls, "rdispls", rankSize);

  int64_t total = 0;
  for (const int64_t count : recvCounts) {
    if (__builtin_add_overflow(total, count, &total)) {
      Fail(ERROR_INVALID_PARAM, where, ": the sum of recvCounts overflows int64");
    }
  }
  if (total == 0) {
    Fail(ERROR_INVALID_PARAM, where, ": recvCounts sum to 0, but the output y [1, sum(recvCounts)]",
         " needs at least one element");
  }
  for (int j = 0; j < rankSize; ++j) {
    int64_t end = 0;
    if (__builtin_add_overflow(recvCounts[j], rdispls[j], &end) || end > total) {
      Fail(ERROR_INVALID_PARAM, where, ": recvCounts[", j, "] + rdispls[", j, "] = ", recvCounts[j],
           " + ", rdispls[j], " exceeds y.numel() = sum(recvCounts) = ", total);
    }
  }

  // Ranges inside y whose lengths add up to y's size tile it exactly iff no two overlap.
  CheckRangesDisjoint(where, recvCounts, "recvCounts", rdispls, "rdispls", "y",
                      "every element of y must be received exactly once");
}

CallSignature AllToAllVPlan::Signature(const std::string& opName, DataType dtype) const {
  CallSignature s;
  s.opName = opName;
  s.dtype = dtype;
  s.sendCounts = sendCounts;
  s.recvCounts = recvCounts;
  s.sendField = "sendCounts";
  s.recvField = "recvCounts";
  return s;
}

void AllToAllVPlan::Run(Communicator& comm, const void* in, void* out, DataType dtype) const {
  comm.AllToAllV(in, sendCounts.data(), sdispls.data(), out, recvCounts.data(), rdispls.data(),
                 dtype);
}

}  // namespace collops
