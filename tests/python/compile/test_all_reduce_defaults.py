"""torch.ops.collops.all_reduce_(y) and all_reduce(x): "sum" on the default group by the schema's
defaults, as DeepSpeed users call inference_all_reduce_(y). On a collops default group the call
runs in C++ (no Python kernel). After destroy_process_group it is torch's error until a new init,
and then it runs on the new group, never on the destroyed one, even while that one is still
referenced. On a gloo default group it goes through the Python kernel. torch.compile(fullgraph=True)
captures the short forms as it does the named ones, and all_reduce(x) differentiates. Goldens: the
sum over the ranks of inputs every rank computes for itself."""

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import run_group_job

WORLD = 2


def _input(rank, dtype=torch.float32):
    return (torch.arange(6.0) + rank * 10).to(dtype)


def _golden(dtype=torch.float32):
    return sum(_input(r).double() for r in range(WORLD)).to(dtype)


class _Counted:
    """Within the block, the Python eager kernels of all_reduce and all_reduce_ are counted (and
    still run)."""

    def __enter__(self):
        from collops import _c10d_backend, ops

        self.native, self.kernels = _c10d_backend.factory(), ops._KERNELS
        self.calls = {"all_reduce": 0, "all_reduce_": 0}
        for name in self.calls:

            def counting(*args, name=name):
                self.calls[name] += 1
                return self.kernels[name](*args)

            self.native.set_python_kernel(name, "eager", counting)
        return self

    def __exit__(self, *exc):
        for name in self.calls:
            self.native.set_python_kernel(name, "eager", self.kernels[name])
        return False


def _cpu_backend():
    return dist.group.WORLD._get_backend(torch.device("cpu"))


def _reduces_on_the_default_group(rank, dtype=torch.float32):
    y = _input(rank, dtype)
    assert torch.ops.collops.all_reduce_(y) is y
    torch.testing.assert_close(y, _golden(dtype), rtol=0, atol=0)
    torch.testing.assert_close(
        torch.ops.collops.all_reduce(_input(rank, dtype)), _golden(dtype), rtol=0, atol=0
    )


def _defaults(ctx, store_dir):
    me = ctx.rank
    with _Counted() as counted:
        # The collops default group, in C++: every rank holds the sum.
        for dtype in (torch.float32, torch.bfloat16):
            _reduces_on_the_default_group(me, dtype)
        assert counted.calls == {"all_reduce": 0, "all_reduce_": 0}

        # Destroyed while still referenced (the group and its backend): no default group, torch's
        # error.
        old_group, old = dist.group.WORLD, _cpu_backend()
        old_calls = old._get_sequence_number_for_group()
        dist.destroy_process_group()
        with pytest.raises(RuntimeError, match="Default process group has not been initialized"):
            torch.ops.collops.all_reduce_(_input(me))

        # A new collops default group: the calls run on it, none on the destroyed one.
        dist.init_process_group(
            "collops", init_method=f"file://{store_dir}/collops", rank=me, world_size=WORLD
        )
        new = _cpu_backend()
        new_calls = new._get_sequence_number_for_group()
        _reduces_on_the_default_group(me)
        assert new._get_sequence_number_for_group() == new_calls + 2
        assert old._get_sequence_number_for_group() == old_calls
        assert counted.calls == {"all_reduce": 0, "all_reduce_": 0}

        # A gloo default group: the Python kernels run the calls, over gloo.
        dist.destroy_process_group()
        dist.init_process_group(
            "gloo", init_method=f"file://{store_dir}/gloo", rank=me, world_size=WORLD
        )
        _reduces_on_the_default_group(me)
        assert counted.calls == {"all_reduce": 1, "all_reduce_": 1}
        assert new._get_sequence_number_for_group() == new_calls + 2
    del old_group
    return True


def test_default_op_and_group_follow_the_default_group_through_destroy_and_init(tmp_path):
    assert run_group_job(WORLD, _defaults, str(tmp_path)) == [True, True]


def _layer(x, w):
    h = x @ w
    torch.ops.collops.all_reduce_(h)
    return torch.ops.collops.all_reduce(torch.relu(h)) + 1


def _compiled(ctx):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    x = torch.arange(12.0).view(3, 4) - ctx.rank
    w = torch.eye(4) * (ctx.rank + 1)
    h = sum((x + ctx.rank - r) @ (torch.eye(4) * (r + 1)) for r in range(WORLD))
    want = torch.relu(h) * WORLD + 1
    torch.testing.assert_close(_layer(x, w), want, rtol=0, atol=0)
    torch.testing.assert_close(torch.compile(_layer, fullgraph=True)(x, w), want, rtol=0, atol=0)
    assert not counters["graph_break"], dict(counters["graph_break"])
    t = torch.ones(2, 2) + ctx.rank
    torch.library.opcheck(torch.ops.collops.all_reduce_.default, (t.clone(),))
    torch.library.opcheck(torch.ops.collops.all_reduce.default, (t,))

    # all_reduce(x) differentiates as all_reduce(x, "sum", ""): the gradient summed over the ranks.
    def loss(w):
        return torch.ops.collops.all_reduce(w * (ctx.rank + 1)).sum()

    for f in (loss, torch.compile(loss, fullgraph=True)):
        w = torch.ones(3, requires_grad=True)
        f(w).backward()
        torch.testing.assert_close(w.grad, torch.full((3,), WORLD * (ctx.rank + 1.0)))
    return True


def test_the_short_forms_compile_fullgraph_and_equal_eager():
    assert run_group_job(WORLD, _compiled) == [True, True]
