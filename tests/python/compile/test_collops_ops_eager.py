"""Eager torch.ops.collops.* through their C++ kernels (torch_bindings/functional_ops.cpp): on a
"collops" group's CPU tensors they run without Python, every argument rule raises the ValueError
the ops document, results equal the same op over gloo (the independent golden) for every dtype
and layout the kernels treat apart, and a call that records gradients still gets them."""

import time

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import run_group_job

WORLD = 2


def _native():
    from collops import _c10d_backend

    return _c10d_backend.factory()


class _Replaced:
    """Within the block, the Python kernel `kind` of every op raises (and counts its calls)."""

    def __init__(self, kind):
        self.kind, self.calls = kind, []

    def __enter__(self):
        from collops import ops, _gradients  # noqa: F401

        native = _native()

        def refuse(*args):
            self.calls.append(args)
            raise RuntimeError(f"the Python {self.kind} kernel was called")

        for name in ops.NATIVE:
            native.set_python_kernel(name, self.kind, refuse)
        return self

    def __exit__(self, *exc):
        # Registering collops again registers every Python kernel again.
        from collops import ops

        native = _native()
        if self.kind == "eager":
            for name in ops.NATIVE:
                native.set_python_kernel(name, "eager", ops._KERNELS[name])
        else:
            from collops import _gradients

            _gradients.register(
                ops._NS,
                ops._LIB,
                ops.NATIVE,
                lambda n, k: native.set_python_kernel(n, "autograd", k),
            )
        return False


def _calls(rank, g, golden=False):
    """(name, call) of every op with inputs that differ per rank; each call returns a tensor.
    `golden`: as gloo computes it (gloo has no AVG: its sum, divided)."""
    ops = torch.ops.collops

    def avg(t):
        if golden:
            return (ops.all_reduce(t.float(), "sum", g) / WORLD).to(t.dtype)
        return ops.all_reduce(t, "AVG" if t.dtype == torch.float32 else "avg", g)

    x = torch.arange(12.0).view(4, 3) * (rank + 1) + rank
    sizes = [1, 3]
    splits = ([1, 3], [1, 3]) if rank == 0 else ([3, 1], [3, 1])
    return [
        ("all_reduce", lambda: ops.all_reduce(x, "sum", g)),
        ("all_reduce_avg", lambda: avg(x)),
        ("all_reduce_max", lambda: ops.all_reduce(x, "max", g)),
        ("all_reduce_product", lambda: ops.all_reduce(x, "product", g)),
        ("all_reduce_strided", lambda: ops.all_reduce(x.t(), "sum", g)),
        ("all_reduce_bf16_avg", lambda: avg(x.bfloat16())),
        ("all_reduce_int", lambda: ops.all_reduce(x.int(), "min", g)),
        ("all_reduce_bool", lambda: ops.all_reduce(x > 6, "sum", g)),
        ("all_reduce_complex", lambda: ops.all_reduce(torch.complex(x, -x), "sum", g)),
        ("all_gather", lambda: ops.all_gather(x, g)),
        ("all_gather_strided", lambda: ops.all_gather(x.t(), g)),
        ("all_gather_v", lambda: ops.all_gather_v(x[: sizes[rank]], sizes, g)),
        ("reduce_scatter", lambda: ops.reduce_scatter(x, "sum", g)),
        ("reduce_scatter_v", lambda: ops.reduce_scatter_v(x, sizes, "max", g)),
        ("all_to_all", lambda: ops.all_to_all(x, g)),
        ("all_to_all_v", lambda: ops.all_to_all_v(x, splits[0], splits[1], g)),
        ("broadcast", lambda: ops.broadcast(x, 1, g)),
    ]


def _same_as_gloo(ctx):
    gloo = dist.new_group(backend="gloo")
    mine = dict(_calls(ctx.rank, dist.group.WORLD.group_name))
    with _Replaced("eager") as replaced:  # the collops group's calls never reach Python
        got = {name: call() for name, call in mine.items()}
        # The default group by "" is the collops group too.
        assert torch.equal(
            torch.ops.collops.all_reduce(torch.ones(2), "sum", ""), torch.full((2,), 2.0)
        )
        assert not replaced.calls
        # A gloo group's calls do reach the Python kernel.
        with pytest.raises(RuntimeError, match="the Python eager kernel was called"):
            torch.ops.collops.all_reduce(torch.ones(2), "sum", gloo.group_name)
        assert len(replaced.calls) == 1
    for name, call in _calls(ctx.rank, gloo.group_name, golden=True):
        want = call()
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        assert got[name].is_contiguous(), name
        torch.testing.assert_close(got[name], want, rtol=0, atol=0, msg=name)
    return sorted(got)


