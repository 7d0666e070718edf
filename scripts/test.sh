#!/usr/bin/env bash
# Every test on a fresh machine: set up, then
#   1. formatting (scripts/format.sh --check),
#   2. release build with the torch binding: ctest (C++ gtest, the installed CMake package and
#      examples/cmake_consumer) and pytest,
#   3. the wheel, packaged from that same build tree (nothing compiled twice), installed into a
#      fresh venv and used from outside the checkout; no step has written into the source tree;
#      an editable install of the same tree, used the same way,
#   4. AddressSanitizer + UndefinedBehaviorSanitizer build: ctest,
#   5. ThreadSanitizer build: ctest of the thread-mode tests (label `thread`, tests/README.md),
#   6. the libFuzzer harnesses (tests/fuzz/, clang + ASan + UBSan): 10 s each, side by side.
# Exits non-zero as soon as a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export COLLOPS_BUILD_JOBS=${COLLOPS_BUILD_JOBS:-2}

# Each step prints the seconds elapsed so far: CI has a time budget, and this shows what spends it.
step() { echo; echo "=== $* (at ${SECONDS} s)"; }

step "format check"
scripts/format.sh --check

step "release build"
# Torch and tests ON whatever the tree had (scripts/demo.sh makes `build` without torch).
scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLLOPS_WITH_TORCH=ON \
  -DCOLLOPS_BUILD_TESTS=ON >build.log 2>&1 || { tail -50 build.log; exit 1; }
step "ctest (release)"
# Not ours: gcc's temporaries (ccXXXXXX.s) come and go with any build running beside the suite;
# torch's compile cache and pytest's base temp directory are made once per machine and kept.
snapshot() {
  ls -A /dev/shm; echo ---
  ls -A /tmp | { grep -Ev '^(cc[[:alnum:]]{6}\.[a-z]+|torchinductor_.*|pytest-of-.*)$' || true; }
  echo ---; cat /proc/sysvipc/shm /proc/sysvipc/sem
}
snapshot >build/residue.before
# BenchOptions is tests/python/bench/test_bench_options.py, which pytest runs next on this build.
(cd build && ctest -j2 --output-on-failure --timeout 300 -E '^BenchOptions$')
step "pytest"
COLLOPS_BUILD_DIR="$PWD/build" python3 -m pytest tests/python -q
# No shared-memory or temp-file residue after both suites, SIGKILL tests included: nothing a
# communicator creates may outlive its processes.
snapshot >build/residue.after
diff build/residue.before build/residue.after || { echo "test suites left residue (above)"; exit 1; }

step "wheel (scikit-build-core, from the release tree)"
# build-dir=build: the backend configures and builds the tree the tests ran on (pyproject.toml
# sets the same build type), finds it up to date, and installs its runtime component.
rm -rf build/dist
python3 -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir="$PWD/build" -w build/dist . >build/wheel.log 2>&1 || { tail -50 build/wheel.log; exit 1; }
# Builds and tests write only into ignored build directories, never into the source tree.
if [ -n "$(git status --porcelain)" ]; then
  echo "the build or the tests wrote into the source tree:"; git status --porcelain; exit 1
fi
step "installed wheel, outside the checkout"
tests/install/wheel_smoke.sh build/dist/collops-*.whl
step "editable install, outside the checkout"
tests/install/editable_smoke.sh build

step "ASan+UBSan build"
COLLOPS_BUILD_TARGETS="collops_tests collops_mpi_tests collops_mpi_plugin_tests collops_json_demo" scripts/build.sh build-asan -DCOLLOPS_SANITIZE=address,undefined -DCOLLOPS_WITH_TORCH=OFF \
  >build-asan.log 2>&1 || { tail -50 build-asan.log; exit 1; }
step "ctest (ASan+UBSan)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -j2 --output-on-failure --timeout 600)

step "TSan build"
COLLOPS_BUILD_TARGETS="collops_tests collops_json_demo" scripts/build.sh build-tsan -DCOLLOPS_SANITIZE=thread -DCOLLOPS_WITH_TORCH=OFF \
  >build-tsan.log 2>&1 || { tail -50 build-tsan.log; exit 1; }
step "ctest (TSan, thread-mode tests)"
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest -j2 --output-on-failure --timeout 600 -L '^thread$')

step "libFuzzer harnesses (clang build, then 10 s side by side)"
scripts/fuzz.sh 10

step "done: every stage passed"
