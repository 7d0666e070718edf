"""``torch.ops.collops.*``: functional collectives that ``torch.compile(fullgraph=True)`` captures.

Each op returns a new tensor (inputs are never mutated), has a fake kernel for tracing, and is
registered as an *ordered effect* (``torch.library._register_effectful_op``): the compiler
threads an effect token through every collops collective, so none is ever dropped as dead code
or reordered against another -- ranks must issue collectives in the same order. The one
exception, ``all_reduce_``, reduces `x` in place and returns it (no output allocated, as
DeepSpeed's ``inference_all_reduce_``); under torch.compile it becomes ``all_reduce`` and a copy
into `x`, so it is ordered as the others are.

``group_name`` names a torch ProcessGroup (``group.group_name``; "" the default group); any
backend works. ``all_reduce`` and ``all_reduce_`` default to "sum" on the default group:
``all_reduce_(y)`` is called as DeepSpeed's ``inference_all_reduce_(y)`` is.
``inference_all_reduce_`` and ``inference_all_reduce`` are DeepSpeed's own shapes of the two (x
alone: "sum" on the default group), so ``torch.ops.deepspeed.inference_all_reduce_(y)`` becomes
``torch.ops.collops.inference_all_reduce_(y)``; the same kernels run them, without the defaults
torch fills in on every call of the others. The eager kernels and the autograd dispatch are C++
(torch_bindings/functional_ops.cpp): they check every call's arguments, run calls on a "collops"
group's CPU tensors on its communicator directly, and hand the rest to the Python kernels below,
which run the group's own c10d collectives. Uneven ops on other backends (gloo, nccl) are built
from even ones there by padding to the largest chunk, since those backends require equal sizes.
Reduce ops: "sum", "avg", "prod"/"product", "max", "min". Sizes and splits are counts of rows
(dim 0). ``quant_all_reduce`` is AllReduceOperation with quantType (docs/operations.md): int8 `x`
summed over the ranks and dequantised to `out_dtype`, the int8 data moving as int8.
"""

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _resolve_process_group

from . import _c10d_backend

__all__ = ["SCHEMAS", "REDUCE_OPS", "resolve_group", "is_collops_group"]

_NS = "collops"

#: The schema of every op (docs/distributed.md, "Functional ops (torch.compile)").
SCHEMAS = {
    "all_reduce": 'all_reduce(Tensor x, str op="sum", str group_name="") -> Tensor',
    "all_reduce_": 'all_reduce_(Tensor(a!) x, str op="sum", str group_name="") -> Tensor(a!)',
    "inference_all_reduce": "inference_all_reduce(Tensor self) -> Tensor",
    "inference_all_reduce_": "inference_all_reduce_(Tensor(a!) self) -> Tensor(a!)",
    "all_gather": "all_gather(Tensor x, str group_name) -> Tensor",
    "all_gather_v": "all_gather_v(Tensor x, SymInt[] sizes, str group_name) -> Tensor",
    "reduce_scatter": "reduce_scatter(Tensor x, str op, str group_name) -> Tensor",
    "reduce_scatter_v": "reduce_scatter_v(Tensor x, SymInt[] sizes, str op, str group_name) -> Tensor",
    "all_to_all": "all_to_all(Tensor x, str group_name) -> Tensor",
    "all_to_all_v": "all_to_all_v(Tensor x, SymInt[] output_split_sizes, "
    "SymInt[] input_split_sizes, str group_name) -> Tensor",
    "broadcast": "broadcast(Tensor x, int src, str group_name) -> Tensor",
    "quant_all_reduce": "quant_all_reduce(Tensor x, Tensor scale, Tensor offset, int quant_type, "
    "ScalarType out_dtype, str group_name) -> Tensor",
}

#: Every reduce-op name the ops take (lower-cased first), and the ReduceOp it means.
REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "prod": dist.ReduceOp.PRODUCT,
    "product": dist.ReduceOp.PRODUCT,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}


def resolve_group(group_name):
    """The ProcessGroup named `group_name` ("" = the default group)."""
    if not group_name:
        return dist.group.WORLD
    return _resolve_process_group(group_name)


def is_collops_group(pg):
    """True when `pg` serves CPU tensors with the collops backend (uneven lists run natively)."""
    return "collops" in str(dist.get_backend(pg))


def _reduce_op(op):
    try:
        return REDUCE_OPS[op.lower()]
    except KeyError:
        raise ValueError(f"collops: unknown reduce op {op!r}; use one of {sorted(REDUCE_OPS)}")


