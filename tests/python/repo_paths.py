"""Where the source tree is, for tests that start interpreters of their own."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(REPO, "python")
# `import torch_npu` / `import torchair` find the CPU shims first, then collops itself.
SHIM_PYTHONPATH = os.pathsep.join([os.path.join(PYTHON_DIR, "torch_npu_shim"), PYTHON_DIR])
