"""The torch.distributed backend "collops": every collective against golden values computed
independently on each rank, futures, strided tensors, sub-groups, a clear dtype error, and the
group under TORCH_DISTRIBUTED_DEBUG=DETAIL."""

import os
import time

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import run_group_job
from rank_harness import in_lccl_segment

WORLD = 3


def _data(rank, n=5, dtype=torch.float32):
    return (torch.arange(n, dtype=torch.float32) * (rank + 1) + rank).to(dtype)


def _collectives(ctx):
    rank, world = ctx.rank, ctx.world_size
    others = [_data(r) for r in range(world)]

    # allreduce: every ReduceOp the backend maps, reductions in several dtypes.
    golden = {
        dist.ReduceOp.SUM: torch.stack(others).sum(0),
        dist.ReduceOp.PRODUCT: torch.stack(others).prod(0),
        dist.ReduceOp.MIN: torch.stack(others).min(0).values,
        dist.ReduceOp.MAX: torch.stack(others).max(0).values,
        dist.ReduceOp.AVG: torch.stack(others).mean(0),
    }
    for op, want in golden.items():
        t = _data(rank)
        dist.all_reduce(t, op=op)
        torch.testing.assert_close(t, want, msg=f"allreduce {op}")
    for dtype in (
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bfloat16,
        torch.float16,
    ):
        t = _data(rank, dtype=dtype)
        dist.all_reduce(t)
        want = torch.stack([_data(r, dtype=dtype).float() for r in range(world)]).sum(0)
        torch.testing.assert_close(t.float(), want, atol=0, rtol=2**-7)
        assert t.dtype == dtype
    # float64 keeps what float32 would lose; complex is reduced as its (real, imag) pairs.
    fine = [_data(r, dtype=torch.float64) + 2.0**-40 * (r + 1) for r in range(world)]
    t = fine[rank].clone()
    dist.all_reduce(t)
    assert torch.equal(t, sum(fine)), (t, sum(fine))
    for dtype in (torch.complex64, torch.complex128):
        z = [torch.complex(_data(r), -_data(r + 1)).to(dtype) for r in range(world)]
        t = z[rank].clone()
        dist.all_reduce(t)
        assert torch.equal(t, sum(z)), dtype
    # bool as gloo and NCCL reduce it: SUM/MAX = any, PRODUCT/MIN = all; results stay bool.
    flags = [torch.tensor([r == 0, True, False, r == world - 1]) for r in range(world)]
    for op, want in (
        (dist.ReduceOp.SUM, torch.stack(flags).any(0)),
        (dist.ReduceOp.MAX, torch.stack(flags).any(0)),
        (dist.ReduceOp.PRODUCT, torch.stack(flags).all(0)),
        (dist.ReduceOp.MIN, torch.stack(flags).all(0)),
    ):
        t = flags[rank].clone()
        dist.all_reduce(t, op=op)
        assert t.dtype == torch.bool and torch.equal(t, want), (op, t)
        assert t.view(torch.uint8).max() <= 1
    part = torch.empty(2, dtype=torch.bool)
    dist.reduce_scatter_single(part, torch.tensor([rank == 0, False] * world))
    assert torch.equal(part, torch.tensor([True, False]))

    # A strided (transposed) tensor is reduced in place through a contiguous copy.
    m = (torch.arange(6.0).view(2, 3) + rank).t()
    dist.all_reduce(m)
    torch.testing.assert_close(m, sum(torch.arange(6.0).view(2, 3) + r for r in range(world)).t())

    # The Work of an async call is complete and its future holds the outputs (DDP needs this).
    t = _data(rank)
    work = dist.all_reduce(t, async_op=True)
    assert work.is_completed() and work.wait()
    (fut_out,) = work.get_future().wait()
    torch.testing.assert_close(fut_out, golden[dist.ReduceOp.SUM])

    # all_gather with different sizes per rank, and all_gather_single.
    outs = [torch.zeros(2 + r, dtype=torch.int64) for r in range(world)]
    dist.all_gather(outs, torch.arange(2 + rank, dtype=torch.int64) + 10 * rank)
    for r in range(world):
        assert torch.equal(outs[r], torch.arange(2 + r, dtype=torch.int64) + 10 * r)
    flat = torch.empty(world * 5)
    dist.all_gather_single(flat, _data(rank))
    assert torch.equal(flat, torch.cat(others))

    # reduce_scatter: list with uneven sizes, and the tensor form.
    sizes = [1 + r for r in range(world)]
    ins = [torch.full((sizes[j],), float(rank + j)) for j in range(world)]
    out = torch.empty(sizes[rank])
    dist.reduce_scatter(out, ins)
    assert torch.equal(out, torch.full((sizes[rank],), float(sum(r + rank for r in range(world)))))
    big = torch.arange(world * 4, dtype=torch.float32) * (rank + 1)
    part = torch.empty(4)
    dist.reduce_scatter_single(part, big)
    full = sum(torch.arange(world * 4, dtype=torch.float32) * (r + 1) for r in range(world))
    assert torch.equal(part, full[rank * 4 : (rank + 1) * 4])

    # all_to_all_single: even, and uneven (rank r sends j+1 rows of width 2 to rank j).
    src = torch.arange(world * 2.0) + 100 * rank
    dst = torch.empty(world * 2)
    dist.all_to_all_single(dst, src)
    assert torch.equal(
        dst, torch.cat([torch.arange(rank * 2.0, rank * 2 + 2) + 100 * j for j in range(world)])
    )
    in_splits = [j + 1 for j in range(world)]
    src = torch.cat([torch.full((j + 1, 2), float(10 * rank + j)) for j in range(world)])
    dst = torch.empty((rank + 1) * world, 2)
    dist.all_to_all_single(dst, src, [rank + 1] * world, in_splits)
    assert torch.equal(
        dst, torch.cat([torch.full((rank + 1, 2), float(10 * j + rank)) for j in range(world)])
    )
    # all_to_all (lists, sizes per pair).
    ins = [torch.full((rank + j + 1,), float(rank * 10 + j)) for j in range(world)]
    outs = [torch.empty(j + rank + 1) for j in range(world)]
    dist.all_to_all(outs, ins)
    for j in range(world):
        assert torch.equal(outs[j], torch.full((j + rank + 1,), float(j * 10 + rank)))

    # Rooted collectives.
    t = _data(rank)
    dist.broadcast(t, src=2)
    assert torch.equal(t, others[2])
    t = _data(rank)
    dist.reduce(t, dst=1, op=dist.ReduceOp.MAX)
    if rank == 1:
        assert torch.equal(t, golden[dist.ReduceOp.MAX])
    else:
        assert torch.equal(t, _data(rank))
    gl = [torch.empty(5) for _ in range(world)] if rank == 0 else None
    dist.gather(_data(rank), gl, dst=0)
    if rank == 0:
        assert all(torch.equal(gl[r], others[r]) for r in range(world))
    out = torch.empty(3)
    dist.scatter(
        out, [torch.full((3,), float(r)) for r in range(world)] if rank == 1 else None, src=1
    )
    assert torch.equal(out, torch.full((3,), float(rank)))
    dist.barrier()

    # Point to point around the ring.
    right, left = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(4, dtype=torch.float64)
    if rank % 2 == 0:
        dist.send(torch.full((4,), rank, dtype=torch.float64), right)
        dist.recv(got, left)
    else:
        dist.recv(got, left)
        dist.send(torch.full((4,), rank, dtype=torch.float64), right)
    assert torch.equal(got, torch.full((4,), left, dtype=torch.float64))

    # Coalesced variants, as functional collectives issue them.
    import torch.distributed._functional_collectives as funcol

    a, b = _data(rank), _data(rank, n=3)
    ra, rb = funcol.all_reduce_coalesced([a, b], "sum", dist.group.WORLD)
    torch.testing.assert_close(ra, golden[dist.ReduceOp.SUM])
    torch.testing.assert_close(rb, sum(_data(r, n=3) for r in range(world)))
    ga, gb = funcol.all_gather_single_coalesced([a, b], dist.group.WORLD)
    assert torch.equal(ga, torch.cat(others))
    assert torch.equal(gb, torch.cat([_data(r, n=3) for r in range(world)]))
    (sa,) = funcol.reduce_scatter_single_coalesced(
        [torch.arange(world * 2.0)], "sum", [0], dist.group.WORLD
    )
    assert torch.equal(sa, world * torch.arange(rank * 2.0, rank * 2 + 2))

    # Reductions on a dtype collops cannot reduce, or AVG of integers, fail on every rank with a
    # message before any data moves, never hang.
    for bad, op, message in (
        (torch.ones(2, dtype=torch.uint16), dist.ReduceOp.SUM, "reductions support"),
        (torch.ones(2, dtype=torch.int32), dist.ReduceOp.AVG, "AVG needs a floating-point tensor"),
    ):
        try:
            dist.all_reduce(bad, op=op)
        except RuntimeError as e:
            assert message in str(e), e
        else:
            raise AssertionError(f"{bad.dtype} {op} allreduce did not raise")
    t = torch.ones(2)
    dist.all_reduce(t)  # and the group still works
    assert torch.equal(t, torch.full((2,), float(world)))


