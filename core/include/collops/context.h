// Context: the communicator pool and a reusable workspace (ATB's atb::Context).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "collops/comm_params.h"
#include "collops/communicator.h"
#include "collops/status.h"

namespace collops {

/// Caches communicators by (backend, commDomain, rankSize, rank, commMode) so later operations
/// with the same params reuse them. Thread-safe. A communicator that has Broken() is replaced.
class CommunicatorPool {
 public:
  /// The communicator `param` names: param.comm when the caller gave one (never freed), else a
  /// cached or newly created one. Throws Error.
  std::shared_ptr<Communicator> Get(const CommParam& param);
  /// The communicator Get() would return, if it exists already and is not broken; else null.
  /// Never creates one (creating waits for the other ranks).
  std::shared_ptr<Communicator> Find(const CommParam& param);
  /// Drops the cached communicators of `commDomain` (of every domain when it has no value): each is
  /// freed once no operation holds it, and the next Get() for that domain creates a new one.
  /// Collective in effect, like destroy_process_group: every rank releases at the same point of
  /// its calls. Returns how many were dropped.
  size_t Release(const std::optional<std::string>& commDomain);

 private:
  using Key = std::tuple<std::string, std::string, int, int, int>;
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<Communicator>> communicators_;
};

class Context {
 public:
  CommunicatorPool& Communicators() { return communicators_; }
  /// A buffer of at least `bytes` bytes owned by the context, reused across calls.
  uint8_t* Workspace(uint64_t bytes);

 private:
  CommunicatorPool communicators_;
  std::vector<uint8_t> workspace_;
};

Status CreateContext(Context** context);
Status DestroyContext(Context* context);
/// The context used when an operation is given a null one; lives until process exit.
Context& DefaultContext();

}  // namespace collops
