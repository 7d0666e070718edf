// The communication params every operation carries (docs/operations.md, "Common params").
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace collops {

class Communicator;

enum CommMode : int32_t {
  COMM_UNDEFINED = -1,
  COMM_MULTI_PROCESS = 0,  ///< every rank is its own process
  COMM_MULTI_THREAD = 1,   ///< the ranks are threads of one process
};

constexpr size_t kMaxCommDomainLength = 128;
constexpr size_t kRsvSize = 64;

/// Fields shared by every operation's param struct. Op params derive from it, as ATB's flat
/// structs carry the same fields.
struct CommParam {
  int rank = 0;                  ///< this rank; 0 <= rank < rankSize
  int rankSize = 0;              ///< ranks in the communicator; > 0, required
  int rankRoot = 0;              ///< root rank where the op has one; 0 <= rankRoot < rankSize
  std::string backend = "hccl";  ///< "lccl" | "mpi" | "c10d" | "hccl" (auto)
  Communicator* comm = nullptr;  ///< caller-owned communicator (ATB's hcclComm); never freed
  CommMode commMode = COMM_MULTI_PROCESS;  ///< 0 multi-process, 1 multi-thread
  std::string rankTableFile;               ///< HCCL-style rank table path, "" = none
  std::string commDomain;  ///< ranks with equal domains share a communicator; <= 128 chars
  std::array<uint8_t, kRsvSize> rsv{};  ///< reserved (ATB); any nonzero byte is rejected
  /// C++ only: bound on the communicator's waits, seconds; 0 = COLLOPS_TIMEOUT. The torch backend
  /// sets it from init_process_group(timeout=...). Read when the communicator is created.
  double timeoutSeconds = 0;

  /// Visits every JSON-visible field as v(key, field). `comm` and `timeoutSeconds` are C++ only.
  template <class Visitor>
  void VisitFields(Visitor& v) {
    v("rank", rank);
    v("rankSize", rankSize);
    v("rankRoot", rankRoot);
    v("backend", backend);
    v("commMode", commMode);
    v("commDomain", commDomain);
    v("rankTableFile", rankTableFile);
    v("rsv", rsv);
  }
};

/// Throws Error(ERROR_INVALID_PARAM) naming `opName`, the field and its value for any rule of the
/// common params (docs/operations.md) that `param` breaks.
void ValidateCommParam(const std::string& opName, const CommParam& param);

/// Throws Error(ERROR_INVALID_PARAM) unless 0 <= peer < rankSize and peer != rank; `field` names
/// the param ("destRank") and `selfAction` completes "a rank cannot ..." ("send to itself").
void ValidatePeerRank(const std::string& opName, const CommParam& param, const char* field,
                      int peer, const char* selfAction);

}  // namespace collops
