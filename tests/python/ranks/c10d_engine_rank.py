"""One rank of the backend "c10d" golden job: every operation through OperationTorch on a
torch.distributed gloo group, checked against goldens computed independently on this rank.

Standalone, so the same body runs under pytest (tests/python/distributed/test_c10d_engine.py)
and as one rank of a job spread over network namespaces or hosts. Everything comes from the
environment:

    RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT   torch.distributed's env:// rendezvous
    COLLOPS_TEST_BACKEND   the ops' "backend" param: "c10d" (default), or e.g. "hccl" to run the
                           same goldens through the auto backend (hierarchical across hosts)
    COLLOPS_TEST_CASES     comma-separated subset of the case names below (default: all)
    COLLOPS_TEST_GROUP_BACKEND  the torch.distributed backend of the groups (default "gloo")

    PYTHONPATH=<repo>/python \\
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 c10d_engine_rank.py

Prints "rank R: <case> <domain>: PASS" per case and "rank R: ALL PASS" at the end; exits 0 only
when every case passed on this rank (a traceback and exit code 1 otherwise). Every rank must run
the same cases. Needs WORLD_SIZE >= 2; the p2p mismatch case uses ranks 0 and 1 only.
"""

import datetime
import os
import sys
import traceback

import torch
import torch.distributed as dist

# The shared harness modules (tests/python/harness) import by name.
_HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness")
if _HARNESS not in sys.path:
    sys.path.insert(0, _HARNESS)

import collops  # noqa: E402,F401  (registers OperationTorch and the c10d backend)
import golden_harness as golden  # noqa: E402
from rank_harness import RankContext  # noqa: E402

SEED = 11222026

# The golden cases that run on any named group (two_domains invents domain names, so it is
# replaced by case_default_and_subgroup here).
GROUP_CASES = [
    "all_reduce",
    "all_gather",
    "all_gather_v",
    "reduce_scatter",
    "reduce_scatter_v",
    "broadcast",
    "all_to_all",
    "all_to_allv",
    "all_to_allvv2",
    "send_recv",
    "send_recv_ring",
    "zero_size",
    "random_schedule",
    "all_reduce_quant",
    "all_reduce_quant_errors",
]


def expect_error(fn, status, *needles):
    """Runs fn(); asserts it raised RuntimeError naming `status` and every needle."""
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        missing = [n for n in (status,) + needles if n not in text]
        assert not missing, f"error lacks {missing}:\n{text}"
        return text
    raise AssertionError(f"expected {status} naming {needles}, but the call succeeded")


def execute(ctx, name, ins, **extra):
    return golden.make_op(name, ctx.param(**extra)).execute(ins)


# ---- cases beyond the shared goldens ------------------------------------------------------------


def case_not_initialised(ctx):
    """Before init_process_group: ERROR_BACKEND_UNAVAILABLE, the status hccl's auto choice reads
    as "this engine is not usable here"."""
    expect_error(
        lambda: execute(ctx, "AllReduceOperation", [torch.ones(3)]),
        "ERROR_BACKEND_UNAVAILABLE",
        "not initialised",
        "init_process_group",
    )


def case_bad_params(ctx, default_name):
    """Unknown group names and rank/rankSize that disagree with the group fail on every rank
    with ERROR_INVALID_PARAM naming the field (no communication happens)."""
    text = expect_error(
        lambda: execute(ctx, "AllReduceOperation", [torch.ones(3)], commDomain="no-such-group"),
        "ERROR_INVALID_PARAM",
        'commDomain "no-such-group"',
        "known groups",
        f'"{default_name}"',
    )
    assert "rank" in text
    expect_error(
        lambda: execute(ctx, "AllReduceOperation", [torch.ones(3)], rankSize=ctx.world_size + 1),
        "ERROR_INVALID_PARAM",
        f"rankSize = {ctx.world_size + 1}",
        f"has {ctx.world_size} ranks",
    )
    other = (ctx.rank + 1) % ctx.world_size
    expect_error(
        lambda: execute(ctx, "AllReduceOperation", [torch.ones(3)], rank=other),
        "ERROR_INVALID_PARAM",
        f"rank = {other}",
        f"this process is rank {ctx.rank}",
    )


