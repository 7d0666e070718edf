#include "collops/backend.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "collops/environment.h"
#include "collops/reduce.h"
#include "collops/status.h"
#include "core/src/backend_plugin.h"

namespace collops {
namespace {

const char* ModeName(CommMode mode) {
  return mode == COMM_MULTI_THREAD ? "thread" : mode == COMM_MULTI_PROCESS ? "process" : "?";
}

struct Backends {
  std::mutex mutex;
  std::map<std::pair<std::string, int>, CommunicatorFactory> factories;
};

Backends& TheBackends() {
  static Backends* backends = new Backends;  // never destroyed: used from static initialisers
  return *backends;
}

}  // namespace

bool RegisterCommunicatorBackend(const std::string& backend, CommMode mode,
                                 CommunicatorFactory factory) {
  Backends& b = TheBackends();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.factories[{backend, static_cast<int>(mode)}] = std::move(factory);
  return true;
}

std::string ResolveBackend(const CommParam& param) {
  // "hccl" is ATB's default, so ATB scripts name it without thinking: it means "the best engine
  // for where the ranks are", which on one host is our shared-memory lccl. Across hosts the
  // "hccl" factory (comm/hier) builds a hierarchical communicator; it still caches under "lccl",
  // since a domain that spans hosts cannot have a plain lccl communicator as well.
  if (param.backend == "hccl") return "lccl";
  return param.backend;
}

std::vector<std::string> ListCommunicatorBackends() {
  Backends& b = TheBackends();
  std::lock_guard<std::mutex> lock(b.mutex);
  std::vector<std::string> names;
  for (const auto& entry : b.factories) {
    names.push_back(entry.first.first + "/" + ModeName(static_cast<CommMode>(entry.first.second)));
  }
  return names;
}

std::shared_ptr<Communicator> CreateCommunicator(const CommParam& param) {
  // Knobs read later inside calls (on every wait; by the reduction kernels): a bad value fails
  // here, naming the knob, before this rank joins anyone.
  (void)CommTimeoutSeconds();
  (void)ReduceKernelIsa();
  const std::string backend = ResolveBackend(param);
  CommunicatorFactory factory;
  {
    Backends& b = TheBackends();
    std::lock_guard<std::mutex> lock(b.mutex);
    // A factory registered under the very name asked for comes first: "hccl" has one in process
    // mode (comm/hier: lccl on one host, hierarchical across hosts); elsewhere it means lccl.
    auto it = b.factories.find({param.backend, static_cast<int>(param.commMode)});
    if (it == b.factories.end()) it = b.factories.find({backend, static_cast<int>(param.commMode)});
    if (it != b.factories.end()) factory = it->second;
  }
  // A backend in its own library (libcollops_mpi.so) registers itself when first loaded.
  if (!factory && LoadBackendPlugin(backend)) return CreateCommunicator(param);
  if (!factory) {
    std::string available;
    for (const auto& name : ListCommunicatorBackends()) {
      available += (available.empty() ? "" : ", ") + name;
    }
    Fail(ERROR_BACKEND_UNAVAILABLE, "backend \"", param.backend, "\" (", backend, ") in ",
         ModeName(param.commMode), " mode is not available in this build (available: ",
         available.empty() ? "none" : available, ")");
  }
  return factory(param);
}

double CommTimeoutSeconds() { return KnobSeconds("COLLOPS_TIMEOUT", 300.0); }

double CommTimeoutSeconds(double chosenSeconds, const char** source) {
  const bool chosen = chosenSeconds > 0;
  if (source != nullptr) *source = chosen ? "the caller's timeout" : "COLLOPS_TIMEOUT";
  return chosen ? std::min(chosenSeconds, kMaxCommTimeoutSeconds) : CommTimeoutSeconds();
}

}  // namespace collops