def _subgroups(ctx):
    rank = ctx.rank
    # Two overlapping sub-groups, each with its own communicator; every rank creates both.
    g02 = dist.new_group([0, 2], backend="collops")
    g12 = dist.new_group([1, 2], backend="collops")
    if rank in (0, 2):
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=g02)
        assert torch.equal(t, torch.full((4,), 4.0)), t
        t = torch.full((2,), float(rank))
        dist.broadcast(t, src=2, group=g02)
        assert torch.equal(t, torch.full((2,), 2.0))
    if rank in (1, 2):
        outs = [torch.empty(1 + i) for i in range(2)]
        dist.all_gather(outs, torch.full((1 + dist.get_rank(g12),), float(rank)), group=g12)
        assert torch.equal(outs[0], torch.tensor([1.0])) and torch.equal(
            outs[1], torch.tensor([2.0, 2.0])
        )
    t = torch.ones(3)
    dist.all_reduce(t)  # the world group still works after the sub-groups ran
    assert torch.equal(t, torch.full((3,), 3.0))
    return dist.get_backend(g12 if rank == 1 else g02)


def _job(ctx):
    _collectives(ctx)
    return _subgroups(ctx)


def test_c10d_backend_collectives_and_subgroups():
    assert run_group_job(WORLD, _job) == ["collops"] * WORLD


