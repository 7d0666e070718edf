"""Rank bodies for the OperationTorch golden tests, one per operation.

Each ``case_*`` function is run by every rank of a job (threads or processes, see rank_harness)
as ``case(ctx, seed)``. It rebuilds every rank's inputs from the seed -- so each rank computes the
golden output independently with torch, not with collops -- runs the operation through
``torch.classes.OperationTorch.OperationTorch`` and asserts. Data movement must match exactly;
reductions pass when |a - g| <= thr * max(1, |g|) (thr float16 2^-8, bfloat16 2^-7, float32 2^-11,
integers exact): a reduction's rounding error grows with the dtype's unit roundoff.
"""

import json
import os
import zlib

import torch

REDUCIBLE = [
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
]
MOVABLE = REDUCIBLE + [torch.uint8, torch.float64, torch.bool]
REDUCE_TYPES = ["sum", "prod", "max", "min"]
THRESHOLDS = {
    torch.float16: 2.0**-8,
    torch.bfloat16: 2.0**-7,
    torch.float32: 2.0**-11,
    torch.float64: 2.0**-30,
}


# ---- building blocks ----------------------------------------------------------------------------


def make_op(name, param):
    """An OperationTorch for `name` with `param` (JSON text) set; asserts set_param succeeded."""
    op = torch.classes.OperationTorch.OperationTorch(name)
    result = json.loads(op.set_param(param))
    assert result["result"] == 0, f"{name}.set_param({param}) -> {result}"
    return op


def bind(op, **counts):
    """set_varaintpack_param(counts); asserts it succeeded."""
    result = json.loads(op.set_varaintpack_param(json.dumps(counts)))
    assert result["result"] == 0, f"set_varaintpack_param({counts}) -> {result}"


def generator(*key):
    """A torch.Generator seeded from `key`, identical on every rank that asks with the same key."""
    seed = 0
    for k in key:  # zlib.crc32, not hash(): str hashes differ between processes
        seed = (seed * 1000003 + (zlib.crc32(k.encode()) if isinstance(k, str) else int(k))) % (
            2**61
        )
    return torch.Generator().manual_seed(seed)


def rank_tensor(seed, rank, shape, dtype, low=-5, high=5):
    """Rank `rank`'s input, reproducible on every rank: integers in [low, high] (floats uniform in
    the same range, booleans half true); uint8 keeps to [0, high]."""
    g = generator(seed, rank, str(dtype), *shape)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    lo = 0 if dtype == torch.uint8 else low
    return torch.randint(lo, high + 1, shape, generator=g, dtype=torch.int64).to(dtype)


def counts(*values):
    """A host-count tensor (int64), as ATB scripts pass them."""
    return torch.tensor(list(values), dtype=torch.int64)


def reduce_golden(tensors, reduce_type, dtype):
    """Reduces in float64 (integers in int64, exact for the small test values), rounds once."""
    wide = torch.stack(
        [t.to(torch.float64 if dtype.is_floating_point else torch.int64) for t in tensors]
    )
    if reduce_type == "sum":
        out = wide.sum(0)
    elif reduce_type == "prod":
        out = wide.prod(0)
    elif reduce_type == "max":
        out = wide.max(0).values
    else:
        out = wide.min(0).values
    return out.to(dtype)


def assert_equal(out, golden, what):
    """Exact match, dtype and shape included."""
    assert out.dtype == golden.dtype, f"{what}: dtype {out.dtype}, expected {golden.dtype}"
    assert tuple(out.shape) == tuple(golden.shape), (
        f"{what}: shape {tuple(out.shape)}, expected {tuple(golden.shape)}"
    )
    assert torch.equal(out, golden), f"{what}:\n got      {out}\n expected {golden}"


def assert_reduced(out, golden, what):
    """ATB's golden rule for reductions: |a - g| <= thr * max(1, |g|); integers exact."""
    if not golden.dtype.is_floating_point:
        assert_equal(out, golden, what)
        return
    assert out.dtype == golden.dtype and tuple(out.shape) == tuple(golden.shape), (
        f"{what}: got {out.dtype} {tuple(out.shape)}, expected {golden.dtype} {tuple(golden.shape)}"
    )
    a, g = out.to(torch.float64), golden.to(torch.float64)
    bad = (a - g).abs() > THRESHOLDS[golden.dtype] * g.abs().clamp(min=1.0)
    assert not bool(bad.any()), f"{what}:\n got      {out}\n expected {golden}"


