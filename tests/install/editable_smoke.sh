#!/usr/bin/env bash
# The editable install a developer makes (README.md, "Install"), into a fresh venv
# (--system-site-packages for torch, --no-index so nothing is fetched), reusing a build tree:
# `import collops` from outside the checkout then runs the checkout's Python files with the
# libraries the install put into the venv, and writes nothing into the source tree.
#   tests/install/editable_smoke.sh <collops build dir>
set -euo pipefail
build=$(cd "${1:?usage: editable_smoke.sh <collops build dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/collops-editable.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --without-pip: the machine's pip, as tests/install/wheel_smoke.sh explains.
python3 -m venv --system-site-packages --without-pip "$work/venv"
(cd "$repo" && "$work/venv/bin/python" -m pip install -q --disable-pip-version-check \
  --no-build-isolation --no-index -e . -C build-dir="$build") >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; exit 1; }
cd "$work"
env -u PYTHONPATH -u COLLOPS_BUILD_DIR -u COLLOPS_LIBRARY_DIR -u ATB_HOME_PATH \
  "$work/venv/bin/python" - "$repo" "$work/venv" <<'PY'
import os
import sys

import collops

repo, venv = (os.path.realpath(p) for p in sys.argv[1:])
source = os.path.realpath(collops.__file__)
library = os.path.realpath(collops.library_path())
assert source == os.path.join(repo, "python", "collops", "__init__.py"), source
assert library.startswith(venv + os.sep), f"the library comes from {library}, not the venv"
print(f"editable: collops {collops.__version__}, Python from {os.path.dirname(source)}, "
      f"libraries from {os.path.dirname(library)}: ok")
PY
