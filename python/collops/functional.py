"""Python wrappers over ``torch.ops.collops.*`` with torch-style ``group=None`` defaults.

Every function returns a new tensor and is safe inside ``torch.compile(fullgraph=True)``. `group`
is a ProcessGroup, a group name, or None for the default group; `op` is a reduce-op name
("sum", "avg", "prod", "max", "min") or a ``dist.ReduceOp``. Sizes count rows (dim 0).
"""

import torch

from . import ops as _ops  # defines torch.ops.collops.* and their reduce-op names
from ._c10d_backend import default_or

__all__ = [
    "group_name",
    "all_reduce",
    "all_gather",
    "all_gather_v",
    "reduce_scatter",
    "reduce_scatter_v",
    "all_to_all",
    "all_to_all_v",
    "broadcast",
    "quant_all_reduce",
]


def group_name(group=None):
    """The registered name of `group` (None = the default group), as the ops take it."""
    if isinstance(group, str):
        return group
    return default_or(group).group_name


def _op_name(op):
    """`op` as the ops take it: a name as given, or the first name ops.REDUCE_OPS has for a
    ``dist.ReduceOp`` (compared with ==, which ReduceOp objects and their enum values share)."""
    if isinstance(op, str):
        return op
    for name, value in _ops.REDUCE_OPS.items():
        if op == value:
            return name
    raise ValueError(f"collops.functional: unsupported reduce op {op}")


def all_reduce(x, op="sum", group=None):
    """Reduction of `x` over the group's ranks."""
    return torch.ops.collops.all_reduce(x, _op_name(op), group_name(group))


def all_gather(x, group=None):
    """Every rank's `x` concatenated along dim 0, in rank order."""
    return torch.ops.collops.all_gather(x, group_name(group))


def all_gather_v(x, sizes, group=None):
    """As all_gather, but rank i contributes sizes[i] rows (sizes[rank] == x.shape[0])."""
    return torch.ops.collops.all_gather_v(x, list(sizes), group_name(group))


def reduce_scatter(x, op="sum", group=None):
    """Rank r's equal block (dim 0) of the reduction of `x` over the ranks."""
    return torch.ops.collops.reduce_scatter(x, _op_name(op), group_name(group))


def reduce_scatter_v(x, sizes, op="sum", group=None):
    """Rows split as `sizes` (sum = x.shape[0]); rank r gets the reduction of its sizes[r] rows."""
    return torch.ops.collops.reduce_scatter_v(x, list(sizes), _op_name(op), group_name(group))


def all_to_all(x, group=None):
    """x split equally along dim 0; block j goes to rank j, and the result is ordered by sender."""
    return torch.ops.collops.all_to_all(x, group_name(group))


def all_to_all_v(x, output_split_sizes, input_split_sizes, group=None):
    """``dist.all_to_all_single`` with split sizes (rows), as a value."""
    return torch.ops.collops.all_to_all_v(
        x, list(output_split_sizes), list(input_split_sizes), group_name(group)
    )


def broadcast(x, src=0, group=None):
    """`x` of group rank `src`, on every rank."""
    return torch.ops.collops.broadcast(x, int(src), group_name(group))


def quant_all_reduce(x, scale, offset, quant_type=1, out_dtype=torch.float16, group=None):
    """(sum over the ranks of int8 `x` + R * offset) * scale, in `out_dtype` (float16, bfloat16
    or float32), with x's shape: AllReduceOperation with quantType `quant_type` (1 per tensor:
    scale float16 [1]; 2 per channel: scale float16 [n] or [1, n], n = x.shape[-1], a multiple of
    16), offset float16 [1]. The int8 data crosses the wire as int8; every rank gets the same
    bits. A broken rule raises ValueError naming the argument."""
    return torch.ops.collops.quant_all_reduce(
        x, scale, offset, int(quant_type), out_dtype, group_name(group)
    )
