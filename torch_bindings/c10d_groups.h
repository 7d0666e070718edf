// Where the "c10d" engine's groups come from: a torch.distributed group the application made
// (the engine's factory, registered as backend "c10d"), or a gloo group collops makes itself over
// a Store (the "collops" backend's groups between hosts, and the engine's own Splits).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>

#include "collops/comm_params.h"
#include "collops/communicator.h"

namespace collops {

/// A gloo backend of `size` ranks over PrefixStore(prefix, store); collective over exactly those
/// ranks (each passes its `rank`). Made through torch's Python binding under the GIL (the torch
/// wheel ships no gloo headers), so it honours GLOO_SOCKET_IFNAME like torch's own groups. Its
/// waits are bounded by `timeoutSeconds`, 0 = CommTimeoutSeconds().
c10::intrusive_ptr<c10d::Backend> MakeGlooBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const std::string& prefix, int rank, int size,
                                                  double timeoutSeconds = 0);

/// The "c10d" factory (commMode 0): adopts the torch.distributed group named param.commDomain
/// ("" = the default group). Throws ERROR_BACKEND_UNAVAILABLE when torch.distributed is not
/// initialised in this process, ERROR_INVALID_PARAM naming commDomain and the known groups for an
/// unknown name, and naming rank or rankSize when they disagree with the group's.
std::shared_ptr<Communicator> AdoptProcessGroup(const CommParam& param);

}  // namespace collops
