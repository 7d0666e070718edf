#!/bin/sh
# run_if_built.sh BINARY COMMAND...: runs COMMAND if BINARY was built, else exits 77 (ctest's skip
# code here), naming the target. The sanitizer builds of scripts/test.sh build collops_tests only.
if [ ! -x "$1" ]; then
  echo "$1 is not built (ninja $(basename "$1")): skipped"
  exit 77
fi
shift
exec "$@"
