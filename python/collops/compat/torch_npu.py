"""A CPU stand-in for the parts of ``torch_npu`` that ATB test scripts use.

:func:`install` makes ``import torch_npu`` return this module, adds ``torch.npu`` (the
:mod:`collops.compat.npu` namespace: ``set_device``, ``current_device``, ``synchronize``, ...),
makes ``Tensor.npu()`` / ``Module.npu()`` return the object itself and ``.to("npu:<n>")`` move to
CPU, and registers the torch.distributed backend "hccl" as a collops group for CPU tensors.
Tensors therefore stay CPU tensors, which is what OperationTorch and collops groups work on.
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


def _is_npu(device):
    return isinstance(device, str) and (device == "npu" or device.startswith("npu:"))


def _on_cpu(args, kwargs):
    """`args`/`kwargs` of a ``.to`` call with an "npu[:n]" device (checked) made "cpu"."""
    if not any(_is_npu(a) for a in args) and not _is_npu(kwargs.get("device")):
        return args, kwargs
    for device in [*args, kwargs.get("device")]:
        if _is_npu(device):
            npu.check_device(device)
    args = tuple("cpu" if _is_npu(a) else a for a in args)
    if _is_npu(kwargs.get("device")):
        kwargs = dict(kwargs, device="cpu")
    return args, kwargs


def _moving_to_cpu(to):
    """Wraps Tensor.to / Module.to so that ``.to("npu:<n>")`` stays on CPU, as ``.npu()`` does."""
    if getattr(to, "__collops_original__", None) is not None:
        return to

    def call(self, *args, **kwargs):
        args, kwargs = _on_cpu(args, kwargs)
        return to(self, *args, **kwargs)

    call.__collops_original__ = to
    call.__doc__ = to.__doc__
    return call


def _register_hccl():
    """``init_process_group("hccl")`` makes a collops group for CPU tensors, as it makes an HCCL
    group on an NPU."""
    import torch.distributed as dist

    from .. import _c10d_backend
    if dist.is_available() and not hasattr(dist.Backend, "HCCL"):
        dist.Backend.register_backend("hccl", _c10d_backend.factory().create_backend,
                                      devices=["cpu"])


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
    # Dynamo cannot inline a Python wrapper of the builtin Tensor.to (a graph break at every
    # compiled .to); in the graph as one call, AOTAutograd traces it into aten ops instead.
    torch.Tensor.to = torch.compiler.allow_in_graph(_moving_to_cpu(torch.Tensor.to))
    torch.nn.Module.to = _moving_to_cpu(torch.nn.Module.to)
    _register_hccl()
    return this


_collops_shim = True