def _rows(x, what):
    """x.shape[0], the rows the row-wise ops gather and scatter; a 0-dim x has none."""
    if x.dim() == 0:
        raise ValueError(
            f"collops.{what}: needs a tensor of at least 1 dim (its rows are what "
            "moves), got a 0-dim tensor"
        )
    return x.shape[0]


def _padded(x, rows):
    """`x` with zero rows appended up to `rows` rows."""
    if x.shape[0] == rows:
        return x.contiguous()
    out = x.new_zeros((rows, *x.shape[1:]))
    out[: x.shape[0]] = x
    return out


def _eager(name):
    """dist.<name> as torch defines it. The kernels below run while torch.compile traces too
    (on constant inputs), where patch_torch_distributed()'s wrappers would route them straight
    back to these ops, without end."""
    fn = getattr(dist, name, None)
    return getattr(fn, "__collops_original__", fn)


# torch 2.13 renamed all_gather_into_tensor / reduce_scatter_tensor to *_single and deprecated
# the old names; the library must not warn on its users' behalf, nor fail on older torch.
def _gather_into(out, x, pg):
    gather = _eager("all_gather_single") or _eager("all_gather_into_tensor")
    gather(out, x, group=pg)


def _reduce_scatter_into(out, x, op, pg):
    scatter = _eager("reduce_scatter_single") or _eager("reduce_scatter_tensor")
    scatter(out, x, op=_reduce_op(op), group=pg)


def _all_reduce(x, op="sum", group_name=""):
    out = x.clone(memory_format=torch.contiguous_format)
    _eager("all_reduce")(out, op=_reduce_op(op), group=resolve_group(group_name))
    return out


def _all_reduce_(x, op="sum", group_name=""):
    _eager("all_reduce")(x, op=_reduce_op(op), group=resolve_group(group_name))
    return x


def _all_gather(x, group_name):
    pg = resolve_group(group_name)
    out = x.new_empty((dist.get_world_size(pg) * x.shape[0], *x.shape[1:]))
    _gather_into(out, x.contiguous(), pg)
    return out


# The kernels below get only calls the C++ kernels checked (functional_ops.cpp), and none on a
# collops group's CPU tensors, which those run themselves.
def _all_gather_v(x, sizes, group_name):
    pg = resolve_group(group_name)
    world = dist.get_world_size(pg)
    out = x.new_empty((sum(sizes), *x.shape[1:]))
    if is_collops_group(pg):
        _eager("all_gather")(list(out.split(list(sizes))), x.contiguous(), group=pg)
        return out
    most = max(sizes)
    gathered = x.new_empty((world * most, *x.shape[1:]))
    _gather_into(gathered, _padded(x, most), pg)
    return torch.cat([gathered[i * most : i * most + n] for i, n in enumerate(sizes)])


