#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer into build-fuzz/, then runs the harnesses side by side for SECONDS,
# each from its seed corpus (tests/fuzz/corpus/<harness>/) plus what earlier runs found
# (build-fuzz/corpus/<harness>/).
#   scripts/fuzz.sh                  # every harness, 10 s each (the test command's stage)
#   scripts/fuzz.sh 1200             # a long run: 20 min
#   scripts/fuzz.sh 60 rank_table    # one harness
# A finding (crash, sanitizer report, leak, timeout, out of memory) stops the script with exit 1;
# its reproducer is in build-fuzz/findings/. Prints the executions of each harness and their sum.
# COLLOPS_FUZZ_BUILD_DIR overrides build-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(op_params rank_table segment_records json_demo)
dir=${COLLOPS_FUZZ_BUILD_DIR:-build-fuzz}

targets=()
for h in "${harnesses[@]}"; do
  [ -f "tests/fuzz/${h}_fuzzer.cpp" ] && targets+=("${h}_fuzzer")
done
COLLOPS_BUILD_TARGETS="${targets[*]}" scripts/build.sh "$dir" -DCMAKE_CXX_COMPILER=clang++ \
  -DCOLLOPS_FUZZ=ON -DCOLLOPS_SANITIZE=address,undefined -DCOLLOPS_WITH_TORCH=OFF \
  -DCOLLOPS_WITH_MPI=OFF -DCOLLOPS_BUILD_TESTS=OFF >"$dir.log" 2>&1 || { tail -50 "$dir.log"; exit 1; }

# The harnesses run side by side (each a single process), so the stage takes SECONDS, not a multiple.
# -timeout: one input may take this long (a hang is a finding); -rss_limit_mb: memory out of
# proportion to an input is one too. Thread-mode waits give up after COLLOPS_TIMEOUT.
mkdir -p "$dir/findings"
pids=()
for target in "${targets[@]}"; do
  h=${target%_fuzzer}
  mkdir -p "$dir/corpus/$h"
  COLLOPS_TIMEOUT=5 "$dir/tests/fuzz/$target" -max_total_time="$seconds" -timeout=20 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/findings/$h-" \
    "$dir/corpus/$h" "tests/fuzz/corpus/$h" >"$dir/$h.log" 2>&1 &
  pids+=($!)
done
total=0
failed=0
for i in "${!targets[@]}"; do
  h=${targets[$i]%_fuzzer}
  if ! wait "${pids[$i]}"; then
    grep -v '^#' "$dir/$h.log" | tail -60
    echo "fuzz: $h found a defect; reproducer: $(ls -t "$dir/findings/$h-"* 2>/dev/null | head -1)"
    failed=1
    continue
  fi
  runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$dir/$h.log")
  echo "fuzz: $h: $runs executions in $seconds s, no finding"
  total=$((total + runs))
done
[ "$failed" -eq 0 ] || exit 1
echo "fuzz: $total executions in all"
