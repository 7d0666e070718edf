// torch.ops.collops calls' groups (op_group_target.h).
#include "op_group_target.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

namespace collops {
namespace {

// The group registered as `name`, or null when none is.
c10::intrusive_ptr<c10d::ProcessGroup> Registered(const std::string& name) {
  try {
    return c10d::resolve_process_group(name);
  } catch (const c10::Error&) {
    return {};
  }
}

// The group `name` names ("" = the default group, which only Python knows). Python is asked once
// per thread while the default group stays: the answer is kept with a weak reference to its
// group, and holds as long as that group is alive and still registered under that name. Torch
// replaces the default group only by unregistering it (destroy_process_group unregisters every
// group, shrink_group the one it replaces), so a new default group is always asked for.
c10::intrusive_ptr<c10d::ProcessGroup> GroupNamed(const std::string& name) {
  if (!name.empty()) return c10d::resolve_process_group(name);
  struct Default {
    std::string name;
    c10::weak_intrusive_ptr<c10d::ProcessGroup> group{c10::intrusive_ptr<c10d::ProcessGroup>()};
  };
  thread_local Default known;
  if (!known.name.empty()) {
    c10::intrusive_ptr<c10d::ProcessGroup> group = known.group.lock();
    if (group && Registered(known.name) == group) return group;
  }
  std::string asked;
  {
    pybind11::gil_scoped_acquire gil;
    asked = pybind11::module_::import("collops._c10d_backend")
                .attr("default_group_name")()
                .cast<std::string>();
  }
  c10::intrusive_ptr<c10d::ProcessGroup> group = c10d::resolve_process_group(asked);
  known = Default{asked, c10::weak_intrusive_ptr<c10d::ProcessGroup>(group)};
  return group;
}

}  // namespace

Target TargetNamed(const std::string& name) {
  struct Kept {
    std::string name;
    c10::weak_intrusive_ptr<c10d::ProcessGroup> group{c10::intrusive_ptr<c10d::ProcessGroup>()};
    CollopsBackend* collops = nullptr;
  };
  thread_local Kept kept;
  if (kept.collops != nullptr && name == kept.name) {
    Target target{kept.group.lock(), kept.collops};
    if (target.group && !target.collops->Closed()) return target;
  }
  Target target;
  target.group = GroupNamed(name);
  target.collops = CollopsOf(*target.group);
  if (target.collops != nullptr) {
    kept = Kept{name, c10::weak_intrusive_ptr<c10d::ProcessGroup>(target.group), target.collops};
  }
  return target;
}

}  // namespace collops
