"""A CPU stand-in for the parts of ``torch_npu`` that ATB test scripts use.

:func:`install` makes ``import torch_npu`` return this module, adds ``torch.npu`` (the
:mod:`collops.compat.npu` namespace: ``set_device``, ``current_device``, ``synchronize``, ...),
makes ``Tensor.npu()`` / ``Module.npu()`` return the object itself, ``.to("npu:<n>")`` move to
CPU and factory calls given ``device="npu[:n]"`` make CPU tensors, registers the
torch.distributed backend "hccl" as a collops group for CPU tensors, and adds
``torch_npu.distributed``'s uneven collectives (:mod:`collops.compat.torch_npu_distributed`).
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
        raise RuntimeError(
            f"collops torch_npu shim: only ND (2) format exists on CPU, got acl format {acl_format}"
        )
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


def _cpu_for_npu(arg):
    """`arg` of a ``.to`` call, with an "npu[:n]" device (checked) made "cpu"."""
    if not _is_npu(arg):
        return arg
    npu.check_device(arg)
    return "cpu"


def _device_kwarg_on_cpu(kwargs):
    """`kwargs`, or a copy of them whose "npu[:n]" ``device`` (checked) is "cpu"."""
    if not _is_npu(kwargs.get("device")):
        return kwargs
    return dict(kwargs, device=_cpu_for_npu(kwargs["device"]))


def _moving_to_cpu(to):
    """Wraps Tensor.to / Module.to so that ``.to("npu:<n>")`` stays on CPU, as ``.npu()`` does."""
    if getattr(to, "__collops_original__", None) is not None:
        return to

    def call(self, *args, **kwargs):
        return to(self, *map(_cpu_for_npu, args), **_device_kwarg_on_cpu(kwargs))

    call.__collops_original__ = to
    call.__doc__ = to.__doc__
    return call


class _NpuDevicesOnCpu(torch.overrides.TorchFunctionMode):
    """Calls given ``device="npu[:n]"`` (``torch.ones(2, device="npu:0")``,
    ``x.new_zeros(3, device="npu")``) make CPU tensors, as ``.npu()`` and ``.to("npu")`` keep
    them on CPU. A torch function mode, as ``torch.set_default_device`` is one: it sees every
    factory call from Python, and dynamo traces through it (no graph break in compiled code).
    ``torch.device("npu:0")`` itself stays an error: making "npu" a device type would make it
    torch's accelerator, whose tensors CPU kernels cannot run."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **_device_kwarg_on_cpu(kwargs or {}))


def _enter_npu_devices_on_cpu():
    """Enters the mode for good in this thread, once (torch function modes are per thread, as
    set_default_device's is)."""
    stack = torch.overrides._get_current_function_mode_stack()
    if not any(isinstance(mode, _NpuDevicesOnCpu) for mode in stack):
        _NpuDevicesOnCpu().__enter__()


def _register_hccl():
    """``init_process_group("hccl")`` makes a collops group for CPU tensors, as it makes an HCCL
    group on an NPU."""
    import torch.distributed as dist

    from .. import _c10d_backend

    if dist.is_available() and not hasattr(dist.Backend, "HCCL"):
        dist.Backend.register_backend(
            "hccl", _c10d_backend.factory().create_backend, devices=["cpu"]
        )


def real_torch_npu():
    """The imported torch_npu module when it is not this shim (Ascend's own), else None."""
    loaded = sys.modules.get("torch_npu")
    return None if loaded is None or getattr(loaded, "_collops_shim", False) else loaded


def install():
    """Installs the shim (idempotent) and returns the module to use as ``torch_npu``."""
    this = sys.modules[__name__]
    existing = real_torch_npu()
    if existing is not None:
        raise RuntimeError(
            "collops torch_npu shim: a real torch_npu is already imported "
            f"({getattr(existing, '__file__', existing)}); not shadowing it"
        )
    sys.modules["torch_npu"] = this
    sys.modules["torch_npu.npu"] = npu
    from . import torch_npu_distributed

    sys.modules["torch_npu.distributed"] = torch_npu_distributed
    this.distributed = torch_npu_distributed
    torch.npu = npu
    torch.Tensor.npu = _tensor_npu
    torch.nn.Module.npu = _module_npu
    # Dynamo cannot inline a Python wrapper of the builtin Tensor.to (a graph break at every
    # compiled .to); in the graph as one call, AOTAutograd traces it into aten ops instead.
    torch.Tensor.to = torch.compiler.allow_in_graph(_moving_to_cpu(torch.Tensor.to))
    torch.nn.Module.to = _moving_to_cpu(torch.nn.Module.to)
    _enter_npu_devices_on_cpu()
    _register_hccl()
    return this


_collops_shim = True
