#!/usr/bin/env bash
# `cmake --install` of a build tree into a temporary prefix, then what a C++ user does with it:
# every installed header compiles on its own include path alone (no private header reachable),
# and examples/cmake_consumer (find_package(collops CONFIG REQUIRED), collops::collops) builds
# and runs an AllReduce of 2 thread ranks, checking its result and the version.
#   tests/install/consumer.sh <collops build dir>     (ctest InstallConsumer runs it)
set -euo pipefail
build=$(cd "${1:?usage: consumer.sh <collops build dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/collops-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }

# The public headers and nothing else: core's collops/*.h and each op's param struct.
include=$prefix/include
private=$(find "$include" -type f ! -path "$include/collops/*.h" \
              ! -path "$include/collops/ops/ops.h" ! -path "$include/collops/ops/*/*_param.h")
[ -z "$private" ] || { echo "install: files that are not public headers: $private"; exit 1; }
for want in collops/collops.h collops/version.h collops/ops/ops.h \
            collops/ops/all_reduce/all_reduce_param.h; do
  [ -f "$include/$want" ] || { echo "install: $include/$want is missing"; exit 1; }
done
# Each header alone, with the installed include directory (and MPI's, for the MPI header) beside
# the system's: a header that needs a private one fails here.
mpi_flags=$(mpicxx --showme:compile 2>/dev/null || true)
for header in $(cd "$include" && find collops -name '*.h' | sort); do
  flags=""
  [ "$header" = collops/mpi_communicator.h ] && flags=$mpi_flags
  # shellcheck disable=SC2086  # the MPI flags are a word list
  echo "#include <$header>" | ${CXX:-c++} -std=c++17 -fsyntax-only -x c++ - -I"$include" $flags \
    2>"$work/header.log" ||
    { echo "install: <$header> does not compile on the installed headers alone:";
      cat "$work/header.log"; exit 1; }
done

cmake -S "$repo/examples/cmake_consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
grep -q "collops [0-9.]* from $prefix/lib/cmake/collops" "$work/configure.log" ||
  { echo "install: the consumer did not find the installed package:"; cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
# The consumer's compile lines: the installed include directory, never the checkout's.
if grep -q -- "-I$repo\|$repo/core\|$repo/ops" "$work/consumer/build.ninja"; then
  echo "install: the consumer's build reaches into the checkout:"
  grep -- "-I$repo\|$repo/core\|$repo/ops" "$work/consumer/build.ninja"; exit 1
fi
COLLOPS_TIMEOUT=${COLLOPS_TIMEOUT:-30} "$work/consumer/collops_consumer"
