"""Point to point on the torch.distributed backend "collops" as torch means it: isend/irecv return
at once and complete when waited on, so rings in which every rank sends first
(batch_isend_irecv, isend then recv) finish instead of timing out, and mismatches raise on both
sides without poisoning the group."""

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import run_group_job


def _message(src, dst, n, dtype=torch.float32):
    return (torch.arange(n, dtype=torch.float64) % 1000 + 1000 * src + 100000 * dst).to(dtype)


def _rings(ctx):
    rank, world = ctx.rank, ctx.world_size
    right, left = (rank + 1) % world, (rank - 1) % world
    # 0 elements, a few, and 1 MiB (the lccl single-copy path) in several dtypes.
    for n, dtype in (
        (0, torch.float32),
        (5, torch.int64),
        (1 << 18, torch.float32),
        (3000, torch.int8),
    ):
        got = torch.full((n,), -1, dtype=dtype)
        ops = [
            dist.P2POp(dist.isend, _message(rank, right, n, dtype), right),
            dist.P2POp(dist.irecv, got, left),
        ]
        if rank % 2:
            ops.reverse()
        works = dist.batch_isend_irecv(ops)
        for w in works:
            w.wait()
        assert torch.equal(got, _message(left, rank, n, dtype)), (n, dtype)

    # Every rank isends first and then receives with a blocking recv.
    x, y = _message(rank, right, 70001), torch.empty(70001)
    work = dist.isend(x, right)
    dist.recv(y, left)
    work.wait()
    assert torch.equal(y, _message(left, rank, 70001))

    # Every pair at once, two messages each way, into a strided (transposed) tensor.
    works, expected = [], []
    for peer in range(world):
        if peer == rank:
            continue
        for m in range(2):
            works.append(dist.isend(_message(rank, peer, 6 + 2 * m), peer))
    for peer in range(world):
        if peer == rank:
            continue
        for m in range(2):
            got = torch.empty(2, 4).t() if m else torch.empty(6)
            works.append(dist.irecv(got, peer))
            expected.append((got, _message(peer, rank, 6 + 2 * m)))
    for w in works:
        w.wait()
    for got, want in expected:
        assert torch.equal(got.reshape(-1), want)

    # A queued isend runs before the next collective (program order), without an explicit wait.
    if rank == 0:
        pending = dist.isend(_message(0, 1, 9), 1)
        assert not pending.is_completed()
    elif rank == 1:
        got = torch.empty(9)
        dist.recv(got, 0)
        assert torch.equal(got, _message(0, 1, 9))
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    assert total.item() == sum(range(world))
    if rank == 0:
        assert pending.is_completed() and pending.wait()
        (sent,) = pending.get_future().wait()
        assert torch.equal(sent, _message(0, 1, 9))


def _future_only(ctx):
    # Waiting on an isend's future alone, never on the Work, completes: get_future() runs the
    # queue as wait() does, or a rank that only waits on futures would hang.
    if ctx.rank == 0:
        (sent,) = dist.isend(_message(0, 1, 7), 1).get_future().wait()
        assert torch.equal(sent, _message(0, 1, 7))
    else:
        got = torch.empty(7)
        dist.recv(got, 0)
        assert torch.equal(got, _message(0, 1, 7))


def test_waiting_on_an_isends_future_alone_sends_it():
    run_group_job(2, _future_only)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_rings_where_every_rank_sends_first(world):
    run_group_job(world, _rings)


def _mismatch(ctx):
    rank = ctx.rank
    if rank == 0:
        work = dist.isend(torch.ones(5), 1)
    else:
        work = dist.irecv(torch.zeros(4), 0)
    # The engine saw bytes; the message says so, or "20 elements of int8" would puzzle a user who
    # sent 5 float32.
    with pytest.raises(
        RuntimeError,
        match=r"ERROR_RANK_MISMATCH.*rank 0 sends 20 elements"
        r".*the counts are bytes",
    ):
        work.wait()
    assert work.is_completed() and not work.is_success()
    # The group still works.
    got = torch.zeros(3)
    if rank == 0:
        dist.send(torch.arange(3.0), 1)
    else:
        dist.recv(got, 0)
        assert torch.equal(got, torch.arange(3.0))
    t = torch.ones(2)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((2,), 2.0))


def test_mismatched_sizes_raise_on_both_ranks_and_the_group_goes_on():
    run_group_job(2, _mismatch)
