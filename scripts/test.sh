#!/usr/bin/env bash
# Every test on a fresh machine: set up, then
#   1. formatting (clang-format, .clang-format at the root),
#   2. release build with the torch binding: ctest (C++ gtest) and pytest,
#   3. AddressSanitizer + UndefinedBehaviorSanitizer build: ctest,
#   4. ThreadSanitizer build: ctest of the thread-mode tests (label `thread`, tests/README.md),
#   5. the libFuzzer harnesses (tests/fuzz/, clang + ASan + UBSan): 10 s each, side by side.
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
scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build.log 2>&1 || { tail -50 build.log; exit 1; }
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
