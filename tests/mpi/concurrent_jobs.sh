#!/bin/sh
# concurrent_jobs.sh MPIEXEC... -- BINARY: two mpirun jobs of the same test at once on this host,
# neither told a COLLOPS_JOB_ID. Both must pass: each job's lccl ranks take their job key from
# mpirun (PMIX_NAMESPACE), so the jobs never claim each other's ranks. The test in BINARY
# (MpiJobKeyStandalone.*) holds its communicator until the other job's is up, so the two always
# overlap.
set -u
dir=$(mktemp -d "${TMPDIR:-/tmp}/collops-concurrent-jobs.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
unset COLLOPS_JOB_ID MASTER_ADDR MASTER_PORT
export COLLOPS_TEST_CONCURRENT_JOBS_DIR="$dir"
"$@" --gtest_filter='MpiJobKeyStandalone.*' > "$dir/a.log" 2>&1 &
a=$!
"$@" --gtest_filter='MpiJobKeyStandalone.*' > "$dir/b.log" 2>&1 &
b=$!
wait $a; ra=$?
wait $b; rb=$?
echo "--- job a (exit $ra)"; cat "$dir/a.log"
echo "--- job b (exit $rb)"; cat "$dir/b.log"
[ $ra -eq 0 ] && [ $rb -eq 0 ]
