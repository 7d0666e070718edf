// Which group a torch.ops.collops call names, and whether the collops backend serves it
// (functional_ops.cpp): resolved once per thread while that group stays.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <string>

#include "collops_backend.h"

namespace collops {

/// A call's group and the collops backend serving its CPU tensors (null: another backend).
struct Target {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  CollopsBackend* collops = nullptr;
};

/// The group `name` names ("" = the default group) with its collops backend. A thread keeps the
/// last collops group it resolved, and its backend, for the calls that name it again: the answer
/// holds while that group is alive and its backend not closed (shut down or aborted). Torch closes
/// every group it destroys before a name, or the default, can mean another group
/// (destroy_process_group, shrink_group, abort_process_group), so a call after that resolves
/// anew (a default group replaced by assigning torch's private _world.default_pg, the old one
/// left alive and open, is not seen). A group of another backend is resolved on every call.
Target TargetNamed(const std::string& name);

}  // namespace collops
