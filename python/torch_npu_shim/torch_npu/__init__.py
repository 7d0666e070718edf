"""``import torch_npu`` on a machine without an NPU: the collops CPU shim.

Enable it for unchanged ATB scripts with::

    export PYTHONPATH=<repo>/python/torch_npu_shim:<repo>/python:$PYTHONPATH

Importing it loads collops (so ``torch.classes.OperationTorch.OperationTorch`` exists) and
replaces this module with :mod:`collops.compat.torch_npu` in ``sys.modules``.
"""

import sys

_collops_shim = True  # lets install() replace this module rather than refuse: set before it runs

import collops  # noqa: E402,F401  (after the flag above; loads libcollops_torch.so)
from collops.compat import torch_npu as _shim  # noqa: E402  (after the flag above)

sys.modules[__name__] = _shim.install()
