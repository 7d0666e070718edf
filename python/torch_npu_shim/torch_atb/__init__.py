"""``import torch_atb`` on a machine without ATB: collops' CPU version of ATB's Python API.

Enable it as the torch_npu shim is enabled::

    export PYTHONPATH=<repo>/python/torch_npu_shim:<repo>/python:$PYTHONPATH

This module is replaced by :mod:`collops.compat.torch_atb` in ``sys.modules``; importing it also
loads collops (``torch.classes.OperationTorch``), which runs the operations.
"""

import sys

from collops.compat import torch_atb as _torch_atb

sys.modules[__name__] = _torch_atb
