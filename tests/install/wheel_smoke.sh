#!/usr/bin/env bash
# The wheel as a user gets it: installed into a fresh venv (--system-site-packages, for the torch
# it requires; --no-index, so nothing can be fetched and a requirement the machine does not meet
# fails), then used from outside the checkout with no PYTHONPATH, COLLOPS_BUILD_DIR or
# COLLOPS_LIBRARY_DIR: wheel_smoke.py checks the import, the version and two 2-process jobs.
#   tests/install/wheel_smoke.sh <collops-*.whl>
set -euo pipefail
wheel=$(realpath "${1:?usage: wheel_smoke.sh <collops-*.whl>}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/collops-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --without-pip: the venv's own pip and setuptools (ensurepip's, older than those torch requires)
# would shadow the machine's; the machine's pip installs into the venv all the same.
python3 -m venv --system-site-packages --without-pip "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-index "$wheel"
# The version the checkout declares, which the wheel, the package and the library must all carry.
version=$(sed -n 's/^project(collops VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
cp "$repo/tests/install/wheel_smoke.py" "$work/"
cd "$work"
env -u PYTHONPATH -u COLLOPS_BUILD_DIR -u COLLOPS_LIBRARY_DIR -u ATB_HOME_PATH \
  COLLOPS_TIMEOUT="${COLLOPS_TIMEOUT:-60}" \
  "$work/venv/bin/python" wheel_smoke.py "$version" "$work/venv" "$repo"
