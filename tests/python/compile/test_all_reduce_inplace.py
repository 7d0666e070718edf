"""torch.ops.collops.all_reduce_: all_reduce in place (DeepSpeed's inference_all_reduce_ as a
collops op). Eager on a collops group it reduces x itself without Python, allocating nothing;
over gloo it goes through the Python kernel; its errors are all_reduce's; a tensor that needs a
gradient is refused; and torch.compile(fullgraph=True) captures it (functionalised into
all_reduce and a copy) with the same results as eager. Goldens: the same reduction computed on
each rank from every rank's inputs."""

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import run_group_job

WORLD = 2


def _input(rank, dtype=torch.float32):
    return (torch.arange(12.0).view(4, 3) * (rank + 1) + rank).to(dtype)


def _golden(op, dtype=torch.float32, view=lambda t: t):
    parts = torch.stack([view(_input(r, dtype)).double() for r in range(WORLD)])
    reduced = {
        "sum": parts.sum(0),
        "avg": parts.mean(0),
        "max": parts.max(0).values,
        "product": parts.prod(0),
    }[op]
    return reduced.to(dtype)


def _in_place(ctx):
    from collops import _c10d_backend, ops

    g = dist.group.WORLD.group_name
    gloo = dist.new_group(backend="gloo")
    native = _c10d_backend.factory()
    python_calls = []

    def refuse(*args):
        python_calls.append(args)
        raise RuntimeError("the Python eager kernel was called")

    checked = 0
    native.set_python_kernel("all_reduce_", "eager", refuse)
    try:
        for op, dtype in (("sum", torch.float32), ("max", torch.float32), ("avg", torch.bfloat16)):
            x = _input(ctx.rank, dtype)
            storage, version = x.data_ptr(), x._version
            y = torch.ops.collops.all_reduce_(x, op, g)
            # x itself, reduced: same tensor object, same memory, and its version moved.
            assert y is x and x.data_ptr() == storage and x._version > version, op
            torch.testing.assert_close(x, _golden(op, dtype), rtol=0, atol=0, msg=op)
            checked += 1
        # A strided view: only its elements change, the rest of the base stays.
        base = _input(ctx.rank)
        column = base[:, 1]
        torch.ops.collops.all_reduce_(column, "sum", g)
        want = _input(ctx.rank)
        want[:, 1] = _golden("sum")[:, 1]
        torch.testing.assert_close(base, want, rtol=0, atol=0)
        checked += 1
        # "" is the default group, the collops one.
        ones = torch.ones(2)
        torch.ops.collops.all_reduce_(ones, "sum", "")
        assert torch.equal(ones, torch.full((2,), 2.0))
        assert not python_calls
        # A gloo group's call goes to the Python kernel.
        with pytest.raises(RuntimeError, match="the Python eager kernel was called"):
            torch.ops.collops.all_reduce_(torch.ones(2), "sum", gloo.group_name)
        assert len(python_calls) == 1
    finally:
        native.set_python_kernel("all_reduce_", "eager", ops._KERNELS["all_reduce_"])
    # ... which reduces in place over gloo.
    x = _input(ctx.rank)
    assert torch.ops.collops.all_reduce_(x, "sum", gloo.group_name) is x
    torch.testing.assert_close(x, _golden("sum"), rtol=0, atol=0)
    return checked + 1


def test_all_reduce_in_place_reduces_x_itself_and_equals_the_golden():
    assert run_group_job(WORLD, _in_place) == [5, 5]


def _errors(ctx):
    """all_reduce's errors (an unknown reduce op, a dtype the group does not reduce, AVG of
    integers) are all_reduce_'s, on this rank before any data moved; then the group still works,
    in step. A strided x is no error for either (test_all_reduce_in_place_...equals_the_golden)."""
    g = dist.group.WORLD.group_name
    ops = torch.ops.collops
    cases = [
        (lambda f: f(torch.ones(2), "mean", g), ValueError, r"unknown reduce op 'mean'"),
        (
            lambda f: f(torch.ones(2, dtype=torch.uint16), "sum", g),
            RuntimeError,
            r"reductions support bool and .*, not UInt16",
        ),
        (
            lambda f: f(torch.ones(2, dtype=torch.int32), "avg", g),
            RuntimeError,
            r"ReduceOp.AVG needs a floating-point tensor, got Int",
        ),
    ]
    for call, kind, message in cases:
        for f in (ops.all_reduce, ops.all_reduce_):
            with pytest.raises(kind, match=message):
                call(f)
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"collops.all_reduce_: x requires grad"):
        ops.all_reduce_(x, "sum", g)
    with torch.no_grad():
        ops.all_reduce_(x, "sum", g)
    assert torch.equal(x.detach(), torch.full((3,), 2.0))
    t = torch.ones(2)
    assert ops.all_reduce_(t, "sum", g) is t and torch.equal(t, torch.full((2,), 2.0))
    return len(cases)


def test_all_reduce_in_place_errors_are_all_reduces():
    assert run_group_job(WORLD, _errors) == [3, 3]


def _disagreeing(ctx):
    """Ranks whose calls disagree (element counts) get all_reduce's ERROR_RANK_MISMATCH."""
    g = dist.group.WORLD.group_name
    messages = []
    for f in (torch.ops.collops.all_reduce, torch.ops.collops.all_reduce_):
        with pytest.raises(RuntimeError) as caught:
            f(torch.ones(2 + ctx.rank), "sum", g)
        messages.append(str(caught.value))
    return messages


def test_all_reduce_in_place_on_disagreeing_ranks_fails_as_all_reduce():
    for out_of_place, in_place in run_group_job(WORLD, _disagreeing):
        assert "ERROR_RANK_MISMATCH" in out_of_place
        assert in_place == out_of_place


def _layer(x, w, g):
    h = x @ w
    torch.ops.collops.all_reduce_(h, "sum", g)
    return torch.relu(h) + 1


def _compiled(ctx):
    from torch._dynamo.utils import counters

    g = dist.group.WORLD.group_name
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(_layer, fullgraph=True)
    checked = 0
    for rows in (2, 5):
        x = torch.arange(rows * 4.0).view(rows, 4) - ctx.rank
        w = torch.eye(4) * (ctx.rank + 1)
        want = torch.relu(sum((x + ctx.rank - r) @ (torch.eye(4) * (r + 1)) for r in range(2))) + 1
        torch.testing.assert_close(_layer(x, w, g), want, rtol=0, atol=0)
        torch.testing.assert_close(compiled(x, w, g), want, rtol=0, atol=0)
        checked += 1

    # The input itself, mutated by the compiled graph as by eager.
    def reduce_input(t):
        torch.ops.collops.all_reduce_(t, "max", g)
        return t * 2

    t = torch.arange(4.0) * (ctx.rank + 1)
    out = torch.compile(reduce_input, fullgraph=True)(t)
    assert torch.equal(t, torch.arange(4.0) * 2) and torch.equal(out, torch.arange(4.0) * 4)
    assert not counters["graph_break"], dict(counters["graph_break"])
    torch.library.opcheck(
        torch.ops.collops.all_reduce_.default, (torch.ones(2, 2) + ctx.rank, "sum", g)
    )
    return checked + 1


def test_all_reduce_in_place_compiles_fullgraph_and_equals_eager():
    assert run_group_job(WORLD, _compiled) == [3, 3]
