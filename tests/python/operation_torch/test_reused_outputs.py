"""Outputs over reused memory (torch_bindings/reused_outputs.h): OperationTorch.execute and the
eager torch.ops.collops.* (quant_all_reduce too) return a new tensor on every call, whose memory
may be that of an earlier output only once nothing holds that output any more. Results stay those
of fresh outputs; an output the caller still holds (itself, a view, its storage) is never written
again; a change of shape or dtype infers and allocates anew; input errors stay what they were
after calls that succeeded. The default group named "" is asked of Python once, and again when it
changes."""

import json
import os
import tempfile

import pytest
import torch
import torch.distributed as dist

import collops  # noqa: F401
import golden_harness as golden
from c10d_ranks import run_group_job
from rank_harness import run_process_ranks

WORLD = 2


def _reuse_rules(call, x_of, want_of, allocate):
    """Checks the reuse rules on `call(x)`, whose result for input x_of(n) is want_of(n);
    allocate(n) allocates as the outputs of `call` would without reuse."""
    x = x_of(64)
    first = call(x)
    torch.testing.assert_close(first, want_of(64), rtol=0, atol=0)
    held_ptr = first.data_ptr()
    # Held: the next result gets other memory, and the held one keeps its values.
    second = call(x)
    assert second.data_ptr() != held_ptr
    torch.testing.assert_close(first, want_of(64), rtol=0, atol=0)
    # Dropped: its memory comes back, as a new tensor with the right values (not freed: an
    # allocation in between gets other memory).
    ptr = second.data_ptr()
    del first, second
    between = allocate(64)
    third = call(x)
    assert third.data_ptr() in (held_ptr, ptr) and between.data_ptr() not in (held_ptr, ptr)
    del between
    assert third._version == 0 and not third.requires_grad
    torch.testing.assert_close(third, want_of(64), rtol=0, atol=0)
    # A view, or the storage, of a dropped result keeps its memory from being reused.
    view = third[:3]
    values = view.clone()
    storage = call(x).untyped_storage()
    del third
    for _ in range(4):
        y = call(x)
        assert y.data_ptr() not in (view.data_ptr(), storage.data_ptr())
        del y
    assert torch.equal(view, values)
    del view, storage
    # A result moved to shared memory is never handed out again.
    shared = call(x).share_memory_()
    shared_ptr = shared.data_ptr()
    del shared
    for _ in range(4):
        y = call(x)
        assert y.data_ptr() != shared_ptr
        torch.testing.assert_close(y, want_of(64), rtol=0, atol=0)
        del y
    # Another shape, and back: right values every time.
    for n in (5, 64, 1000, 64):
        torch.testing.assert_close(call(x_of(n)), want_of(n), rtol=0, atol=0)


