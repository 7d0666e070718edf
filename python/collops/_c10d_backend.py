"""Registers the torch.distributed backend "collops" (torch_bindings/collops_backend.h).

The backend's factory lives in libcollops_torch.so, which also exports a tiny pybind11 module
``_c10d``; it is imported from that very file (already loaded by ``torch.ops.load_library``, so
the dynamic loader hands back the same image) and its ``create_backend`` is registered for CPU
tensors. Afterwards ``dist.init_process_group("collops")`` and ``"cpu:collops,cuda:nccl"`` work.
"""

import importlib.machinery
import importlib.util
import math

import torch
import torch.distributed as dist
from torch.utils.dlpack import from_dlpack

from ._library import LIBRARY

BACKEND_NAME = "collops"
_factory = None  # the `_c10d` module, once imported (native())


def _import_factory_module(library_path):
    name = "collops._c10d"
    loader = importlib.machinery.ExtensionFileLoader(name, library_path)
    spec = importlib.util.spec_from_file_location(name, library_path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def native(library_path):
    """The `_c10d` module of the library at `library_path` (imported once)."""
    global _factory
    if _factory is None:
        _factory = _import_factory_module(library_path)
    return _factory


def register(library_path):
    """Imports the `_c10d` module and registers "collops" with torch.distributed (once per
    process; later calls do nothing)."""
    module = native(library_path)
    if not dist.is_available() or hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    dist.Backend.register_backend(BACKEND_NAME, module.create_backend, devices=["cpu"])


def factory():
    """The `_c10d` module: ``create_backend`` makes a collops backend,
    ``set_python_kernel`` and ``functional_ops`` serve torch.ops.collops (ops.py)."""
    return _factory


def default_or(group):
    """`group`, or the default group when None, with torch's own error when there is none yet
    (rather than an AttributeError on None)."""
    if group is not None:
        return group
    if not dist.is_initialized():
        raise RuntimeError(
            "Default process group has not been initialized, please make sure to "
            "call init_process_group."
        )
    return dist.group.WORLD


def default_group_name():
    """The default group's name, for torch.ops.collops calls given group_name "" (the C++
    kernels resolve every other name themselves)."""
    return default_or(None).group_name


def _collops_backend(group):
    """The collops backend object of `group`'s CPU tensors. Under TORCH_DISTRIBUTED_DEBUG=DETAIL
    torch wraps it in a ProcessGroupWrapper (which checks every collective over gloo first); the
    backend is then the wrapper's ``wrapped_pg``."""
    import torch

    backend = default_or(group)._get_backend(torch.device("cpu"))
    return getattr(backend, "wrapped_pg", backend)


def communicator_name(group=None):
    """The engine a "collops" group runs its CPU collectives on: "lccl" when its ranks share one
    host, "hccl(lccl+c10d)" when they span hosts (lccl inside each host, gloo between them), ""
    before the group's first collective. `group` defaults to the default group."""
    return _factory.communicator_name(_collops_backend(group))


def empty_shared(shape, dtype=None, group=None):
    """An uninitialised CPU tensor that the "collops" group's collectives move with one copy
    instead of two: memory from its lccl communicator's shared heap (Communicator::AllocateShared,
    docs/backends.md "Shared buffers"). An ordinary tensor where the group has no such memory
    (across hosts) or the heap (COLLOPS_SHM_HEAP_BYTES) is full. Every rank of the group must make
    the first call, which creates the communicator as a first collective would. `group` defaults to
    the default group; `dtype` to torch's default dtype."""
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    shape = tuple(shape) if isinstance(shape, (tuple, list, torch.Size)) else (shape,)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    raw = from_dlpack(_factory.empty_shared_bytes(_collops_backend(group), nbytes))
    return raw.view(dtype).view(shape)


# On import: the library is loaded (_library), and its backend is there for every module after.
register(LIBRARY)
# OperationTorch's execute, execute_out and set_varaintpack_param called from Python without
# torch's custom-class call (torch_bindings/operation_torch_methods.cpp); objects of other classes
# are left as they were.
native(LIBRARY).install_operation_torch_methods()