def case_p2p_mismatch(ctx):
    """Send/Recv that disagree on count, then on dtype: both ranks get ERROR_RANK_MISMATCH naming
    both ranks and both values; the pair still works afterwards."""
    if ctx.rank > 1:
        return
    for send, recv, words in [
        ((3,), torch.float32, ("sends 3 elements of float", "expects 4 elements of float")),
        ((4,), torch.int32, ("sends 4 elements of float", "expects 4 elements of int32")),
    ]:
        if ctx.rank == 0:
            name, tensor, extra = "SendOperation", torch.ones(*send), {"destRank": 1}
        else:
            name, tensor, extra = "RecvOperation", torch.empty(4, dtype=recv), {"srcRank": 0}

        def fn(name=name, tensor=tensor, extra=extra):
            return execute(ctx, name, [tensor], **extra)

        expect_error(fn, "ERROR_RANK_MISMATCH", "rank 0", "rank 1", *words)
    payload = torch.arange(5, dtype=torch.int8)
    if ctx.rank == 0:
        execute(ctx, "SendOperation", [payload], destRank=1)
    else:
        (y,) = execute(ctx, "RecvOperation", [torch.empty(5, dtype=torch.int8)], srcRank=0)
        golden.assert_equal(y, payload, f"{ctx} Send/Recv after a mismatch")


def case_collective_mismatch(ctx):
    """Ranks that disagree on a collective's element count: ERROR_RANK_MISMATCH on every rank."""
    n = 4 if ctx.rank == 0 else 5
    expect_error(lambda: execute(ctx, "AllReduceOperation", [torch.ones(n)]), "ERROR_RANK_MISMATCH")


def case_barrier(ctx, store):
    """After Barrier returns, every rank's pre-barrier increment is in the store's counter.
    (store.add waits for the server's answer; a store.set may still be in flight when another
    rank looks, so it would prove nothing.)"""
    op = golden.make_op("BarrierOperation", ctx.param())
    for round_ in range(3):
        counter = f"collops-test/barrier/{ctx.domain}/{round_}"
        store.add(counter, 1)
        assert list(op.execute([])) == []
        arrived = store.add(counter, 0)
        assert arrived == ctx.world_size, (
            f"{ctx} left barrier round {round_} when only {arrived} ranks had entered"
        )


def case_default_and_subgroup(world_ctx, sub_ctx, seed):
    """The default group and a subgroup used alternately by the same ops objects' ranks."""
    for step in range(4):
        ctx = world_ctx if step % 2 == 0 or sub_ctx is None else sub_ctx
        xs = [
            golden.rank_tensor(seed, r * 10 + step, (7,), torch.float32)
            for r in range(ctx.world_size)
        ]
        (y,) = execute(ctx, "AllReduceOperation", [xs[ctx.rank]])
        golden.assert_reduced(
            y, golden.reduce_golden(xs, "sum", torch.float32), f"{ctx} alternating step {step}"
        )


def case_large_all_reduce(ctx, seed):
    """An AllReduce large enough that, on 2 hosts x 2 ranks (hierarchical), each rail swaps halves
    of its 8 MiB block between the hosts instead of the engine's AllReduce; float16 as float32
    blocks, rounded once."""
    n = (4 << 20) + 3
    for dtype in (torch.float32, torch.float16):
        xs = [golden.rank_tensor(seed, r, (n,), dtype) for r in range(ctx.world_size)]
        (y,) = execute(ctx, "AllReduceOperation", [xs[ctx.rank]])
        golden.assert_reduced(y, golden.reduce_golden(xs, "sum", dtype), f"{ctx} {n} x {dtype}")


def case_large_all_to_allv(ctx, seed):
    """An AllToAllV whose blocks between two hosts pass 60 KiB (2 hosts x 2 ranks, hierarchical:
    straight from rank to rank, the cross-host part started before the host's part), with gaps in
    the send layout and blocks received in reverse rank order, so the engine packs and places."""
    W, me = ctx.world_size, ctx.rank
    C = [[20000 + 1000 * ((j + 2 * i) % 3) for i in range(W)] for j in range(W)]
    gap = 7
    sdispls = [[sum(C[j][:i]) + gap * i for i in range(W)] for j in range(W)]
    xs = [
        golden.rank_tensor(seed, j, (sdispls[j][-1] + C[j][-1] + gap,), torch.float32)
        for j in range(W)
    ]
    recv = [C[j][me] for j in range(W)]
    rdispls, at = [0] * W, 0
    for j in reversed(range(W)):
        rdispls[j], at = at, at + recv[j]
    expected = torch.cat(
        [xs[j][sdispls[j][me] : sdispls[j][me] + recv[j]] for j in reversed(range(W))]
    ).reshape(1, -1)
    op = golden.make_op(
        "AllToAllVOperation",
        ctx.param(sendCounts=C[me], sdispls=sdispls[me], recvCounts=recv, rdispls=rdispls),
    )
    (y,) = op.execute([xs[me]])
    golden.assert_equal(y, expected, f"{ctx} large AllToAllV")