# ---- one case per operation ---------------------------------------------------------------------


def case_all_reduce(ctx, seed):
    """AllReduce: every reduce type x every reducible dtype, two shapes."""
    for reduce_type in REDUCE_TYPES:
        op = make_op("AllReduceOperation", ctx.param(allReduceType=reduce_type))
        for dtype in REDUCIBLE:
            for shape in [(3, 5), (1031,)]:
                xs = [rank_tensor(seed, r, shape, dtype) for r in range(ctx.world_size)]
                (y,) = op.execute([xs[ctx.rank]])
                assert_reduced(
                    y,
                    reduce_golden(xs, reduce_type, dtype),
                    f"{ctx} AllReduce {reduce_type} {dtype} {shape}",
                )


def case_all_gather(ctx, seed):
    """AllGather: y[i] = x of rank i; execute and execute_out alike."""
    op = make_op("AllGatherOperation", ctx.param())
    for dtype in MOVABLE:
        xs = [rank_tensor(seed, r, (2, 3), dtype) for r in range(ctx.world_size)]
        golden = torch.stack(xs)
        (y,) = op.execute([xs[ctx.rank]])
        assert_equal(y, golden, f"{ctx} AllGather {dtype}")
        out = torch.empty_like(golden)
        op.execute_out([xs[ctx.rank]], [out])
        assert_equal(out, golden, f"{ctx} AllGather execute_out {dtype}")


def _all_gather_v_layout(seed, world_size, tag):
    """ATB's AllGatherV case: rank i sends a random 1..9 elements; blocks packed in rank order;
    the output has room for 2 more rows than needed, so its tail must come back zero."""
    send = torch.randint(1, 10, (world_size,), generator=generator(seed, "agv", tag)).tolist()
    rdispls = [sum(send[:i]) for i in range(world_size)]
    rows = (sum(send) + 1) // 2 + 2
    return send, rdispls, rows


def case_all_gather_v(ctx, seed):
    """AllGatherV with bound host counts (every movable dtype), then once with counts read from
    the tensors themselves (no set_varaintpack_param)."""
    for index, dtype in enumerate(MOVABLE + [None]):
        bound = dtype is not None
        dtype = dtype or torch.float32
        send, rdispls, rows = _all_gather_v_layout(seed, ctx.world_size, index)
        xs = [rank_tensor(seed, r, (9, 2), dtype) for r in range(ctx.world_size)]
        golden = torch.zeros(rows * 2, dtype=dtype)
        for i in range(ctx.world_size):
            golden[rdispls[i] : rdispls[i] + send[i]] = xs[i].flatten()[: send[i]]
        golden = golden.reshape(rows, 2)
        op = make_op("AllGatherVOperation", ctx.param())
        if bound:
            bind(op, sendCount=send[ctx.rank], recvCounts=send, rdispls=rdispls)
        ins = [
            xs[ctx.rank],
            counts(send[ctx.rank]),
            counts(*send),
            counts(*rdispls),
            torch.zeros(rows, dtype=torch.int8),
        ]
        (y,) = op.execute(ins)
        assert_equal(y, golden, f"{ctx} AllGatherV {dtype} send={send} bound={bound}")


def case_reduce_scatter(ctx, seed):
    """ReduceScatter: y = (reduce over ranks of x)[rank*n : (rank+1)*n]."""
    n = 2
    for reduce_type in REDUCE_TYPES:
        op = make_op("ReduceScatterOperation", ctx.param(reduceType=reduce_type))
        for dtype in REDUCIBLE:
            xs = [
                rank_tensor(seed, r, (ctx.world_size * n, 3), dtype) for r in range(ctx.world_size)
            ]
            golden = reduce_golden(xs, reduce_type, dtype)[ctx.rank * n : (ctx.rank + 1) * n]
            (y,) = op.execute([xs[ctx.rank]])
            assert_reduced(y, golden, f"{ctx} ReduceScatter {reduce_type} {dtype}")


