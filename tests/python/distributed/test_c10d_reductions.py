"""Reduction semantics the torch engines must share with lccl: float max and
min let NaN win (as torch.maximum) on the c10d engine over gloo, which alone drops NaNs, and on
the collops torch.distributed backend across pretend hosts (gloo between them); ReduceOp.AVG of
float16/bfloat16 sums in float32 and divides before its one rounding, so it cannot overflow where
the average itself fits. Goldens come from torch on each rank; NaNs are compared as bits (the
canonical quiet NaN that lccl stores)."""

import functools
import json

import torch
import torch.distributed as dist

from c10d_ranks import run_group_job

NAN = float("nan")
BITS = {
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def _nan_case(rank, world, n, dtype):
    """Element i is NaN on rank i % (world + 1) only (every (world+1)-th element on none); the rest
    small integers that every float dtype holds."""
    i = torch.arange(n)
    x = ((rank * 7 + i * 3) % 11 - 5).to(torch.float64)
    x[i % (world + 1) == rank] = NAN
    return x.to(dtype)


def _golden(xs, op):
    return functools.reduce(torch.maximum if op == "max" else torch.minimum, xs)


# The canonical quiet NaN that lccl stores for a NaN result (torch's own kernels may give other
# NaN bits: torch.maximum on float64 gives 0xffffffffffffffff under AVX2).
CANONICAL_NAN = {
    torch.float32: 0x7FC00000,
    torch.float64: 0x7FF8000000000000,
    torch.float16: 0x7E00,
    torch.bfloat16: 0x7FC0,
}


def _assert_bits(got, want, what):
    """got equals want bit for bit, where want's NaNs stand for the canonical quiet NaN."""
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    got, want = got.reshape(-1), want.reshape(-1)
    width = torch.finfo(got.dtype).bits
    mask = (1 << width) - 1
    got_bits = [b & mask for b in got.view(BITS[got.dtype]).tolist()]
    want_bits = [
        CANONICAL_NAN[want.dtype] if w != w else b & mask
        for w, b in zip(want.tolist(), want.view(BITS[want.dtype]).tolist())
    ]
    assert got_bits == want_bits, (
        f"{what}: {[hex(b) for b in got_bits]} != {[hex(b) for b in want_bits]}"
    )


def _operation(ctx, name, **params):
    op = torch.classes.OperationTorch.OperationTorch(name)
    result = json.loads(
        op.set_param(
            json.dumps(
                {
                    "rank": ctx.rank,
                    "rankSize": ctx.world_size,
                    "backend": "c10d",
                    "commDomain": "",
                    **params,
                }
            )
        )
    )
    assert result["result"] == 0, (name, params, result)
    return op


def _c10d_engine_nans(ctx):
    """OperationTorch on backend "c10d" over the default gloo group."""
    rank, world = ctx.rank, ctx.world_size
    n = 4 * world
    m = n // world
    longs = functools.partial(torch.tensor, dtype=torch.int64)
    for dtype in [torch.float32, torch.float16, torch.bfloat16]:
        xs = [_nan_case(r, world, n, dtype) for r in range(world)]
        for op in ["max", "min"]:
            what = f"{dtype} {op}"
            want = _golden(xs, op)
            (y,) = _operation(ctx, "AllReduceOperation", allReduceType=op).execute([xs[rank]])
            _assert_bits(y, want, f"AllReduce {what}")
            (y,) = _operation(ctx, "ReduceScatterOperation", reduceType=op).execute([xs[rank]])
            _assert_bits(y, want[rank * m : (rank + 1) * m], f"ReduceScatter {what}")
            counts, displs = [m] * world, [j * m for j in range(world)]
            (y,) = _operation(ctx, "ReduceScatterVOperation", reduceType=op).execute(
                [
                    xs[rank].reshape(-1, 2),
                    longs(counts),
                    longs(displs),
                    longs([m]),
                    torch.zeros(m // 2, dtype=torch.int8),
                ]
            )
            _assert_bits(y, want[rank * m : (rank + 1) * m], f"ReduceScatterV {what}")


def test_c10d_engine_max_and_min_let_nan_win_over_gloo():
    run_group_job(3, _c10d_engine_nans, backend="gloo")


def _collops_backend_nans(ctx):
    """dist.all_reduce and reduce_scatter_tensor on the "collops" default group."""
    from collops import _c10d_backend

    rank, world = ctx.rank, ctx.world_size
    n = 3 * world
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        xs = [_nan_case(r, world, n, dtype) for r in range(world)]
        for op, name in [(dist.ReduceOp.MAX, "max"), (dist.ReduceOp.MIN, "min")]:
            want = _golden(xs, name)
            t = xs[rank].clone()
            dist.all_reduce(t, op=op)
            _assert_bits(t, want, f"all_reduce {dtype} {name}")
            out = torch.empty(n // world, dtype=dtype)
            dist.reduce_scatter_tensor(out, xs[rank], op=op)
            _assert_bits(out, want.chunk(world)[rank], f"reduce_scatter_tensor {dtype} {name}")
    return _c10d_backend.communicator_name()


def test_collops_backend_max_and_min_let_nan_win_across_pretend_hosts():
    """2 pretend hosts x 2 ranks: lccl inside each host, gloo between the hosts' leaders."""
    engines = run_group_job(4, _collops_backend_nans, hosts=[0, 1, 0, 1])
    assert engines == ["hccl(lccl+c10d)"] * 4


def _avg(ctx):
    rank, world = ctx.rank, ctx.world_size

    def golden(xs, dtype):  # float32 sum in rank order, divided, rounded once
        total = functools.reduce(torch.add, [x.float() for x in xs])
        return (total / world).to(dtype)

    # Per rank: each pair's sum overflows the narrow type (float16 max 65504; bfloat16's sum
    # (2 - 2**-8) * 2**127 rounds to inf), while its average fits.
    big, below = 2.0**127, (1 - 2.0**-8) * 2.0**127
    cases = [
        (
            torch.float16,
            [[60000.0, 40000.0, 1.0, -65504.0, 3.0e-7], [60000.0, 40000.0, 2.0, -65504.0, 5.0e-7]],
        ),
        (torch.bfloat16, [[big, -big, 1.0, 7.0], [below, -below, 3.0, 1.0e-30]]),
    ]
    for dtype, values in cases:
        xs = [torch.tensor(values[r], dtype=dtype) for r in range(world)]
        t = xs[rank].clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        want = golden(xs, dtype)
        assert torch.isfinite(want).all(), want
        _assert_bits(t, want, f"all_reduce AVG {dtype}")
        # reduce_scatter_tensor and the list form: every rank holds [values] * world.
        ins = [torch.cat([x] * world) for x in xs]
        out = torch.empty(len(values[0]), dtype=dtype)
        dist.reduce_scatter_tensor(out, ins[rank], op=dist.ReduceOp.AVG)
        _assert_bits(out, want, f"reduce_scatter_tensor AVG {dtype}")
        out = torch.empty(len(values[0]), dtype=dtype)
        dist.reduce_scatter(out, list(ins[rank].chunk(world)), op=dist.ReduceOp.AVG)
        _assert_bits(out, want, f"reduce_scatter AVG {dtype}")


def test_collops_backend_avg_of_half_types_divides_before_rounding():
    """The average of two float16 60000s is 60000, not inf (the sum, 120000, overflows float16)."""
    run_group_job(2, _avg)


def _bitwise(ctx):
    rank, world = ctx.rank, ctx.world_size
    folds = {
        dist.ReduceOp.BAND: torch.bitwise_and,
        dist.ReduceOp.BOR: torch.bitwise_or,
        dist.ReduceOp.BXOR: torch.bitwise_xor,
    }
    g = torch.Generator().manual_seed(7)
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool):
        info = torch.iinfo(dtype) if dtype != torch.bool else None
        for shape in ((), (0,), (3, 5)):
            if dtype == torch.bool:
                xs = [torch.randint(0, 2, shape, generator=g).bool() for _ in range(world)]
            else:
                xs = [
                    torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(
                        dtype
                    )
                    for _ in range(world)
                ]
            for op, fold in folds.items():
                t = xs[rank].clone()
                dist.all_reduce(t, op=op)
                want = functools.reduce(fold, xs)
                assert torch.equal(t, want), (dtype, shape, op, t, want)
                r = xs[rank].clone()
                dist.reduce(r, dst=1, op=op)
                if rank == 1:
                    assert torch.equal(r, want), (dtype, shape, op, "reduce")
    # A float tensor: refused on every rank before any data moves.
    try:
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BOR)
    except RuntimeError as e:
        float_error = str(e)
    else:
        float_error = None
    # Ranks that disagree (the op, bool against uint8, a gather of the same bytes) must not pair.
    mismatches = []
    for mine in (
        {"op": dist.ReduceOp.BOR if rank == 0 else dist.ReduceOp.BAND},
        {"dtype": torch.bool if rank == 0 else torch.uint8},
        {"gather": rank == 0},
    ):
        t = torch.ones(4, dtype=mine.get("dtype", torch.int32))
        try:
            if mine.get("gather"):
                dist.all_gather_into_tensor(torch.empty(4 * world, dtype=t.dtype), t)
            else:
                dist.all_reduce(t, op=mine.get("op", dist.ReduceOp.BXOR))
        except RuntimeError as e:
            mismatches.append("ERROR_RANK_MISMATCH" in str(e))
        else:
            mismatches.append(False)
    flag = torch.tensor([rank == world - 1])
    dist.all_reduce(flag, op=dist.ReduceOp.BOR)  # the group still works: "any rank" is True
    return float_error, bool(flag), mismatches


def test_collops_backend_bitwise_reductions_of_integers_and_bools():
    """BAND/BOR/BXOR as gloo computes them, bit-exact against torch's fold in rank order."""
    for float_error, flag, mismatches in run_group_job(3, _bitwise):
        assert "needs an integer or bool tensor" in float_error, float_error
        assert flag
        assert mismatches == [True, True, True], mismatches