def _reduce_scatter(x, op, group_name):
    pg = resolve_group(group_name)
    out = x.new_empty((x.shape[0] // dist.get_world_size(pg), *x.shape[1:]))
    _reduce_scatter_into(out, x.contiguous(), op, pg)
    return out


def _reduce_scatter_v(x, sizes, op, group_name):
    pg = resolve_group(group_name)
    rank = dist.get_rank(pg)
    out = x.new_empty((sizes[rank], *x.shape[1:]))
    if is_collops_group(pg):
        _eager("reduce_scatter")(out, list(x.split(list(sizes))), op=_reduce_op(op), group=pg)
        return out
    most = max(sizes)
    padded = torch.cat([_padded(c, most) for c in x.split(list(sizes))])
    scattered = x.new_empty((most, *x.shape[1:]))
    _reduce_scatter_into(scattered, padded, op, pg)
    return scattered[: sizes[rank]].clone()


def _all_to_all(x, group_name):
    pg = resolve_group(group_name)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _eager("all_to_all_single")(out, x.contiguous(), group=pg)
    return out


def _all_to_all_v(x, output_split_sizes, input_split_sizes, group_name):
    pg = resolve_group(group_name)
    out = x.new_empty((sum(output_split_sizes), *x.shape[1:]))
    _eager("all_to_all_single")(
        out, x.contiguous(), list(output_split_sizes), list(input_split_sizes), group=pg
    )
    return out


def _broadcast(x, src, group_name):
    out = x.clone(memory_format=torch.contiguous_format)
    _eager("broadcast")(out, group_src=src, group=resolve_group(group_name))
    return out


def _quant_all_reduce(x, scale, offset, quant_type, out_dtype, group_name):
    """Over another backend (gloo): every rank's int8 `x` gathered as int8, summed exactly in
    int32, then dequantised as the library does it: one float32 addition of R * offset, one
    float32 multiplication by the scale (per tensor, or per channel of the last dim), one rounding
    to `out_dtype`. The C++ kernel checked the arguments."""
    pg = resolve_group(group_name)
    world = dist.get_world_size(pg)
    gathered = x.new_empty(world * x.numel())
    _gather_into(gathered, x.reshape(-1).contiguous(), pg)
    total = gathered.view(world, *x.shape).sum(0, dtype=torch.int32)
    shifted = total.float() + offset.float() * world
    return (shifted * scale.float().reshape(-1)).to(out_dtype)


# Fake kernels: shapes only. Group sizes and ranks come from the real group at trace time.
def _world(group_name):
    return dist.get_world_size(resolve_group(group_name))


def _rank(group_name):
    return dist.get_rank(resolve_group(group_name))


_FAKES = {
    "all_reduce": lambda x, op="sum", g="": x.new_empty(x.shape),
    "all_reduce_": lambda x, op="sum", g="": x,
    "inference_all_reduce": lambda x: x.new_empty(x.shape),
    "inference_all_reduce_": lambda x: x,
    "all_gather": lambda x, g: x.new_empty((_world(g) * _rows(x, "all_gather"), *x.shape[1:])),
    "all_gather_v": lambda x, sizes, g: x.new_empty((sum(sizes), *x.shape[1:])),
    "reduce_scatter": lambda x, op, g: x.new_empty(
        (_rows(x, "reduce_scatter") // _world(g), *x.shape[1:])
    ),
    "reduce_scatter_v": lambda x, sizes, op, g: x.new_empty((sizes[_rank(g)], *x.shape[1:])),
    "all_to_all": lambda x, g: x.new_empty(x.shape),
    "all_to_all_v": lambda x, osz, isz, g: x.new_empty((sum(osz), *x.shape[1:])),
    "broadcast": lambda x, src, g: x.new_empty(x.shape),
    "quant_all_reduce": lambda x, scale, offset, q, dtype, g: x.new_empty(x.shape, dtype=dtype),
}

_KERNELS = {
    "all_reduce": _all_reduce,
    "all_reduce_": _all_reduce_,
    # DeepSpeed's shapes: x alone, the defaults ("sum", the default group).
    "inference_all_reduce": _all_reduce,
    "inference_all_reduce_": _all_reduce_,
    "all_gather": _all_gather,
    "all_gather_v": _all_gather_v,
    "reduce_scatter": _reduce_scatter,
    "reduce_scatter_v": _reduce_scatter_v,
    "all_to_all": _all_to_all,
    "all_to_all_v": _all_to_all_v,
    "broadcast": _broadcast,
    "quant_all_reduce": _quant_all_reduce,
}


#: The ops whose eager and autograd kernels are C++ (the library's): their Python kernels above are
#: handed only the calls the C++ kernels do not run.
NATIVE = frozenset(_c10d_backend.factory().functional_ops())


def _functional_all_reduce_(x, op="sum", group_name=""):
    """all_reduce_ as the compiler sees it: the functional all_reduce (an ordered effect, as every
    collective here) and a copy into x, which functionalization turns into the graph's mutation of
    its input."""
    return x.copy_(torch.ops.collops.all_reduce(x, op, group_name))


#: The in-place ops: all_reduce_ and DeepSpeed's shape of it.
_IN_PLACE = ("all_reduce_", "inference_all_reduce_")


def _register():
    lib = torch.library.Library(_NS, "FRAGMENT")
    for name, schema in SCHEMAS.items():
        lib.define(schema)
        if name in NATIVE:
            _c10d_backend.factory().set_python_kernel(name, "eager", _KERNELS[name])
        else:
            # CompositeExplicitAutograd: one kernel for every device; the group's backend decides
            # what it supports.
            lib.impl(name, _KERNELS[name], "CompositeExplicitAutograd")
        torch.library.register_fake(f"{_NS}::{name}", _FAKES[name], lib=lib)
        if name in _IN_PLACE:
            # A mutating op cannot carry an effect token itself; torch.compile's functionalization
            # decomposes it (a Python-only CompositeImplicitAutograd kernel, which eager dispatch
            # never sees) into the functional op, which does.
            getattr(torch.ops.collops, name).default.py_impl(
                torch._C.DispatchKey.CompositeImplicitAutograd
            )(_functional_all_reduce_)
            continue
        torch.library._register_effectful_op(
            f"{_NS}::{name}", torch.library.EffectType.ORDERED, lib=lib
        )
    return lib


_LIB = _register()
