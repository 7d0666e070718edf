"""One rank of a "collops" group refusing its tensor (sparse here) while its peers pass good ones:
the refusing rank raises its own error, and every peer fails at once with an error naming it,
instead of waiting for the group's timeout. The group's timeout is short, so a peer that waits
fails the test in seconds; every wait is checked against a fraction of it."""

import time

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import REFUSAL_PROMPT as QUICK
from c10d_ranks import REFUSAL_WORLD as WORLD
from c10d_ranks import group_works, run_refusal_job, timed

REFUSED_BY_RANK_0 = r"ERROR_RANK_MISMATCH.*rank 0.*ERROR_INVALID_TENSOR_FORMAT"


def _coo(n):
    return torch.sparse_coo_tensor([[0]], [1.0], (n,), check_invariants=True)


def _refused_by_rank_0(ctx, call, refused_match, refused_type=RuntimeError):
    """call(tensor) on every rank: rank 0 passes a sparse tensor and must raise refused_type
    matching refused_match, the others a dense one and must fail naming rank 0; both within QUICK
    seconds."""
    start = time.monotonic()
    if ctx.rank == 0:
        with pytest.raises(refused_type, match=refused_match):
            call(_coo(4))
    else:
        with pytest.raises(RuntimeError, match=REFUSED_BY_RANK_0):
            call(torch.ones(4))
    elapsed = time.monotonic() - start
    assert elapsed < QUICK, f"rank {ctx.rank} took {elapsed:.1f} s"


def _refusal_at_the_first_collective(ctx, which):
    # The group's communicator does not exist yet: the peers are in its creation when rank 0
    # refuses.
    b = dist.group.WORLD._get_backend(torch.device("cpu"))
    g = dist.group.WORLD.group_name
    calls = {
        "all_reduce": (dist.all_reduce, r"allreduce: tensor must be a dense", RuntimeError),
        "broadcast": (
            lambda t: b.broadcast([t]),
            r"broadcast: tensor must be a dense",
            RuntimeError,
        ),
        # The eager kernel of torch.ops.collops, which checks its arguments itself.
        "collops.all_reduce": (
            lambda t: torch.ops.collops.all_reduce(t, "sum", g),
            r"collops.all_reduce: x must be a dense",
            ValueError,
        ),
    }
    _refused_by_rank_0(ctx, *calls[which])
    group_works(ctx)
    return True


@pytest.mark.parametrize("which", ["all_reduce", "broadcast", "collops.all_reduce"])
def test_a_refusal_before_the_group_communicates_does_not_hold_the_peers(which):
    results = run_refusal_job(_refusal_at_the_first_collective, which)
    assert results == [True] * WORLD


def _refusal_in_a_new_subgroup(ctx):
    # A sub-group's communicator is its own, created at its own first collective.
    group_works(ctx)
    sub = dist.new_group(list(range(ctx.world_size)))
    _refused_by_rank_0(
        ctx, lambda t: dist.all_reduce(t, group=sub), r"allreduce: tensor must be a dense"
    )
    t = torch.ones(4)
    dist.all_reduce(t, group=sub)
    assert torch.equal(t, torch.full((4,), float(ctx.world_size)))
    return True


def test_a_refusal_before_a_subgroup_communicates_does_not_hold_the_peers():
    results = run_refusal_job(_refusal_in_a_new_subgroup)
    assert results == [True] * WORLD


def _refused_send_and_recv(ctx):
    # Point to point, one side refusing: the backend's send/recv (what dist.send/dist.recv call,
    # then wait on; test_c10d_layout_dispatch.py goes through dist.send/dist.recv). The first is
    # the group's first call, so its communicator is made by it.
    b = dist.group.WORLD._get_backend(torch.device("cpu"))
    peer = 1 - ctx.rank

    def one_side_refuses(what, refused, matching, told):
        # Rank 0's op refuses its tensor (queued, the refusal raises when waited on); rank 1's
        # matching op is told.
        if ctx.rank == 0:
            work = refused([_coo(4)], peer, 0)
            with pytest.raises(RuntimeError, match=rf"collops backend: {what}: tensor must be"):
                work.wait()
        else:
            with pytest.raises(RuntimeError, match=told + r".*ERROR_INVALID_TENSOR_FORMAT"):
                matching([torch.ones(4)], peer, 0).wait()

    def refused_send():
        one_side_refuses("send", b.send, b.recv, r"rank 0 refused its send to rank 1")

    def refused_recv():
        one_side_refuses("recv", b.recv, b.send, r"rank 0 refused its receive from rank 1")

    def refused_in_a_ring():
        # A ring, as batch_isend_irecv issues it on this backend (each op, then the waits): rank
        # 0's send refused, its receive and rank 1's send still meet.
        got = torch.zeros(4)
        mine = _coo(4) if ctx.rank == 0 else torch.full((4,), float(ctx.rank + 1))
        works = [b.send([mine], peer, 0), b.recv([got], peer, 0)]
        told = r"rank 0 refused its send to rank 1.*ERROR_INVALID_TENSOR_FORMAT"
        if ctx.rank == 0:
            with pytest.raises(
                RuntimeError, match=r"collops backend: send: tensor must be a dense"
            ):
                works[0].wait()
            with pytest.raises(RuntimeError, match=told):
                works[1].wait()
            assert torch.equal(got, torch.full((4,), 2.0))  # rank 1's send arrived
        else:
            for work in works:
                with pytest.raises(RuntimeError, match=told):
                    work.wait()

    timed(ctx, "the refused send", refused_send, QUICK)
    timed(ctx, "the refused recv", refused_recv, QUICK)
    timed(ctx, "the ring", refused_in_a_ring, QUICK)
    group_works(ctx)
    # Still in step for point to point too.
    t = torch.full((4,), float(ctx.rank))
    if ctx.rank == 0:
        dist.send(t, 1)
    else:
        dist.recv(t, 0)
        assert torch.equal(t, torch.zeros(4))
    return True


# Pretend hosts 0 and 1: the group runs hierarchically and point to point goes through the c10d
# engine (gloo) instead of lccl.
@pytest.mark.parametrize("hosts", [None, [0, 1]], ids=["one-host", "two-hosts"])
def test_a_refused_send_or_recv_does_not_hold_the_peer(hosts):
    results = run_refusal_job(
        _refused_send_and_recv,
        hosts=hosts,
    )
    assert results == [True] * WORLD