def case_reduce_scatter_v_atb(ctx, seed):
    """ATB's ReduceScatterV case (2 ranks): x = [[0],[1],[2],[3],[4]] on both, sendCounts [2, 3],
    sdispls [0, 2], recvCount 2 / 3 -> [[0],[2]] on rank 0 and [[4],[6],[8]] on rank 1."""
    assert ctx.world_size == 2
    recv = [2, 3][ctx.rank]
    expected = [[[0], [2]], [[4], [6], [8]]][ctx.rank]
    op = make_op("ReduceScatterVOperation", ctx.param(reduceType="sum"))
    bind(op, sendCounts=[2, 3], sdispls=[0, 2], recvCount=recv)
    for dtype in REDUCIBLE:
        x = torch.tensor([[0], [1], [2], [3], [4]], dtype=dtype)
        (y,) = op.execute(
            [x, counts(2, 3), counts(0, 2), counts(recv), torch.zeros(recv, dtype=torch.int64)]
        )
        assert_equal(y, torch.tensor(expected, dtype=dtype), f"{ctx} ReduceScatterV ATB {dtype}")


def case_reduce_scatter_v(ctx, seed):
    """ReduceScatterV, uneven: rank r receives c_r elements (0..4, so empty blocks occur) from
    blocks packed in reverse rank order; counts given as params and as bound host counts;
    out has a spare row whose elements must come back zero."""
    R, d1 = ctx.world_size, 2
    c = torch.randint(0, 5, (R,), generator=generator(seed, "rsv")).tolist()
    sdispls = [sum(c[r + 1 :]) for r in range(R)]  # reverse order: rank R-1's block first
    rows_in = (sum(c) + d1 - 1) // d1 + 1
    rows_out = (c[ctx.rank] + d1 - 1) // d1 + 1
    for reduce_type in REDUCE_TYPES:
        op = make_op(
            "ReduceScatterVOperation",
            ctx.param(reduceType=reduce_type, sendCounts=c, sdispls=sdispls, recvCount=c[ctx.rank]),
        )
        bind(op, sendCounts=c, sdispls=sdispls, recvCount=c[ctx.rank])
        for dtype in REDUCIBLE:
            xs = [rank_tensor(seed, r, (rows_in, d1), dtype) for r in range(R)]
            lo = sdispls[ctx.rank]
            blocks = [x.flatten()[lo : lo + c[ctx.rank]] for x in xs]
            golden = torch.zeros(rows_out * d1, dtype=dtype)
            golden[: c[ctx.rank]] = reduce_golden(blocks, reduce_type, dtype)
            (y,) = op.execute(
                [
                    xs[ctx.rank],
                    counts(*c),
                    counts(*sdispls),
                    counts(c[ctx.rank]),
                    torch.zeros(rows_out, dtype=torch.int64),
                ]
            )
            assert_reduced(
                y,
                golden.reshape(rows_out, d1),
                f"{ctx} ReduceScatterV {reduce_type} {dtype} counts={c}",
            )


def case_broadcast(ctx, seed):
    """Broadcast from the last rank, in place; no outputs."""
    root = ctx.world_size - 1
    op = make_op("BroadcastOperation", ctx.param(rankRoot=root))
    for dtype in MOVABLE:
        x = rank_tensor(seed, ctx.rank, (4, 3), dtype)
        outs = op.execute([x])
        assert list(outs) == [], f"Broadcast returned {outs}"
        assert_equal(x, rank_tensor(seed, root, (4, 3), dtype), f"{ctx} Broadcast {dtype}")


