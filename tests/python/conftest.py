"""Shared pytest set-up for tests/python.

Puts tests/python/harness on sys.path (the tests import its modules by name), makes
``import collops`` work from the source tree (``<repo>/python`` on sys.path when collops is
not pip-installed) and keeps collops' own waits short in tests. Which library is loaded is
decided by collops itself: COLLOPS_LIBRARY_DIR, else COLLOPS_BUILD_DIR/torch_bindings/lib, else
an installed package's lib/. Nothing here imports collops, so tests that do not need the binding still
run when it is not built.
"""

import os
import sys

# The shared harness modules (rank_harness, golden_harness, repo_paths, ...) import by name.
HARNESS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness")
if HARNESS_DIR not in sys.path:
    sys.path.insert(0, HARNESS_DIR)

from repo_paths import PYTHON_DIR  # noqa: E402

if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

# A rank that never arrives must fail the test in a minute, not after the 300 s default.
os.environ.setdefault("COLLOPS_TIMEOUT", "60")