def _mixed(ctx):
    # "cpu:collops" in a device-mapped backend string selects collops for CPU tensors.
    t = torch.full((3,), float(ctx.rank))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), 1.0))
    return str(dist.get_backend())


def test_c10d_backend_device_string():
    assert run_group_job(2, _mixed, backend="cpu:collops")[0] == "cpu:collops"


def _shared_buffers(ctx):
    import collops.distributed as cdist

    rank, world = ctx.rank, ctx.world_size
    n = 100003  # beyond the whole-piece size: the direct paths run
    x = cdist.empty_shared((n,), torch.float32)
    assert x.shape == (n,) and x.dtype == torch.float32 and in_lccl_segment(x)
    x.copy_(torch.arange(n, dtype=torch.float32) % 89 * (rank + 1))
    dist.all_reduce(x)
    torch.testing.assert_close(
        x, torch.arange(n, dtype=torch.float32) % 89 * (world * (world + 1) / 2), atol=0, rtol=0
    )

    # all_to_all_single, uneven splits, int8 (the MoE dispatch pattern), shared input and output.
    split = [(rank + j) % 3 * 20000 + 1 for j in range(world)]
    recv = [(j + rank) % 3 * 20000 + 1 for j in range(world)]
    src = cdist.empty_shared(sum(split), torch.int8)
    src.copy_((torch.arange(sum(split)) % 101 + rank).to(torch.int8))
    out = cdist.empty_shared(sum(recv), torch.int8)
    dist.all_to_all_single(out, src, recv, split)
    want = torch.cat(
        [
            (
                (torch.arange(sum((j + d) % 3 * 20000 + 1 for d in range(world))) % 101 + j).to(
                    torch.int8
                )
            )[sum((j + d) % 3 * 20000 + 1 for d in range(rank)) :][: recv[j]]
            for j in range(world)
        ]
    )
    assert torch.equal(out, want)

    # Other shapes and dtypes view the same kind of memory.
    m = cdist.empty_shared((3, 4), torch.bfloat16)
    assert m.shape == (3, 4) and m.dtype == torch.bfloat16 and in_lccl_segment(m)
    return True