def case_all_to_all(ctx, seed):
    """AllToAll plain (y = concat_j chunk_rank(x_j)) and transpose (x [H, W] -> [H*R, W/R],
    run through setup + execute_sync with a caller-provided workspace)."""
    R = ctx.world_size
    plain = make_op("AllToAllOperation", ctx.param())
    transpose = make_op("AllToAllOperation", ctx.param(transpose=True))
    for dtype in MOVABLE:
        xs = [rank_tensor(seed, r, (R * 2, 3), dtype) for r in range(R)]
        chunk = xs[0].numel() // R
        golden = torch.cat([x.flatten()[ctx.rank * chunk : (ctx.rank + 1) * chunk] for x in xs])
        (y,) = plain.execute([xs[ctx.rank]])
        assert_equal(y, golden.reshape(xs[0].shape), f"{ctx} AllToAll {dtype}")

        xs = [rank_tensor(seed, r, (2, 3 * R), dtype) for r in range(R)]
        golden = torch.cat([x[:, ctx.rank * 3 : (ctx.rank + 1) * 3] for x in xs], dim=0)
        out = torch.empty(2 * R, 3, dtype=dtype)
        setup = json.loads(transpose.setup([xs[ctx.rank]], [out]))
        assert setup["result"] == 0, setup
        workspace = torch.empty(setup["workspace_size"], dtype=torch.uint8)
        done = json.loads(transpose.execute_sync([xs[ctx.rank]], [out], workspace))
        assert done["result"] == 0, done
        assert_equal(out, golden, f"{ctx} AllToAll transpose {dtype}")


def alltoallv_layout(seed, world_size, tag=""):
    """A random uneven exchange: C[j][r] elements (0..4) go from rank j to rank r, at least one
    to each rank from itself. Senders lay blocks out in reverse rank order with a one-element
    gap between them; receivers pack blocks in rank order."""
    C = torch.randint(0, 5, (world_size, world_size), generator=generator(seed, "a2av", tag))
    C += torch.eye(world_size, dtype=C.dtype)
    C = C.tolist()
    sdispls = []
    for j in range(world_size):
        offs, at = [0] * world_size, 0
        for r in reversed(range(world_size)):
            offs[r], at = at, at + C[j][r] + 1
        sdispls.append(offs)
    return C, sdispls


def alltoallv_rank(seed, world_size, rank, dtype, tag="", reverse_recv=False):
    """(x, sendCounts, sdispls, recvCounts, rdispls, golden y) of `rank` for alltoallv_layout.
    Received blocks are packed in rank order, or in reverse rank order with `reverse_recv` (a
    layout torch's split sizes cannot express, so engines must place the blocks themselves)."""
    C, sdispls = alltoallv_layout(seed, world_size, tag)
    xs = [rank_tensor(seed, j, (sum(C[j]) + world_size,), dtype) for j in range(world_size)]
    recv = [C[j][rank] for j in range(world_size)]
    order = list(reversed(range(world_size))) if reverse_recv else list(range(world_size))
    rdispls = [0] * world_size
    at = 0
    for j in order:
        rdispls[j], at = at, at + recv[j]
    golden = torch.cat(
        [xs[j][sdispls[j][rank] : sdispls[j][rank] + recv[j]] for j in order]
    ).reshape(1, -1)
    return xs[rank], C[rank], sdispls[rank], recv, rdispls, golden


def case_all_to_allv(ctx, seed):
    """AllToAllV: counts and displacements as params; y [1, sum(recvCounts)]."""
    for i, dtype in enumerate(MOVABLE):
        x, send, sd, recv, rd, golden = alltoallv_rank(
            seed, ctx.world_size, ctx.rank, dtype, reverse_recv=i % 2 == 1
        )
        op = make_op(
            "AllToAllVOperation",
            ctx.param(sendCounts=send, sdispls=sd, recvCounts=recv, rdispls=rd),
        )
        (y,) = op.execute([x])
        assert_equal(y, golden, f"{ctx} AllToAllV {dtype}")


SEED_DTYPES = [
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
]


def case_all_to_allvv2_seed(ctx, seed):
    """The AllToAllVV2 example of docs/operations.md, 2 ranks, backend "hccl", all 7 dtypes."""
    assert ctx.world_size == 2
    sendcount, senddisp = [[2, 4], [2, 1]], [[0, 2], [0, 2]]
    recvout, recvdis = [[2, 2], [4, 1]], [[0, 2], [0, 4]]
    op = make_op("AllToAllVV2Operation", ctx.param())
    bind(
        op,
        sendCounts=sendcount[ctx.rank],
        sdispls=senddisp[ctx.rank],
        recvCounts=recvout[ctx.rank],
        rdispls=recvdis[ctx.rank],
    )
    for dtype in SEED_DTYPES:
        xs = [
            torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]], dtype=dtype),
            torch.tensor([[0, 1, 2], [3, 4, 6]], dtype=dtype),
        ]
        goldens = [
            torch.tensor([[0, 1, 0, 1]], dtype=dtype),
            torch.tensor([[2, 3, 4, 5, 2]], dtype=dtype),
        ]
        hosts = [counts(*v[ctx.rank]) for v in (sendcount, senddisp, recvout, recvdis)]
        shape_carrier = torch.full((sum(recvout[ctx.rank]),), 3, dtype=torch.int8)
        (y,) = op.execute([xs[ctx.rank], *hosts, shape_carrier])
        assert_equal(y, goldens[ctx.rank], f"{ctx} AllToAllVV2 seed {dtype}")


