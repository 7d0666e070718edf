#!/usr/bin/env bash
# Configures and builds collops into $1 (default: build), passing any further arguments to cmake.
#   scripts/build.sh                               # release build with the torch binding
#   scripts/build.sh build-asan -DCOLLOPS_SANITIZE=address,undefined -DCOLLOPS_WITH_TORCH=OFF
# COLLOPS_BUILD_TARGETS (space-separated) limits what ninja builds; COLLOPS_BUILD_JOBS sets -j.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
mkdir -p "$dir"
# With -DCMAKE_CXX_COMPILER_LAUNCHER=ccache: ccache caches the compiles that use a precompiled
# header only when told to overlook the header's macros and __DATE__/__TIME__ (used nowhere here).
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}
cmake -S . -B "$dir" -G Ninja "$@" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
# shellcheck disable=SC2086  # targets are a word list on purpose
ninja -C "$dir" ${COLLOPS_BUILD_JOBS:+-j"$COLLOPS_BUILD_JOBS"} ${COLLOPS_BUILD_TARGETS:-}