def test_eager_ops_on_a_collops_group_run_in_cpp_and_equal_gloo():
    names = run_group_job(WORLD, _same_as_gloo)[0]
    assert len(names) == 17


def _no_python_autograd_without_gradients(ctx):
    g = dist.group.WORLD.group_name
    x = torch.ones(3, requires_grad=True)
    with _Replaced("autograd") as replaced:
        with torch.no_grad():
            y = torch.ops.collops.all_reduce(x, "sum", g)
        z = torch.ops.collops.all_gather(torch.ones(2), g)
        assert not replaced.calls and not y.requires_grad and not z.requires_grad
        with pytest.raises(RuntimeError, match="the Python autograd kernel was called"):
            torch.ops.collops.all_reduce(x, "sum", g)
    # Restored: the gradient of a sum over the ranks is every rank's upstream gradient summed.
    y = torch.ops.collops.all_reduce(x * (ctx.rank + 1), "sum", g)
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0 * (ctx.rank + 1)))
    return True


def test_autograd_reaches_python_only_for_calls_that_record_gradients():
    assert all(run_group_job(WORLD, _no_python_autograd_without_gradients))


def _argument_rules(ctx):
    ops = torch.ops.collops
    g = dist.group.WORLD.group_name
    x = torch.ones(4, 2)
    cases = [
        (
            lambda: ops.all_reduce(x, "mean", g),
            r"collops: unknown reduce op 'mean'; use one of \['avg', 'max', 'min', 'prod', "
            r"'product', 'sum'\]",
        ),
        (
            lambda: ops.all_gather(torch.tensor(1.0), g),
            r"collops.all_gather: needs a tensor of "
            r"at least 1 dim",
        ),
        (lambda: ops.all_gather_v(x, [4], g), r"collops.all_gather_v: 1 sizes for a group of 2"),
        (
            lambda: ops.all_gather_v(x, [4, -1], g),
            r"collops.all_gather_v: negative size in "
            r"\[4, -1\]",
        ),
        (
            lambda: ops.all_gather_v(x, [3, 3], g),
            rf"collops.all_gather_v: sizes\[{ctx.rank}\] = "
            r"3 but this rank's input has 4 rows",
        ),
        (
            lambda: ops.reduce_scatter(torch.ones(3), "sum", g),
            r"collops.reduce_scatter: 3 rows "
            r"do not split over 2 ranks; use reduce_scatter_v",
        ),
        (
            lambda: ops.reduce_scatter_v(x, [1, 2], "sum", g),
            r"collops.reduce_scatter_v: sizes "
            r"sum to 3 but the input has 4 rows",
        ),
        (lambda: ops.reduce_scatter_v(x, [1, 3], "nope", g), r"unknown reduce op 'nope'"),
        (lambda: ops.all_to_all_v(x, [2, 2, 0], [2, 2], g), r"collops.all_to_all_v: 3 sizes"),
        (
            lambda: ops.all_to_all_v(x, [2, 2], [5, -1], g),
            r"collops.all_to_all_v: negative "
            r"size in \[5, -1\]",
        ),
        # Not strided: named here, not torch's "unsupported memory format option Contiguous".
        (
            lambda: ops.all_reduce(x.to_sparse(), "sum", g),
            r"collops.all_reduce: x must be a dense \(strided\) tensor, got layout "
            r"torch.sparse_coo; call .to_dense\(\) first",
        ),
        (
            lambda: ops.all_reduce_(x.to_sparse_csr(), "sum", g),
            r"collops.all_reduce_: x must be a dense \(strided\) tensor, got layout torch.sparse_csr",
        ),
        (
            lambda: ops.all_gather(x.to_mkldnn(), g),
            r"collops.all_gather: x must be a dense \(strided\) tensor, got layout torch._mkldnn",
        ),
        (
            lambda: ops.reduce_scatter(x.to_sparse(), "sum", g),
            r"collops.reduce_scatter: x must be a dense \(strided\) tensor",
        ),
        (
            lambda: ops.broadcast(x.to_sparse(), 0, g),
            r"collops.broadcast: x must be a dense \(strided\) tensor",
        ),
        (
            lambda: ops.quant_all_reduce(
                x.to(torch.int8), torch.ones(1).to_sparse(), torch.zeros(1), 1, torch.float16, g
            ),
            r"collops.quant_all_reduce: scale must be a dense \(strided\) tensor, got layout "
            r"torch.sparse_coo",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    # Refused on this rank before any data moved: the group still works, in step.
    assert torch.equal(ops.all_reduce(torch.ones(2), "sum", g), torch.full((2,), 2.0))
    return len(cases)


def test_every_argument_rule_raises_its_value_error_before_data_moves():
    assert run_group_job(WORLD, _argument_rules) == [16, 16]


def _one_rank_refuses(ctx):
    # Only rank 0 passes a sparse tensor: its peers, already in the call on the collops group's
    # communicator, fail at once naming it instead of waiting for the group's timeout.
    ops = torch.ops.collops
    g = dist.group.WORLD.group_name
    assert torch.equal(ops.all_reduce(torch.ones(2), "sum", g), torch.full((2,), 2.0))
    start = time.monotonic()
    if ctx.rank == 0:
        with pytest.raises(ValueError, match=r"collops.all_reduce: x must be a dense"):
            ops.all_reduce(torch.ones(2).to_sparse(), "sum", g)
    else:
        with pytest.raises(
            RuntimeError, match=r"ERROR_RANK_MISMATCH.*rank 0.*ERROR_INVALID_TENSOR_FORMAT"
        ):
            ops.all_reduce(torch.ones(2), "sum", g)
    assert time.monotonic() - start < GROUP_TIMEOUT / 4
    assert torch.equal(ops.all_reduce(torch.ones(2), "sum", g), torch.full((2,), 2.0))
    return True


GROUP_TIMEOUT = 60


def test_a_rank_refusing_a_sparse_tensor_does_not_hold_its_peers():
    assert all(run_group_job(WORLD, _one_rank_refuses, group_timeout=GROUP_TIMEOUT))


# One rank (the last) breaking a rule of a call its peers make with good arguments: (call(bad,
# group, world), that rank's error, its own message, the refusal its peers are told of). Each
# raised on that rank alone before the group's communicator, and the peers waited for the timeout.
def _quantized(bad):
    import warnings

    warnings.filterwarnings("ignore", message=".*deprecated.*")
    return torch.quantize_per_tensor(torch.ones(4), 0.5, 0, torch.quint8) if bad else torch.ones(4)


def _nested(bad):
    import warnings

    warnings.filterwarnings("ignore", message=".*prototype stage.*")
    return torch.nested.nested_tensor([torch.ones(2), torch.ones(2)]) if bad else torch.ones(4)


ONE_RANK_CASES = {
    "AVG of integers": (
        lambda bad, g, w: torch.ops.collops.all_reduce(
            torch.ones(4, dtype=torch.int32 if bad else torch.float32), "avg", g
        ),
        RuntimeError,
        r"ReduceOp.AVG needs a floating-point tensor, got Int",
        "ERROR_INVALID_PARAM",
    ),
    "unknown reduce op": (
        lambda bad, g, w: torch.ops.collops.all_reduce(torch.ones(4), "mean" if bad else "sum", g),
        ValueError,
        r"collops: unknown reduce op 'mean'",
        "ERROR_INVALID_PARAM",
    ),
    "all_gather_v sizes": (
        lambda bad, g, w: torch.ops.collops.all_gather_v(
            torch.ones(4, 2), [4] * (w - 1) + [3 if bad else 4], g
        ),
        ValueError,
        r"collops.all_gather_v: sizes\[\d\] = 3 but this rank's input has 4 rows",
        "ERROR_INVALID_PARAM",
    ),
    "quantized x": (
        lambda bad, g, w: torch.ops.collops.all_reduce(_quantized(bad), "sum", g),
        ValueError,
        r"collops.all_reduce: x is a quantized tensor \(QUInt8\)",
        "ERROR_INVALID_TENSOR_FORMAT",
    ),
    "nested x": (
        lambda bad, g, w: torch.ops.collops.all_reduce(_nested(bad), "sum", g),
        ValueError,
        r"collops.all_reduce: x is a nested tensor",
        "ERROR_INVALID_TENSOR_FORMAT",
    ),
}


def _one_rank_breaks_a_rule(ctx):
    from c10d_ranks import REFUSAL_GROUP_TIMEOUT, group_works, timed

    g = dist.group.WORLD.group_name
    world, bad = ctx.world_size, ctx.world_size - 1
    group_works(ctx)
    for name, (call, error, own, told) in ONE_RANK_CASES.items():

        def body(call=call, error=error, own=own, told=told):
            if ctx.rank == bad:
                with pytest.raises(error, match=own):
                    call(True, g, world)
            else:
                with pytest.raises(RuntimeError, match=rf"ERROR_RANK_MISMATCH.*rank {bad}.*{told}"):
                    call(False, g, world)

        timed(ctx, f"{name} on rank {bad}", body, REFUSAL_GROUP_TIMEOUT / 2)
        group_works(ctx)
    return True


@pytest.mark.parametrize("world", [2, 3])
def test_a_rank_breaking_a_rule_alone_fails_its_peers_at_once(world):
    from c10d_ranks import run_refusal_job

    assert run_refusal_job(_one_rank_breaks_a_rule, world=world) == [True] * world