def case_all_to_allvv2(ctx, seed):
    """AllToAllVV2 with random uneven counts, rebound on the same op object every step (the MoE
    pattern), every movable dtype."""
    op = make_op("AllToAllVV2Operation", ctx.param())
    for step, dtype in enumerate(MOVABLE):
        x, send, sd, recv, rd, golden = alltoallv_rank(
            seed, ctx.world_size, ctx.rank, dtype, tag=str(step), reverse_recv=step % 2 == 1
        )
        bind(op, sendCounts=send, sdispls=sd, recvCounts=recv, rdispls=rd)
        ins = [
            x,
            counts(*send),
            counts(*sd),
            counts(*recv),
            counts(*rd),
            torch.zeros(sum(recv), dtype=torch.int8),
        ]
        (y,) = op.execute(ins)
        assert_equal(y, golden, f"{ctx} AllToAllVV2 step {step} {dtype}")


def case_send_recv(ctx, seed):
    """Send/Recv between every ordered pair of ranks, in one global order that every rank walks
    (the first unfinished pair always has both ends ready, so blocking point-to-point cannot
    deadlock), every movable dtype."""
    R = ctx.world_size
    pairs = [(s, d) for s in range(R) for d in range(R) if s != d]
    for dtype in MOVABLE:
        for src, dst in pairs:
            payload = rank_tensor(seed, src * R + dst, (3, 2), dtype)
            if ctx.rank == src:
                op = make_op("SendOperation", ctx.param(destRank=dst))
                assert list(op.execute([payload])) == []
            elif ctx.rank == dst:
                op = make_op("RecvOperation", ctx.param(srcRank=src))
                (y,) = op.execute([torch.empty(3, 2, dtype=dtype)])
                assert_equal(y, payload, f"{ctx} Recv from {src} {dtype}")


def case_send_recv_ring(ctx, seed):
    """SendRecvOperation around the ring (send right, receive left) with no ordering between
    ranks, every movable dtype, small and past the 16 KiB single-copy threshold."""
    R = ctx.world_size
    right, left = (ctx.rank + 1) % R, (ctx.rank - 1) % R
    op = make_op("SendRecvOperation", ctx.param(destRank=right, srcRank=left))
    for dtype in MOVABLE:
        for shape in ((3, 2), (70001,)):
            (y,) = op.execute([rank_tensor(seed, ctx.rank, shape, dtype)])
            assert_equal(
                y,
                rank_tensor(seed, left, shape, dtype),
                f"{ctx} SendRecv from {left} {dtype} {shape}",
            )


def case_barrier(ctx, marker_dir):
    """Barrier: after it returns, every rank's pre-barrier marker file exists."""
    op = make_op("BarrierOperation", ctx.param())
    for round_ in range(3):
        with open(os.path.join(marker_dir, f"r{round_}-{ctx.rank}"), "w"):
            pass
        assert list(op.execute([])) == []
        missing = [
            r
            for r in range(ctx.world_size)
            if not os.path.exists(os.path.join(marker_dir, f"r{round_}-{r}"))
        ]
        assert not missing, f"{ctx} left barrier round {round_} before ranks {missing} entered"


