#include "core/src/backend_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include "collops/status.h"

namespace collops {
namespace {

struct Plugin {
  const char* backend;
  const char* file;
  const char* missing;  ///< why the file may be absent
};

constexpr Plugin kPlugins[] = {
    {"mpi", "libcollops_mpi.so",
     "collops was built without MPI (COLLOPS_WITH_MPI=OFF, or OpenMPI was not found)"},
};

/// The directory libcollops.so was loaded from (the build tree, an install's lib/, collops/lib/
/// of an installed Python package).
std::string LibraryDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&LoadBackendPlugin), &info) == 0 ||
      info.dli_fname == nullptr) {
    return ".";
  }
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

bool LoadBackendPlugin(const std::string& backend) {
  for (const Plugin& plugin : kPlugins) {
    if (backend != plugin.backend) continue;
    static std::mutex mutex;
    static bool loaded = false;  // one entry in kPlugins for now
    std::lock_guard<std::mutex> lock(mutex);
    if (loaded) return false;  // it registered what it has; asking again cannot add more
    const std::string path = LibraryDirectory() + "/" + plugin.file;
    if (access(path.c_str(), F_OK) != 0) {
      Fail(ERROR_BACKEND_UNAVAILABLE, "backend \"", backend,
           "\" is not available: ", plugin.missing, "; ", path, " does not exist");
    }
    // RTLD_GLOBAL: MPI loads its own components, which resolve symbols of libmpi globally.
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* error = dlerror();
      Fail(ERROR_BACKEND_UNAVAILABLE, "backend \"", backend, "\" is not available: loading ", path,
           " failed: ", error != nullptr ? error : "unknown error");
    }
    loaded = true;
    return true;
  }
  return false;
}

}  // namespace collops
