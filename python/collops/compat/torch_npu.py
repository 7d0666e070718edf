"""A CPU stand-in for the parts of ``torch_npu`` that ATB test scripts use.

:func:`install` makes ``import torch_npu`` return this module, adds ``torch.npu`` (the
:mod:`collops.compat.npu` namespace: ``set_device``, ``current_device``, ``synchronize``, ...), and
makes ``Tensor.npu()`` / ``Module.npu()`` return the object itself on CPU. Tensors therefore stay
CPU tensors, which is what OperationTorch works on.
"""
import sys

import torch

from . import npu

__all__ = ["npu", "install", "npu_format_cast", "get_npu_format"]

_ACL_FORMAT_ND = 2


def npu_format_cast(tensor, acl_format):
    """ATB scripts cast to ND (2) before running ops; on CPU every tensor already is ND."""
    if int(acl_format) != _ACL_FORMAT_ND:
        raise RuntimeError(f"collops torch_npu shim: only ND (2) format exists on CPU, "
                           f"got acl format {acl_format}")
    return tensor


def get_npu_format(tensor):
    """Every CPU tensor is ND."""
    return _ACL_FORMAT_ND


def _tensor_npu(self, device=None, non_blocking=False, memory_format=None):
    """Tensor.npu(): the tensor itself, which stays on CPU."""
    npu.check_device(device)
    return self


def _module_npu(self, device=None):
    """Module.npu(): the module itself, on CPU."""
    npu.check_device(device)
    return self


def install():
    """Installs the shim (idempotent) and returns the module to use as ``torch_npu``."""
    this = sys.modules[__name__]
    existing = sys.modules.get("torch_npu")
    if existing is not None and existing is not this and not getattr(existing, "_collops_shim",
                                                                       False):
        raise RuntimeError("collops torch_npu shim: a real torch_npu is already imported "
                           f"({getattr(existing, '__file__', existing)}); not shadowing it")
    sys.modules["torch_npu"] = this
    sys.modules["torch_npu.npu"] = npu
    torch.npu = npu
    torch.Tensor.npu = _tensor_npu
    torch.nn.Module.npu = _module_npu
    return this


_collops_shim = True