# ---- the job ------------------------------------------------------------------------------------


def selected(name):
    wanted = os.environ.get("COLLOPS_TEST_CASES", "")
    return not wanted or name in wanted.split(",")


def run_case(rank, name, fn, *args):
    if not selected(name.split(" ")[0]):
        return
    fn(*args)
    print(f"rank {rank}: {name}: PASS", flush=True)


def make_subgroup(rank, world_size, store):
    """new_group over ranks 1..W-1 (all ranks when W = 2, so it is a second group of the same
    ranks). Returns (group or None on non-members, its name, its ranks)."""
    ranks = list(range(1, world_size)) if world_size >= 3 else list(range(world_size))
    group = dist.new_group(ranks=ranks)
    if rank == ranks[0]:
        store.set("collops-test/subgroup-name", group.group_name)
    name = store.get("collops-test/subgroup-name").decode()
    return (group if rank in ranks else None), name, ranks


def main():
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend = os.environ.get("COLLOPS_TEST_BACKEND", "c10d")
    assert world_size >= 2, "the c10d engine job needs WORLD_SIZE >= 2"
    os.environ.setdefault("COLLOPS_TIMEOUT", "60")
    os.environ.setdefault("COLLOPS_JOB_ID", f"c10d-engine-{os.environ.get('MASTER_PORT', '')}")
    pre = RankContext(rank, world_size, 0, "", backend)
    if backend == "c10d":
        run_case(rank, "not_initialised", case_not_initialised, pre)

    dist.init_process_group(
        os.environ.get("COLLOPS_TEST_GROUP_BACKEND", "gloo"),
        init_method="env://",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        store = dist.distributed_c10d._get_default_store()
        default_name = dist.distributed_c10d._get_default_group().group_name
        world = RankContext(rank, world_size, 0, "", backend)
        group, sub_name, sub_ranks = make_subgroup(rank, world_size, store)
        sub = (
            RankContext(sub_ranks.index(rank), len(sub_ranks), 0, sub_name, backend)
            if group is not None
            else None
        )

        for ctx in [world] + ([sub] if sub is not None else []):
            label = f"domain {ctx.domain!r}"
            for name in GROUP_CASES:
                run_case(rank, f"{name} {label}", golden.GOLDEN_CASES[name], ctx, SEED)
            run_case(rank, f"barrier {label}", case_barrier, ctx, store)
        dist.barrier()  # non-members of the subgroup wait here for its members
        run_case(rank, "large_all_reduce", case_large_all_reduce, world, SEED)
        run_case(rank, "large_all_to_allv", case_large_all_to_allv, world, SEED)
        run_case(
            rank,
            "default_and_subgroup",
            case_default_and_subgroup,
            world,
            sub if world_size == 2 else None,
            SEED,
        )
        if backend == "c10d":
            run_case(rank, "bad_params", case_bad_params, world, default_name)
            if sub is None:
                # Outside the subgroup its name is unknown here: INVALID_PARAM, not a hang.
                run_case(
                    rank,
                    "non_member",
                    lambda: expect_error(
                        lambda: execute(
                            world, "AllReduceOperation", [torch.ones(2)], commDomain=sub_name
                        ),
                        "ERROR_INVALID_PARAM",
                        f'commDomain "{sub_name}"',
                    ),
                )
            run_case(rank, "p2p_mismatch", case_p2p_mismatch, world)
            run_case(rank, "collective_mismatch", case_collective_mismatch, world)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    print(f"rank {rank}: ALL PASS", flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: B902 -- every failure must show and set the exit code
        traceback.print_exc()
        sys.stdout.flush()
        sys.exit(1)
