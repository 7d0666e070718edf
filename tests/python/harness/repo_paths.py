"""Where the source tree is, for tests that start interpreters of their own."""

import os

HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
TESTS_PYTHON_DIR = os.path.dirname(HARNESS_DIR)
# Scripts run as one rank of a job (their own interpreter), not collected by pytest.
RANKS_DIR = os.path.join(TESTS_PYTHON_DIR, "ranks")
# C sources of the libraries tests LD_PRELOAD into their ranks.
PRELOAD_DIR = os.path.join(TESTS_PYTHON_DIR, "preload")
REPO = os.path.dirname(os.path.dirname(TESTS_PYTHON_DIR))
PYTHON_DIR = os.path.join(REPO, "python")
# `import torch_npu` / `import torchair` find the CPU shims first, then collops itself.
SHIM_PYTHONPATH = os.pathsep.join([os.path.join(PYTHON_DIR, "torch_npu_shim"), PYTHON_DIR])