def test_c10d_backend_shared_buffers():
    assert run_group_job(3, _shared_buffers) == [True] * 3


def _debug_detail(ctx):
    # The level is read when the group is created; set in the rank before init_process_group.
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level_from_env()


def _under_debug_detail(ctx):
    import collops.distributed as cdist
    from collops import _c10d_backend

    rank, world = ctx.rank, ctx.world_size
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    # torch checks every collective of the group over gloo first, through its wrapper.
    assert type(backend).__name__ == "_ProcessGroupWrapper", type(backend)
    # The wrapper compares the number of collectives each rank issued: one more per collective.
    before = backend._get_sequence_number_for_group()
    t = torch.full((4,), float(rank))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(sum(range(world)))))
    split = [rank + j + 1 for j in range(world)]
    out = torch.empty(sum(j + rank + 1 for j in range(world)), dtype=torch.int8)
    dist.all_to_all_single(
        out,
        torch.full((sum(split),), rank, dtype=torch.int8),
        [j + rank + 1 for j in range(world)],
        split,
    )
    assert torch.equal(
        out, torch.cat([torch.full((j + rank + 1,), j, dtype=torch.int8) for j in range(world)])
    )
    dist.barrier()
    assert backend._get_sequence_number_for_group() == before + 3
    numbers = [None] * world
    dist.all_gather_object(numbers, backend._get_sequence_number_for_group())
    assert len(set(numbers)) == 1, numbers

    # The collops helpers find the backend inside the wrapper.
    assert _c10d_backend.communicator_name() == "lccl"
    assert in_lccl_segment(cdist.empty_shared((1000,), torch.float32))

    # An isend nobody waited for still runs before the next collective: before the wrapper's own
    # barrier, which the receiving rank would never reach.
    if rank == 0:
        pending = dist.isend(torch.arange(9.0), 1)
    elif rank == 1:
        got = torch.empty(9)
        dist.recv(got, 0)
        assert torch.equal(got, torch.arange(9.0))
    dist.all_reduce(t)
    if rank == 0:
        assert pending.is_completed() and pending.wait()

    # DDP trains (over plain gloo it crashes in this mode, torch 2.13): after two steps both
    # ranks hold the parameters of a local model trained on the mean of both ranks' losses.
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(7)
    reference = torch.nn.Linear(4, 2)
    ddp = DDP(torch.nn.Linear(4, 2))
    ddp.module.load_state_dict(reference.state_dict())
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(2):
        batches = [
            torch.randn(3, 4, generator=torch.Generator().manual_seed(10 * step + r))
            for r in range(world)
        ]
        ddp(batches[rank]).pow(2).sum().backward()
        ddp_opt.step()
        ddp_opt.zero_grad()
        (sum(reference(b).pow(2).sum() for b in batches) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for mine, want in zip(ddp.module.parameters(), reference.parameters()):
        torch.testing.assert_close(mine, want)

    # Ranks that call different collectives get torch's description of both.
    with pytest.raises(RuntimeError, match="Detected mismatch between collectives") as raised:
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, 0)
    return str(raised.value)


def test_c10d_backend_under_torch_distributed_debug_detail():
    for message in run_group_job(2, _under_debug_detail, before_init=_debug_detail):
        assert "OpType=ALLREDUCE" in message and "OpType=BROADCAST" in message, message


def _dtype_mismatches(ctx):
    # The tensor forms move bytes as they are, so another output dtype would reinterpret them
    # (int32 outputs held the bits of 1.0f); gloo refuses such calls as well.
    with pytest.raises(
        RuntimeError,
        match=r"all_gather_into_tensor output has dtype Int but the "
        r"input has Float",
    ):
        dist.all_gather_into_tensor(
            torch.zeros(2 * ctx.world_size, dtype=torch.int32), torch.ones(2)
        )
    with pytest.raises(
        RuntimeError,
        match=r"reduce_scatter_tensor output has dtype Float but the "
        r"input has Double",
    ):
        dist.reduce_scatter_tensor(
            torch.zeros(2), torch.ones(2 * ctx.world_size, dtype=torch.float64)
        )
    # The group goes on.
    t = torch.ones(2)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((2,), float(ctx.world_size)))


