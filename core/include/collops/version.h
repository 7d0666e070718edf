// The version of the collops library, as the CMake project declares it (project(collops VERSION
// ...)); the Python package's collops.__version__ and the wheel carry the same string.
#pragma once

namespace collops {

/// "MAJOR.MINOR.PATCH" of the libcollops.so this program runs with (not the headers it was
/// compiled against: the installed CMake package's collops_VERSION says that).
const char* Version();

}  // namespace collops
