"""torch.ops.collops.inference_all_reduce_ / inference_all_reduce: DeepSpeed's op shapes
(``inference_all_reduce_(Tensor(a!) self)``, ``inference_all_reduce(Tensor self)``), "sum" on the
default group, run by all_reduce_'s and all_reduce's kernels. On a collops default group they
reduce without Python (the in-place one x itself); over a gloo default group they go through the
Python kernels; the in-place one refuses a tensor that needs a gradient, the out-of-place one has
all_reduce's gradient; torch.compile(fullgraph=True) captures both. Goldens: the sum computed on
each rank from every rank's inputs."""

import pytest
import torch

from c10d_ranks import run_group_job

WORLD = 2
DTYPES = (torch.float32, torch.bfloat16)


def _input(rank, dtype):
    return (torch.arange(12.0).view(4, 3) * (rank + 1) + rank).to(dtype)


def _golden(dtype):
    return sum(_input(r, torch.float64) for r in range(WORLD)).to(dtype)


def _reduces(ctx, expect_python):
    """Both ops, every dtype: the golden sum; the in-place one returns x itself. The Python eager
    kernels are replaced by ones that count their calls, then restored."""
    from collops import _c10d_backend, ops

    native = _c10d_backend.factory()
    python_calls = []

    def counting(name):
        def kernel(*args):
            python_calls.append(name)
            return ops._KERNELS[name](*args)

        return kernel

    names = ("inference_all_reduce", "inference_all_reduce_")
    for name in names:
        native.set_python_kernel(name, "eager", counting(name))
    checked = 0
    try:
        for dtype in DTYPES:
            x = _input(ctx.rank, dtype)
            out = torch.ops.collops.inference_all_reduce(x)
            assert out is not x and torch.equal(x, _input(ctx.rank, dtype)), dtype
            torch.testing.assert_close(out, _golden(dtype), rtol=0, atol=0, msg=str(dtype))
            y = _input(ctx.rank, dtype)
            storage, version = y.data_ptr(), y._version
            assert torch.ops.collops.inference_all_reduce_(y) is y
            assert y.data_ptr() == storage and y._version > version, dtype
            torch.testing.assert_close(y, _golden(dtype), rtol=0, atol=0, msg=str(dtype))
            checked += 1
    finally:
        for name in names:
            native.set_python_kernel(name, "eager", ops._KERNELS[name])
    assert python_calls == (list(names) * len(DTYPES) if expect_python else []), python_calls
    return checked


def test_inference_all_reduce_on_a_collops_default_group_runs_natively():
    assert run_group_job(WORLD, _reduces, False) == [2, 2]


def test_inference_all_reduce_on_a_gloo_default_group_runs_the_python_kernels():
    assert run_group_job(WORLD, _reduces, True, backend="gloo") == [2, 2]


def _grads(ctx):
    """The in-place op refuses a tensor that needs a gradient (before any data moves: the group
    still works after); the out-of-place one has all_reduce's "sum" gradient."""
    ops = torch.ops.collops
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"collops.inference_all_reduce_: self requires grad"):
        ops.inference_all_reduce_(x)
    with torch.no_grad():
        assert ops.inference_all_reduce_(x) is x
    assert torch.equal(x.detach(), torch.full((3,), 2.0))
    w = torch.full((3,), float(ctx.rank + 1), requires_grad=True)
    (ops.inference_all_reduce(w) * torch.arange(3.0)).sum().backward()
    # d(sum over ranks of loss)/dw: every rank's upstream gradient summed.
    torch.testing.assert_close(w.grad, torch.arange(3.0) * WORLD, rtol=0, atol=0)
    return 1


def test_inference_all_reduce_gradients():
    assert run_group_job(WORLD, _grads) == [1, 1]


def _compiled(ctx):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()

    def layer(x, w):
        h = x @ w
        torch.ops.collops.inference_all_reduce_(h)
        return torch.ops.collops.inference_all_reduce(torch.relu(h)) + 1

    compiled = torch.compile(layer, fullgraph=True)
    x = torch.arange(8.0).view(2, 4) - ctx.rank
    w = torch.eye(4) * (ctx.rank + 1)
    h = sum((x + ctx.rank - r) @ (torch.eye(4) * (r + 1)) for r in range(WORLD))
    want = torch.relu(h) * WORLD + 1
    torch.testing.assert_close(layer(x, w), want, rtol=0, atol=0)
    torch.testing.assert_close(compiled(x, w), want, rtol=0, atol=0)

    def reduce_input(t):  # the input itself, mutated by the compiled graph as by eager
        torch.ops.collops.inference_all_reduce_(t)
        return t * 2

    t = torch.arange(4.0) * (ctx.rank + 1)
    out = torch.compile(reduce_input, fullgraph=True)(t)
    assert torch.equal(t, torch.arange(4.0) * 3) and torch.equal(out, torch.arange(4.0) * 6)
    assert not counters["graph_break"], dict(counters["graph_break"])
    for op in (torch.ops.collops.inference_all_reduce, torch.ops.collops.inference_all_reduce_):
        torch.library.opcheck(op.default, (torch.ones(2, 2) + ctx.rank,))
    return 1


def test_inference_all_reduce_compiles_fullgraph_and_equals_eager():
    assert run_group_job(WORLD, _compiled) == [1, 1]