def test_c10d_backend_refuses_an_output_dtype_other_than_the_inputs():
    run_group_job(2, _dtype_mismatches)


def _scatter_list_lengths(ctx):
    out = torch.zeros(2)
    # (torch itself refuses an empty list.) A longer list must not be ignored, nor a shorter one,
    # on more ranks, read counts past the end of the packed list.
    for wrong in (2, 3):
        with pytest.raises(
            RuntimeError,
            match=rf"scatter needs 1 tensors in scatter_list on the "
            rf"root, got {wrong}",
        ):
            dist.scatter(out, [torch.ones(2)] * wrong, src=0)
    dist.scatter(out, [torch.full((2,), 3.0)], src=0)
    assert torch.equal(out, torch.full((2,), 3.0))


def test_c10d_backend_scatter_checks_the_list_length_on_the_root():
    # One rank: the root is the only one to check, and no peer waits on its refusal.
    run_group_job(1, _scatter_list_lengths)


def _gather_dtypes_that_disagree(ctx):
    # Same byte size, other dtype on rank 1: both ranks refuse, naming the dtypes, since moving
    # the bytes would hand each rank the other's bits reinterpreted (1065353216 for 1.0f).
    dtype = torch.float32 if ctx.rank == 0 else torch.int32
    mine = torch.ones(2, dtype=dtype)
    with pytest.raises(RuntimeError, match=r"ERROR_RANK_MISMATCH.*dtype"):
        dist.all_gather([torch.zeros(2, dtype=dtype) for _ in range(ctx.world_size)], mine)
    with pytest.raises(RuntimeError, match=r"ERROR_RANK_MISMATCH.*dtype"):
        dist.all_gather_into_tensor(torch.zeros(2 * ctx.world_size, dtype=dtype), mine)
    # The group goes on, and complex (moved as bytes) still gathers.
    out = [torch.zeros(2, dtype=torch.complex64) for _ in range(ctx.world_size)]
    dist.all_gather(out, torch.full((2,), complex(ctx.rank, 1), dtype=torch.complex64))
    assert all(
        torch.equal(o, torch.full((2,), complex(r, 1), dtype=torch.complex64))
        for r, o in enumerate(out)
    )


def test_c10d_backend_gathers_refuse_ranks_whose_dtypes_disagree():
    run_group_job(2, _gather_dtypes_that_disagree)


def _broadcast_and_all_to_all_dtypes_that_disagree(ctx):
    # Same byte size, other dtype on rank 1: both ranks refuse, naming the dtypes, since moving
    # the bytes would hand rank 1 the bits of 1.0f as int32 (1065353216).
    dtype = torch.float32 if ctx.rank == 0 else torch.int32
    with pytest.raises(RuntimeError, match=r"ERROR_RANK_MISMATCH.*dtype"):
        dist.broadcast(torch.ones(4, dtype=dtype), src=0)
    with pytest.raises(RuntimeError, match=r"ERROR_RANK_MISMATCH.*dtype"):
        dist.all_to_all_single(torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype))
    # The group goes on, in elements: uneven rows of float64 (rank r sends r + 1 rows to each).
    mine = torch.full((2 * (ctx.rank + 1), 2), float(ctx.rank), dtype=torch.float64)
    out = torch.zeros(3, 2, dtype=torch.float64)
    dist.all_to_all_single(
        out, mine, output_split_sizes=[1, 2], input_split_sizes=[ctx.rank + 1] * 2
    )
    assert torch.equal(out, torch.tensor([[0.0] * 2, [1.0] * 2, [1.0] * 2], dtype=torch.float64))
    return True


def test_c10d_backend_broadcast_and_all_to_all_refuse_ranks_whose_dtypes_disagree():
    assert all(run_group_job(2, _broadcast_and_all_to_all_dtypes_that_disagree))


