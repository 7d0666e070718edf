#!/usr/bin/env bash
# Formats every C/C++ source with the checked-in .clang-format and the Python with ruff format, and
# lints the Python with ruff check (pyproject.toml's [tool.ruff], fixing what it can); --check only
# reports, and also checks that nothing in the repository points a reader outside it
# (scripts/check_references.py).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.inc' '*.cc')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror "${files[@]}"
  echo "format: ${#files[@]} files clean"
  ruff format --check --quiet . && ruff check --quiet . && echo "ruff: Python formatted and clean"
  python3 scripts/check_references.py
else
  clang-format -i "${files[@]}"
  ruff format --quiet .
  ruff check --fix --quiet .
fi
