"""A rank of a "collops" group dies (SIGKILL) in the middle of its collectives: every other rank's
call raises RuntimeError ERROR_PEER_LOST within seconds -- far before the group's timeout -- and
every later call on the group fails fast instead of starting a new rendezvous that waits the
whole timeout for the dead rank. On one host (lccl) and on 2 pretend hosts x 2 ranks
(hierarchical: lccl inside a host, gloo between; there the survivors learn it from lccl, from
gloo's closed connection, or from a local leader that exited after its own error)."""

import os
import signal
import time

import pytest

import rank_harness
from c10d_ranks import run_group_job

TIMEOUT = 60  # the group's timeout; a lost peer must be reported long before it


def _all_reduce_until_the_victim_dies(ctx, x, victim):
    """All-reduces ones until a call fails; the victim kills itself at its 21st call. Checks every
    result before the failure and returns (seconds the failed call took, its message)."""
    import torch
    import torch.distributed as dist

    for step in range(1000):
        if ctx.rank == victim and step == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        x.fill_(1.0)
        start = time.monotonic()
        try:
            dist.all_reduce(x)
        except RuntimeError as e:
            return time.monotonic() - start, str(e)
        assert torch.equal(x, torch.full_like(x, ctx.world_size))
    raise AssertionError("1000 all_reduces ran without the victim")


def _killed_mid_collective(ctx, hosts):
    import torch
    import torch.distributed as dist

    victim = ctx.world_size - 1
    x = torch.ones(1 << 20)
    lost, message = _all_reduce_until_the_victim_dies(ctx, x, victim)
    assert "ERROR_PEER_LOST" in message, message
    if hosts is None:  # one lccl communicator: it names the rank that died
        assert f"rank {victim}" in message, message
    assert lost < TIMEOUT / 4, f"the loss took {lost:.1f} s to surface: {message}"
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="ERROR_PEER_LOST|failed earlier"):
        dist.broadcast(x, src=0)
    assert time.monotonic() - start < 5, "a call after the loss did not fail fast"
    return lost


CHILD_SECONDS = 20  # a forked child's life: longer than any survivor may take to see the death


def _killed_beside_a_forked_child(ctx, pid_dir):
    """Every rank forks a child after joining, as DataLoader workers are forked; each child
    holds every file its rank had (sockets, memfds, pidfds) and outlives the victim, so the
    survivors must learn of the death from the victim's process, not from closed files."""
    import torch
    import torch.distributed as dist

    x = torch.ones(1 << 16)
    dist.all_reduce(x)
    child = os.fork()
    if child == 0:
        time.sleep(CHILD_SECONDS)
        os._exit(0)
    victim = ctx.world_size - 1
    if ctx.rank == victim:
        with open(os.path.join(pid_dir, "victim-child"), "w") as f:
            f.write(str(child))
    try:
        lost, message = _all_reduce_until_the_victim_dies(ctx, x, victim)
        assert lost < CHILD_SECONDS / 4, f"the loss took {lost:.1f} s to surface: {message}"
        assert "ERROR_PEER_LOST" in message and f"rank {victim}" in message, message
        with open(os.path.join(pid_dir, "victim-child")) as f:
            victim_child = int(f.read())
        os.kill(victim_child, 0)  # still alive: it held the victim's files while we learned
        return lost
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_a_rank_killed_while_its_forked_child_holds_its_files_is_reported_as_lost(tmp_path):
    with pytest.raises(rank_harness.RankFailure) as failure:
        run_group_job(
            3, _killed_beside_a_forked_child, str(tmp_path), timeout=120, group_timeout=TIMEOUT
        )
    report = str(failure.value)
    assert "1 of 3 process ranks failed" in report, report
    assert "rank 2: killed by signal 9" in report, report


@pytest.mark.parametrize(
    "world, hosts", [(3, None), (4, (0, 0, 1, 1))], ids=["one-host", "pretend-hosts"]
)
def test_a_killed_rank_is_reported_as_lost_by_every_other_rank(world, hosts):
    with pytest.raises(rank_harness.RankFailure) as failure:
        run_group_job(
            world, _killed_mid_collective, hosts, timeout=120, hosts=hosts, group_timeout=TIMEOUT
        )
    # Only the victim failed: every survivor saw the loss and passed its checks.
    report = str(failure.value)
    assert f"1 of {world} process ranks failed" in report, report
    assert f"rank {world - 1}: killed by signal 9" in report, report