def _sparse_tensors(ctx):
    # Every collective refuses a sparse COO tensor, naming itself and the argument, on every rank
    # before any data moves (one that reached is_contiguous() raised torch's "unsupported memory
    # format option Contiguous"). The backend's own methods are called here, as Python may;
    # torch.distributed reaches the same refusals (test_c10d_layout_dispatch.py). Every rank
    # passes the same misuse, so every rank refuses and the group stays in step.
    world = ctx.world_size
    b = dist.group.WORLD._get_backend(torch.device("cpu"))
    dense = torch.ones(2 * world)
    coo = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (2 * world,))
    peer = (ctx.rank + 1) % world
    cases = [
        ("allreduce", "tensor", lambda: dist.all_reduce(coo)),
        ("allreduce", "tensor", lambda: b.allreduce([coo])),
        ("broadcast", "tensor", lambda: b.broadcast([coo])),
        ("reduce", "tensor", lambda: b.reduce([coo])),
        ("all_gather_into_tensor", "input_tensor", lambda: b._allgather_base(dense, coo)),
        ("all_gather_into_tensor", "output_tensor", lambda: b._allgather_base(coo, dense[:2])),
        ("allgather", "tensor", lambda: b.allgather([[dense] * world], [coo])),
        ("allgather", "tensor_list", lambda: b.allgather([[coo] * world], [dense])),
        ("reduce_scatter_tensor", "input", lambda: b._reduce_scatter_base(dense[:2], coo)),
        ("reduce_scatter_tensor", "output", lambda: b._reduce_scatter_base(coo, dense)),
        ("reduce_scatter", "input_list", lambda: b.reduce_scatter([dense], [[coo] * world])),
        ("reduce_scatter", "output", lambda: b.reduce_scatter([coo], [[dense] * world])),
        ("all_to_all_single", "input", lambda: b.alltoall_base(dense, coo, [], [])),
        ("all_to_all_single", "output", lambda: b.alltoall_base(coo, dense, [], [])),
        ("all_to_all", "input_tensor_list", lambda: b.alltoall([dense] * world, [coo] * world)),
        ("all_to_all", "output_tensor_list", lambda: b.alltoall([coo] * world, [dense] * world)),
        ("gather", "tensor", lambda: b.gather([[dense] * world], [coo])),
        ("scatter", "tensor", lambda: b.scatter([coo], [[dense] * world])),
        ("scatter", "scatter_list", lambda: b.scatter([dense], [[coo] * world])),
    ]

    def refused(what, arg):
        return pytest.raises(
            RuntimeError,
            match=rf"collops backend: {what}: {arg} must be a dense \(strided\) tensor, got "
            r"layout torch.sparse_coo; call .to_dense\(\) first",
        )

    for what, arg, call in cases:
        with refused(what, arg):
            call()
    # A refused send or recv runs as a refusal with its group, which tells the peer, and raises
    # when waited on; both ranks refuse both here, and the refusals meet.
    works = [("send", b.send([coo], peer, 0)), ("recv", b.recv([coo], peer, 0))]
    for what, work in works:
        with refused(what, "tensor"):
            work.wait()
    t = coo.to_dense()
    dist.all_reduce(t)
    assert torch.equal(t, torch.tensor([1.0, 0.0, 2.0] + [0.0] * (2 * world - 3)) * world)
    return len(cases) + len(works)


def test_c10d_backend_refuses_tensors_that_are_not_strided_naming_the_argument():
    assert run_group_job(2, _sparse_tensors) == [21, 21]


def _one_rank_refuses(ctx):
    # Only rank 0 passes a sparse tensor: it refuses, and its peers, already in the call, fail at
    # once naming it instead of waiting for the group's timeout; then the group goes on in step.
    dense = torch.ones(4)
    dist.all_reduce(dense)  # the communicator exists: a refusal can be told through it
    coo = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,))
    b = dist.group.WORLD._get_backend(torch.device("cpu"))
    for call in (dist.all_reduce, lambda t: b.broadcast([t])):
        start = time.monotonic()
        if ctx.rank == 0:
            with pytest.raises(RuntimeError, match=r"tensor must be a dense \(strided\) tensor"):
                call(coo)
        else:
            with pytest.raises(
                RuntimeError, match=r"ERROR_RANK_MISMATCH.*rank 0.*ERROR_INVALID_TENSOR_FORMAT"
            ):
                call(torch.ones(4))
        assert time.monotonic() - start < GROUP_TIMEOUT / 4
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), 2.0))
    return True


GROUP_TIMEOUT = 60


def test_c10d_backend_a_rank_refusing_a_sparse_tensor_does_not_hold_its_peers():
    assert all(run_group_job(2, _one_rank_refuses, group_timeout=GROUP_TIMEOUT))
