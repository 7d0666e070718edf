// Backends that live in their own shared library, loaded the first time they are asked for:
// libmpi must not be loaded into every process that uses libcollops.so (the Python extension,
// lccl-only jobs), so backend "mpi" is libcollops_mpi.so beside libcollops.so.
#pragma once

#include <string>

namespace collops {

/// Loads the plugin that provides `backend` ("mpi" -> libcollops_mpi.so in the directory of
/// libcollops.so); its static initialisers register its factories. Returns true when this call
/// loaded it (look the factory up again), false when `backend` has no plugin or it was loaded
/// before. Throws Error(ERROR_BACKEND_UNAVAILABLE) when the plugin file is
/// absent (collops was built without it) or cannot be loaded (the dynamic loader's message).
bool LoadBackendPlugin(const std::string& backend);

}  // namespace collops
