"""Gradients of ``torch.ops.collops.*``, so training code differentiates through them, eager and
under ``torch.compile`` (AOTAutograd traces these formulas into the backward graph, where the
collectives keep their ordered effect).

The loss being differentiated is the sum of every rank's loss, as in DDP and
``torch.distributed.nn.functional``: each backward is itself a collective that every rank of
the group runs, in the reverse order of the forward calls. Each formula uses only collops ops, so
the backward is as fast, and as uneven, as the forward:

- all_gather(_v) <-> reduce_scatter(_v) "sum" (the adjoint pairs);
- all_to_all(_v): the same exchange with the splits swapped;
- broadcast: the sum of every rank's gradient, on `src` only;
- all_reduce and reduce_scatter(_v) by op: "sum" passes the summed gradient, "avg" divides it by
  the group size, "max"/"min" give it to the ranks holding the extreme (split evenly between
  ties, as torch.amax does), "prod" multiplies it by the product of the other ranks' inputs
  (exact with zeros: no division).

torch's own ``_c10d_functional`` ops differentiate only "sum" reductions; these cover every op the
forward takes.
"""

import torch

from . import _c10d_backend
from .ops import _LIB, _NS, NATIVE, _rank, _world

_C = torch.ops.collops


def _others_product(x, group_name):
    """The elementwise product of every other rank's `x` (none of them divided by anything)."""
    rows = _C.all_gather(x.reshape(1, -1), group_name)
    rows[_rank(group_name)] = 1
    return rows.prod(0).view(x.shape)


def _reduction_grad(op, x, whole, grad, group_name):
    """dL/dx for `whole` = op over the ranks' `x`, elementwise, where `grad` is dL/d`whole` summed
    over the ranks holding each element of it."""
    if op == "sum":
        return grad
    if op == "avg":
        return grad / _world(group_name)
    if op in ("max", "min"):
        hit = (x == whole).to(grad.dtype)
        ties = _C.all_reduce(hit, "sum", group_name)
        return grad * hit / ties.clamp(min=1)
    return grad * _others_product(x, group_name)  # prod / product


def _save_reduction(ctx, inputs, output):
    x, op, group_name = inputs[0], inputs[-2], inputs[-1]
    ctx.op, ctx.group_name = op.lower(), group_name
    ctx.sizes = inputs[1] if len(inputs) == 4 else None
    # Only the extreme and product gradients read the values.
    keep = ctx.op in ("max", "min", "prod", "product")
    ctx.save_for_backward(x if keep else None, output if keep else None)


def _all_reduce_grad(ctx, grad):
    x, y = ctx.saved_tensors
    total = _C.all_reduce(grad, "sum", ctx.group_name)
    return _reduction_grad(ctx.op, x, y, total, ctx.group_name), None, None


def _save_default_sum(ctx, inputs, output):
    """inference_all_reduce (DeepSpeed's shape): "sum" on the default group, x alone."""
    ctx.op, ctx.group_name = "sum", ""
    ctx.save_for_backward(None, None)


def _inference_all_reduce_grad(ctx, grad):
    return _all_reduce_grad(ctx, grad)[0]


def _reduce_scatter_grad(ctx, grad):
    # Each element of the reduction lives on exactly one rank, so gathering the blocks' gradients
    # gives dL/d(whole reduction) with no sum.
    x, y = ctx.saved_tensors
    if ctx.sizes is None:
        gather = lambda t: _C.all_gather(t, ctx.group_name)  # noqa: E731
    else:
        gather = lambda t: _C.all_gather_v(t, ctx.sizes, ctx.group_name)  # noqa: E731
    whole = gather(y) if y is not None else None
    dx = _reduction_grad(ctx.op, x, whole, gather(grad), ctx.group_name)
    return (dx, None, None) if ctx.sizes is None else (dx, None, None, None)


def _save_group(ctx, inputs, output):
    ctx.group_name = inputs[-1]
    ctx.args = inputs[1:-1]


def _all_gather_grad(ctx, grad):
    return _C.reduce_scatter(grad, "sum", ctx.group_name), None


def _all_gather_v_grad(ctx, grad):
    (sizes,) = ctx.args
    return _C.reduce_scatter_v(grad, sizes, "sum", ctx.group_name), None, None


def _all_to_all_grad(ctx, grad):
    return _C.all_to_all(grad, ctx.group_name), None


def _all_to_all_v_grad(ctx, grad):
    output_split_sizes, input_split_sizes = ctx.args
    back = _C.all_to_all_v(grad, input_split_sizes, output_split_sizes, ctx.group_name)
    return back, None, None, None


def _broadcast_grad(ctx, grad):
    (src,) = ctx.args
    total = _C.all_reduce(grad, "sum", ctx.group_name)
    dx = total if _rank(ctx.group_name) == src else torch.zeros_like(total)
    return dx, None, None


_FORMULAS = {
    "all_reduce": (_all_reduce_grad, _save_reduction),
    "inference_all_reduce": (_inference_all_reduce_grad, _save_default_sum),
    "reduce_scatter": (_reduce_scatter_grad, _save_reduction),
    "reduce_scatter_v": (_reduce_scatter_grad, _save_reduction),
    "all_gather": (_all_gather_grad, _save_group),
    "all_gather_v": (_all_gather_v_grad, _save_group),
    "all_to_all": (_all_to_all_grad, _save_group),
    "all_to_all_v": (_all_to_all_v_grad, _save_group),
    "broadcast": (_broadcast_grad, _save_group),
}


def register(namespace, lib, native=(), set_kernel=None):
    """The formulas of every op. For the ops in `native`, whose C++ autograd kernel records a
    gradient only for calls that need one, the same kernel torch.library.register_autograd would
    register goes to `set_kernel(name, kernel)` instead (registered itself, it would be the
    Python on the path of every call)."""
    from torch._library import autograd as library_autograd

    for name, (backward, setup_context) in _FORMULAS.items():
        qualname = f"{namespace}::{name}"
        if name in native:
            op = torch._library.utils.lookup_op(qualname)
            info = library_autograd.Info(backward, setup_context)
            set_kernel(name, library_autograd.make_autograd_impl(op, info))
        else:
            torch.library.register_autograd(
                qualname, backward, setup_context=setup_context, lib=lib
            )


# On import, as ops.py defines the ops on import: every op has its gradient from then on.
register(
    _NS,
    _LIB,
    NATIVE,
    lambda name, kernel: _c10d_backend.factory().set_python_kernel(name, "autograd", kernel),
)
