"""``patch_torch_distributed()``: TorchAir's ``patch_for_hcom``, for more APIs.

After the call, these ``torch.distributed`` functions, when traced by ``torch.compile``, become
graph-captured ``torch.ops.collops.*`` ops (no graph break) whose results are copied into the
caller's tensors, exactly as the eager calls would fill them (a rank outside the group gets
torch's own call, as without the patch): all_reduce, all_gather,
all_gather_single and reduce_scatter_single (and their names before torch 2.13,
all_gather_into_tensor and reduce_scatter_tensor), all_to_all_single (uneven splits too),
all_to_all, broadcast. Outside compilation, and for ``async_op=True``, the original functions run
unchanged.
DeepSpeed's ``deepspeed.comm`` wrappers of the same names are patched too when it is importable.
"""
import functools
import inspect

import torch
import torch.distributed as dist

from . import functional as F

__all__ = ["patch_torch_distributed", "unpatch_torch_distributed", "PATCHED"]

PATCHED = ("all_reduce", "all_gather", "all_gather_single", "all_gather_into_tensor",
           "reduce_scatter_single", "reduce_scatter_tensor", "all_to_all_single", "all_to_all",
           "broadcast")
_ORIGINALS = {}


def _all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False, **_):
    tensor.copy_(F.all_reduce(tensor, op, group))


def _all_gather(tensor_list, tensor, group=None, async_op=False, **_):
    # Flattened, so per-rank shapes may differ as long as each rank's list agrees.
    sizes = [t.numel() for t in tensor_list]
    out = F.all_gather_v(tensor.reshape(-1), sizes, group)
    for dst, src in zip(tensor_list, out.split(sizes)):
        dst.copy_(src.view(dst.shape))


def _all_gather_single(output_tensor, input_tensor, group=None, async_op=False, **_):
    output_tensor.copy_(F.all_gather(input_tensor.reshape(-1), group).view(output_tensor.shape))


def _reduce_scatter_single(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False, **_):
    output.copy_(F.reduce_scatter(input.reshape(-1), op, group).view(output.shape))


def _all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                       group=None, async_op=False, **_):
    world = dist.get_world_size(group)
    out_splits = (list(output_split_sizes) if output_split_sizes is not None
                  else [output.shape[0] // world] * world)
    in_splits = (list(input_split_sizes) if input_split_sizes is not None
                 else [input.shape[0] // world] * world)
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
    "all_reduce": _all_reduce, "all_gather": _all_gather,
    "all_gather_single": _all_gather_single, "all_gather_into_tensor": _all_gather_single,
    "reduce_scatter_single": _reduce_scatter_single, "reduce_scatter_tensor": _reduce_scatter_single,
    "all_to_all_single": _all_to_all_single,
    "all_to_all": _all_to_all, "broadcast": _broadcast,
}


def _dispatching(name, original):
    compiled = _COMPILED[name]
    # Where async_op stands among the positional arguments: `dist.all_reduce(t, op, None, True)`
    # asks for a Work as much as the keyword does.
    params = list(inspect.signature(original).parameters)
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
        outside = argument(args, kwargs, "group", group_at, None) is dist.GroupMember.NON_GROUP_MEMBER
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


def patch_torch_distributed():
    """Routes compiled calls of the dist.* functions in PATCHED to collops ops. Idempotent."""
    _patch_module(dist, "torch.distributed")
    try:
        import deepspeed.comm as ds_comm
    except ImportError:
        return
    _patch_module(ds_comm, "deepspeed.comm")


def unpatch_torch_distributed():
    """Restores every function patch_torch_distributed replaced."""
    for (_, name), (module, fn) in list(_ORIGINALS.items()):
        setattr(module, name, fn)
    _ORIGINALS.clear()
