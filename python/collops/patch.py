"""``patch_torch_distributed()``: TorchAir's ``patch_for_hcom``, for more APIs.

After the call, these ``torch.distributed`` functions, when traced by ``torch.compile``, become
graph-captured ``torch.ops.collops.*`` ops (no graph break) whose results are copied into the
caller's tensors, exactly as the eager calls would fill them (a rank outside the group gets
torch's own call, as without the patch): all_reduce, all_gather,
all_gather_single and reduce_scatter_single (and their names before torch 2.13,
all_gather_into_tensor and reduce_scatter_tensor), all_to_all_single (uneven splits too),
all_to_all, broadcast. Outside compilation, and for ``async_op=True``, the original functions run
unchanged.
DeepSpeed's ``deepspeed.comm`` wrappers of the same names are patched too: at once if it is
imported, else by an import hook as soon as it is (the patch never imports DeepSpeed itself).
"""

import enum
import functools
import importlib.abc
import inspect
import sys

import torch
import torch.distributed as dist

from . import functional as F

__all__ = ["patch_torch_distributed", "unpatch_torch_distributed", "PATCHED"]

PATCHED = (
    "all_reduce",
    "all_gather",
    "all_gather_single",
    "all_gather_into_tensor",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "all_to_all",
    "broadcast",
)
_ORIGINALS = {}
_DEEPSPEED_COMM = "deepspeed.comm"


def _reduce_op(op):
    """`op` as a dist.ReduceOp: frameworks' own ReduceOp enums (deepspeed.comm's) name their
    members as dist.ReduceOp does."""
    if not isinstance(op, enum.Enum):
        return op
    if not hasattr(dist.ReduceOp, op.name):
        raise ValueError(
            f"collops.patch_torch_distributed: reduce op {op} has no dist.ReduceOp of its name"
        )
    return getattr(dist.ReduceOp, op.name)


def _all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False, **_):
    tensor.copy_(F.all_reduce(tensor, _reduce_op(op), group))


def _all_gather(tensor_list, tensor, group=None, async_op=False, **_):
    # Flattened, so per-rank shapes may differ as long as each rank's list agrees.
    sizes = [t.numel() for t in tensor_list]
    out = F.all_gather_v(tensor.reshape(-1), sizes, group)
    for dst, src in zip(tensor_list, out.split(sizes)):
        dst.copy_(src.view(dst.shape))


def _all_gather_single(output_tensor, input_tensor, group=None, async_op=False, **_):
    output_tensor.copy_(F.all_gather(input_tensor.reshape(-1), group).view(output_tensor.shape))


def _reduce_scatter_single(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False, **_):
    output.copy_(F.reduce_scatter(input.reshape(-1), _reduce_op(op), group).view(output.shape))


def _all_to_all_single(
    output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False, **_
):
    world = dist.get_world_size(group)
    out_splits = (
        list(output_split_sizes)
        if output_split_sizes is not None
        else [output.shape[0] // world] * world
    )
    in_splits = (
        list(input_split_sizes)
        if input_split_sizes is not None
        else [input.shape[0] // world] * world
    )
    output.copy_(F.all_to_all_v(input, out_splits, in_splits, group))


def _all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False, **_):
    in_sizes = [t.numel() for t in input_tensor_list]
    out_sizes = [t.numel() for t in output_tensor_list]
    flat = torch.cat([t.reshape(-1) for t in input_tensor_list])
    out = F.all_to_all_v(flat, out_sizes, in_sizes, group)
    for dst, src in zip(output_tensor_list, out.split(out_sizes)):
        dst.copy_(src.view(dst.shape))


def _broadcast(tensor, src=None, group=None, async_op=False, group_src=None, **_):
    if group_src is None:
        group_src = src if group is None else dist.get_group_rank(group, src)
    tensor.copy_(F.broadcast(tensor, group_src, group))


_COMPILED = {
    "all_reduce": _all_reduce,
    "all_gather": _all_gather,
    "all_gather_single": _all_gather_single,
    "all_gather_into_tensor": _all_gather_single,
    "reduce_scatter_single": _reduce_scatter_single,
    "reduce_scatter_tensor": _reduce_scatter_single,
    "all_to_all_single": _all_to_all_single,
    "all_to_all": _all_to_all,
    "broadcast": _broadcast,
}


def _dispatching(name, original):
    compiled = _COMPILED[name]
    # Where async_op stands among the positional arguments: `dist.all_reduce(t, op, None, True)`
    # asks for a Work as much as the keyword does. The replacement's parameters say it, since it
    # takes the arguments as given (a wrapper such as deepspeed.comm's takes *args, **kwargs).
    params = list(inspect.signature(compiled).parameters)
    async_at = params.index("async_op") if "async_op" in params else None
    group_at = params.index("group") if "group" in params else None

    def argument(args, kwargs, name, at, default):
        if at is not None and len(args) > at:
            return args[at]
        return kwargs.get(name, default)

    @functools.wraps(original)
    def call(*args, **kwargs):
        async_op = argument(args, kwargs, "async_op", async_at, False)
        # A rank outside the group has no group name for the ops: torch's own call handles it
        # (eagerly it returns None with a warning).
        outside = (
            argument(args, kwargs, "group", group_at, None) is dist.GroupMember.NON_GROUP_MEMBER
        )
        if torch.compiler.is_compiling() and not async_op and not outside:
            return compiled(*args, **kwargs)
        return original(*args, **kwargs)

    call.__collops_original__ = original
    return call


def _patch_module(module, key):
    for name in PATCHED:
        fn = getattr(module, name, None)
        if fn is None or hasattr(fn, "__collops_original__"):
            continue
        _ORIGINALS[(key, name)] = (module, fn)
        setattr(module, name, _dispatching(name, fn))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches module `name` right after its code has run, when it is imported after the patch.
    Finds nothing itself: it asks the finders after it for the module and wraps the loader."""

    def __init__(self, name):
        self.name = name

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is None:
                continue
            if hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader, self.name)
            return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    """`loader`, then the patch of the module it ran. The module keeps `loader` as its own."""

    def __init__(self, loader, key):
        self.loader = loader
        self.key = key

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _patch_module(module, self.key)


_HOOK = _PatchOnImport(_DEEPSPEED_COMM)


def patch_torch_distributed():
    """Routes compiled calls of the dist.* functions in PATCHED to collops ops, and those of
    deepspeed.comm now or when it is imported. Idempotent."""
    _patch_module(dist, "torch.distributed")
    ds_comm = sys.modules.get(_DEEPSPEED_COMM)
    if ds_comm is not None:
        _patch_module(ds_comm, _DEEPSPEED_COMM)
    if _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)


def unpatch_torch_distributed():
    """Restores every function patch_torch_distributed replaced, and patches no later import."""
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)
    for (_, name), (module, fn) in list(_ORIGINALS.items()):
        setattr(module, name, fn)
    _ORIGINALS.clear()
