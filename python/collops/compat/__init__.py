"""Compatibility layers that let scripts written for Ascend's stack run on collops.

ATB test scripts ``import torch_npu`` and call ``torch_npu.npu.set_device(rank)``,
``tensor.npu()`` and ``torch.npu.synchronize()``. Two ways to make that work on CPU:

* in code: ``import collops; torch_npu = collops.compat.install_torch_npu()`` before the
  script's own ``import torch_npu`` runs (or instead of it);
* unchanged scripts: put ``<repo>/python/torch_npu_shim`` on ``PYTHONPATH`` (together with
  ``<repo>/python`` unless collops is pip-installed). ``import torch_npu`` then finds the shim,
  which installs :mod:`collops.compat.torch_npu` and loads the OperationTorch library.

The shim is opt-in on purpose: it is never installed into site-packages, so on a machine with a
real NPU stack nothing is shadowed.
"""

from .torch_npu import install as install_torch_npu

__all__ = ["install_torch_npu"]