def _ops_reuse(ctx):
    g = dist.group.WORLD.group_name
    R, me = ctx.world_size, ctx.rank

    def x_of(n):
        return torch.arange(n, dtype=torch.float32) * (me + 1)

    _reuse_rules(
        lambda x: torch.ops.collops.all_reduce(x, "sum", g),
        x_of,
        lambda n: torch.arange(n, dtype=torch.float32) * (R * (R + 1) // 2),
        torch.empty,
    )
    _reuse_rules(
        lambda x: torch.ops.collops.all_gather(x, g),
        x_of,
        lambda n: torch.cat([torch.arange(n, dtype=torch.float32) * (r + 1) for r in range(R)]),
        lambda n: torch.empty(n * R),
    )
    # quant_all_reduce: x int8 [n, 16], per-tensor scale and offset, y float16 (exact here).
    scale = torch.tensor([0.5], dtype=torch.float16)
    offset = torch.tensor([1.0], dtype=torch.float16)

    def q_of(n):
        return (torch.arange(n * 16) % 7 - 3 + me).to(torch.int8).view(n, 16)

    def q_want(n):
        total = sum((torch.arange(n * 16) % 7 - 3 + r) for r in range(R)).view(n, 16)
        return ((total + R) * 0.5).to(torch.float16)

    _reuse_rules(
        lambda x: torch.ops.collops.quant_all_reduce(x, scale, offset, 1, torch.float16, g),
        q_of,
        q_want,
        lambda n: torch.empty(n, 16, dtype=torch.float16),
    )
    # A result only the autograd graph keeps (saved for the square's backward) is held too.
    x = torch.ones(8, requires_grad=True)
    loss = (torch.ops.collops.all_reduce(x * (me + 1), "sum", g) ** 2).sum()
    for _ in range(3):
        torch.ops.collops.all_reduce(torch.zeros(8), "sum", g)
    loss.backward()
    torch.testing.assert_close(x.grad, torch.full((8,), 2.0 * R * (R + 1) / 2 * R * (me + 1)))
    return True


def test_eager_ops_reuse_only_memory_nobody_holds():
    assert all(run_group_job(WORLD, _ops_reuse))


def _default_group_asked_once(ctx, store):
    from collops import _c10d_backend

    asked = []
    original = _c10d_backend.default_group_name

    def counting():
        asked.append(1)
        return original()

    _c10d_backend.default_group_name = counting
    try:
        for _ in range(5):
            assert torch.equal(
                torch.ops.collops.all_reduce(torch.ones(2), "sum", ""), torch.full((2,), 2.0)
            )
        assert len(asked) == 1
        # A new default group (of another size) is asked for again, and used.
        dist.destroy_process_group()
        dist.init_process_group(
            "cpu:collops", init_method=f"file://{store}", rank=ctx.rank, world_size=WORLD
        )
        for _ in range(3):
            got = torch.ops.collops.all_reduce(torch.full((2,), ctx.rank + 1.0), "sum", "")
            assert torch.equal(got, torch.full((2,), 3.0))
        assert len(asked) == 2
    finally:
        _c10d_backend.default_group_name = original
    return True


def test_the_default_group_is_asked_of_python_once_and_again_when_replaced():
    store = os.path.join(tempfile.gettempdir(), f"collops-reinit-{os.getpid()}")
    try:
        assert all(run_group_job(WORLD, _default_group_asked_once, store))
    finally:
        if os.path.exists(store):
            os.remove(store)


def _execute_reuse(ctx):
    R, me = ctx.world_size, ctx.rank
    op = golden.make_op("AllReduceOperation", ctx.param(allReduceType="sum"))

    def x_of(n):
        return torch.arange(n, dtype=torch.float32) * (me + 1)

    _reuse_rules(
        lambda x: op.execute([x])[0],
        x_of,
        lambda n: torch.arange(n, dtype=torch.float32) * (R * (R + 1) // 2),
        lambda n: op.empty_shared([n], torch.float32),  # where execute's outputs live
    )
    # Another dtype infers again: the output takes the input's dtype.
    y = op.execute([torch.ones(4, dtype=torch.bfloat16)])[0]
    assert y.dtype == torch.bfloat16 and torch.equal(y, torch.full((4,), float(R), dtype=y.dtype))
    # A call the inputs fail after calls that succeeded: the same error as on a fresh object.
    fresh = golden.make_op("AllReduceOperation", ctx.param(allReduceType="sum"))
    for bad in (torch.ones(4, dtype=torch.complex64), torch.ones(2, 2, 2, 2, 2, 2, 2, 2, 2)):
        messages = []
        for o in (op, fresh):
            with pytest.raises(RuntimeError) as e:
                o.execute([bad])
            messages.append(str(e.value).split("\n")[0])
        assert messages[0] == messages[1]
    # set_param drops what the previous operation inferred and kept.
    assert json.loads(op.set_param(ctx.param(allReduceType="max")))["result"] == 0
    got = op.execute([x_of(64)])[0]
    torch.testing.assert_close(got, torch.arange(64, dtype=torch.float32) * R, rtol=0, atol=0)
    return True


def test_execute_reuses_only_memory_nobody_holds():
    assert all(run_process_ranks(WORLD, _execute_reuse))
