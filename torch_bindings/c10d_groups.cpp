// torch.distributed's groups as collops communicators: the "c10d" backend's factory, which
// adopts a group the application made, and the gloo groups collops makes itself over a Store
// (c10d_groups.h). Both ask torch's Python API, under the GIL.
#include "c10d_groups.h"

#include <Python.h>
#include <pybind11/pybind11.h>

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "c10d_engine.h"
#include "collops/backend.h"
#include "collops/status.h"

// The holder torch's own bindings use, so Store and Backend objects cross to and from Python.
PYBIND11_DECLARE_HOLDER_TYPE(T, c10::intrusive_ptr<T>, true)

namespace collops {
namespace {

namespace py = pybind11;

// Holds the GIL (from any thread; OperationTorch runs collectives with it released).
class PythonLock {
 public:
  PythonLock() : state_(PyGILState_Ensure()) {}
  ~PythonLock() { PyGILState_Release(state_); }
  PythonLock(const PythonLock&) = delete;
  PythonLock& operator=(const PythonLock&) = delete;

 private:
  PyGILState_STATE state_;
};

void RequirePython(const char* forWhat) {
  if (!Py_IsInitialized()) {
    Fail(ERROR_BACKEND_UNAVAILABLE, "backend c10d: ", forWhat,
         " needs torch.distributed, but this process has no Python interpreter");
  }
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out.empty() ? "none" : out;
}

// The name torch.distributed knows the group `domain` by ("" = the default group's name).
std::string ResolveGroupName(const std::string& domain) {
  RequirePython("commDomain lookup");
  PythonLock lock;
  try {
    py::module_ dist = py::module_::import("torch.distributed");
    if (!dist.attr("is_available")().cast<bool>()) {
      Fail(ERROR_BACKEND_UNAVAILABLE,
           "backend c10d: this torch build has no torch.distributed (is_available() is False)");
    }
    if (!dist.attr("is_initialized")().cast<bool>()) {
      Fail(ERROR_BACKEND_UNAVAILABLE,
           "backend c10d: torch.distributed is not initialised in this process; call "
           "torch.distributed.init_process_group(...) before using backend \"c10d\"");
    }
    py::module_ world = py::module_::import("torch.distributed.distributed_c10d");
    const std::string defaultName =
        py::str(world.attr("_get_default_group")().attr("group_name")).cast<std::string>();
    std::vector<std::string> known;
    for (auto item : world.attr("_world").attr("pg_names").cast<py::dict>()) {
      known.push_back(py::str(item.second).cast<std::string>());
    }
    std::sort(known.begin(), known.end());
    const std::string name = domain.empty() ? defaultName : domain;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      Fail(ERROR_INVALID_PARAM, "backend c10d: commDomain \"", domain,
           "\" is not the name of a torch.distributed process group of this process (known "
           "groups: ",
           Join(known), "; \"\" means the default group \"", defaultName,
           "\"; a rank outside a new_group's ranks has no such group)");
    }
    return name;
  } catch (py::error_already_set& e) {
    Fail(ERROR_BACKEND_UNAVAILABLE,
         "backend c10d: asking torch.distributed for its groups failed: ", e.what());
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> MakeGlooBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const std::string& prefix, int rank, int size,
                                                  double timeoutSeconds) {
  RequirePython("creating a gloo group");
  PythonLock lock;
  try {
    py::module_ dist = py::module_::import("torch.distributed");
    py::object prefixed = dist.attr("PrefixStore")(prefix, py::cast(store));
    py::object timeout =
        py::module_::import("datetime").attr("timedelta")(0, CommTimeoutSeconds(timeoutSeconds));
    py::object gloo = dist.attr("ProcessGroupGloo")(prefixed, rank, size, timeout);
    return gloo.cast<c10::intrusive_ptr<c10d::Backend>>();
  } catch (py::error_already_set& e) {
    Fail(ERROR_COMM_FAIL, "backend c10d: creating a gloo group (rank ", rank, " of ", size,
         ", store prefix \"", prefix, "\") failed: ", e.what());
  } catch (const py::cast_error& e) {
    Fail(ERROR_INTERNAL_ERROR,
         "backend c10d: torch's ProcessGroupGloo did not convert to a "
         "c10d::Backend: ",
         e.what());
  }
}

std::shared_ptr<Communicator> AdoptProcessGroup(const CommParam& param) {
  const std::string name = ResolveGroupName(param.commDomain);
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  try {
    group = c10d::resolve_process_group(name);
  } catch (const std::exception& e) {
    Fail(ERROR_INVALID_PARAM, "backend c10d: torch.distributed lists group \"", name,
         "\" but its registry does not resolve it: ", e.what());
  }
  const std::string which = Concat("torch.distributed group \"", name, "\"");
  if (param.rankSize != group->getSize()) {
    Fail(ERROR_INVALID_PARAM, "backend c10d: rankSize = ", param.rankSize, " but ", which,
         " (commDomain \"", param.commDomain, "\") has ", group->getSize(), " ranks");
  }
  if (param.rank != group->getRank()) {
    Fail(ERROR_INVALID_PARAM, "backend c10d: rank = ", param.rank, " but this process is rank ",
         group->getRank(), " of ", which, " (commDomain \"", param.commDomain, "\")");
  }
  return std::make_shared<ProcessGroupCommunicator>(std::move(group), name);
}

namespace {
[[maybe_unused]] const bool kRegistered =
    RegisterCommunicatorBackend("c10d", COMM_MULTI_PROCESS, AdoptProcessGroup);
}  // namespace

}  // namespace collops
