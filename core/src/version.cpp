#include "collops/version.h"

// COLLOPS_VERSION is defined for this file alone, from the CMake project version.
#ifndef COLLOPS_VERSION
#error "COLLOPS_VERSION must be defined by the build (CMakeLists.txt)"
#endif

namespace collops {

const char* Version() { return COLLOPS_VERSION; }

}  // namespace collops