def case_two_domains(ctx, seed):
    """Two commDomains used one after the other (A, B, A, B) by the same ranks; each keeps its
    own communicator and results."""
    base = ctx.domain or "pytest"
    ops = {
        name: make_op("AllReduceOperation", ctx.param(domain=f"{base}-{name}"))
        for name in ("a", "b")
    }
    for step, name in enumerate(["a", "b", "a", "b"]):
        xs = [rank_tensor(seed, r * 10 + step, (7,), torch.float32) for r in range(ctx.world_size)]
        (y,) = ops[name].execute([xs[ctx.rank]])
        assert_reduced(
            y, reduce_golden(xs, "sum", torch.float32), f"{ctx} domain {name} step {step}"
        )


def case_zero_size(ctx, seed):
    """Empty tensors move nothing and still come back with the right shapes; ops stay in step."""
    R = ctx.world_size
    runs = [
        ("AllReduceOperation", {}, torch.zeros(0, 4), [(0, 4)]),
        ("AllGatherOperation", {}, torch.zeros(0, 3), [(R, 0, 3)]),
        ("ReduceScatterOperation", {}, torch.zeros(0, 2), [(0, 2)]),
        ("AllToAllOperation", {}, torch.zeros(2, 0), [(2, 0)]),
        ("BroadcastOperation", {}, torch.zeros(0), []),
    ]
    for name, extra, x, shapes in runs:
        outs = make_op(name, ctx.param(**extra)).execute([x])
        assert [tuple(o.shape) for o in outs] == shapes, f"{ctx} {name}: {outs}"
    # AllToAllV where this rank sends nothing to anyone but itself.
    send = [1 if j == ctx.rank else 0 for j in range(R)]
    op = make_op(
        "AllToAllVOperation",
        ctx.param(sendCounts=send, sdispls=[0] * R, recvCounts=send, rdispls=[0] * R),
    )
    (y,) = op.execute([torch.tensor([ctx.rank + 0.5])])
    assert_equal(y, torch.tensor([[ctx.rank + 0.5]]), f"{ctx} AllToAllV self-only")


def case_rank_mismatch(ctx, seed=None):
    """Rank 1 expects 2 elements from rank 0, which sends 1: ERROR_RANK_MISMATCH on every rank,
    raised as RuntimeError (never a hang, never garbage)."""
    assert ctx.world_size == 2
    recv = [[1, 1], [2, 1]][ctx.rank]
    op = make_op("AllToAllVV2Operation", ctx.param())
    ins = [
        torch.arange(2, dtype=torch.float32),
        counts(1, 1),
        counts(0, 1),
        counts(*recv),
        counts(0, recv[0]),
        torch.zeros(sum(recv), dtype=torch.int8),
    ]
    try:
        op.execute(ins)
    except RuntimeError as e:
        assert "ERROR_RANK_MISMATCH" in str(e), f"{ctx}: {e}"
        return
    raise AssertionError(f"{ctx}: mismatched counts were not detected")


def case_random_schedule(ctx, seed):
    """24 random operations with random layouts (op_schedule.py)."""
    import op_schedule  # imported here: it builds on this module

    op_schedule.case_random_schedule(ctx, seed)


def case_all_reduce_quant(ctx, seed):
    """Quantised AllReduce: quantType x outDataType x shapes (quant_cases.py)."""
    import quant_cases  # imported here: it builds on this module

    quant_cases.case_all_reduce_quant(ctx, seed)


def case_all_reduce_quant_errors(ctx, seed=None):
    """Quantised AllReduce: every error rule with ATB's Status (quant_cases.py)."""
    import quant_cases

    quant_cases.case_all_reduce_quant_errors(ctx, seed)


GOLDEN_CASES = {
    "all_reduce": case_all_reduce,
    "all_gather": case_all_gather,
    "all_gather_v": case_all_gather_v,
    "reduce_scatter": case_reduce_scatter,
    "reduce_scatter_v": case_reduce_scatter_v,
    "broadcast": case_broadcast,
    "all_to_all": case_all_to_all,
    "all_to_allv": case_all_to_allv,
    "all_to_allvv2": case_all_to_allvv2,
    "send_recv": case_send_recv,
    "send_recv_ring": case_send_recv_ring,
    "two_domains": case_two_domains,
    "zero_size": case_zero_size,
    "random_schedule": case_random_schedule,
    "all_reduce_quant": case_all_reduce_quant,
    "all_reduce_quant_errors": case_all_reduce_quant_errors,
}
