"""How the ranks of a "collops" group find each other through torch's Store when the Store keeps
keys of an earlier attempt (torchrun keeps one Store for every restart of a job): a restarted job
trains on, a stale token is never taken, and a rank that never joins is named."""

import datetime
import os
import subprocess
import sys
import time

import pytest
import torch

import rank_harness
from repo_paths import PYTHON_DIR, RANKS_DIR

# What torchrun's Store still holds after an attempt died while its group was being created: the
# token of that attempt, published under the key the backend reads.
STALE_TOKEN_KEY = "collops/comm_domain"
RESTARTED_JOB = os.path.join(RANKS_DIR, "restarted_job.py")


def _backend_on(port, rank, world, seconds, delay):
    """The collops backend of `rank`, made straight from the factory over the TCPStore at `port`
    (the Store torch would hand it), after `delay` seconds."""
    import torch.distributed as dist

    import collops  # noqa: F401  (registers the backend; loads the factory)
    from collops import _c10d_backend

    store = dist.TCPStore(
        "127.0.0.1", port, world, is_master=False, timeout=datetime.timedelta(seconds=60)
    )
    time.sleep(delay)
    return _c10d_backend.factory().create_backend(
        store, rank, world, datetime.timedelta(seconds=seconds)
    )


def _all_reduce_after_stale_token(ctx, port):
    # Rank 0 comes late, so every other rank reads the key before this attempt writes it.
    backend = _backend_on(port, ctx.rank, ctx.world_size, 30, 1.5 if ctx.rank == 0 else 0)
    t = torch.full((5,), float(ctx.rank + 1))
    backend.allreduce([t]).wait()
    assert torch.equal(t, torch.full((5,), float(sum(range(1, ctx.world_size + 1))))), t
    return True


def _server_with(keys):
    import torch.distributed as dist

    server = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=60),
    )
    for key, value in keys.items():
        server.set(key, value)
    return server


@pytest.mark.parametrize("world", [2, 3])
def test_a_stale_token_in_the_store_is_not_taken(world):
    server = _server_with({STALE_TOKEN_KEY: "c10d.stale-token-of-a-dead-attempt"})
    assert (
        rank_harness.run_process_ranks(
            world, _all_reduce_after_stale_token, server.port, timeout=120
        )
        == [True] * world
    )


def _join_or_stay_away(ctx, port, absent):
    if ctx.rank == absent:
        return "stayed away"
    started = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        _backend_on(port, ctx.rank, ctx.world_size, 3, 0)
    return time.monotonic() - started, str(raised.value)


def test_a_rank_that_never_joins_is_named_within_the_timeout():
    server = _server_with({})
    results = rank_harness.run_process_ranks(3, _join_or_stay_away, server.port, 2, timeout=120)
    assert results[2] == "stayed away"
    seconds, message = results[0]
    assert "ERROR_TIMEOUT" in message and "rank(s) 2 did not join within 3 s" in message, message
    assert seconds < 20, seconds
    # Rank 1 was released by nobody: rank 0 never saw every rank.
    seconds, message = results[1]
    assert "ERROR_TIMEOUT" in message and "rank 0 did not release the group" in message, message


def test_torchrun_restarts_a_job_whose_rank_died(tmp_path):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([PYTHON_DIR, os.environ.get("PYTHONPATH", "")]),
        COLLOPS_TIMEOUT="30",
    )
    # --log-dir: else torchrun leaves a torchelastic_* directory in /tmp.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            "--log-dir",
            str(tmp_path),
            RESTARTED_JOB,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for rank in (0, 1):
        assert f"rank {rank} attempt 1 done on lccl" in run.stdout, run.stdout + run.stderr


def _create_then_leave(ctx, port):
    import torch.distributed as dist

    import collops  # noqa: F401  (registers the backend; loads the factory)
    from collops import _c10d_backend

    store = dist.TCPStore(
        "127.0.0.1",
        port,
        ctx.world_size,
        is_master=ctx.rank == 0,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=60),
    )
    backend = _c10d_backend.factory().create_backend(
        store, ctx.rank, ctx.world_size, datetime.timedelta(seconds=30)
    )
    del backend, store  # rank 0's Store server goes with it: that rank has nothing else to do
    return "created"


@pytest.mark.parametrize("attempt", range(4))
def test_the_store_host_may_leave_once_its_group_exists(attempt):
    """Rank 0 hosts the TCPStore (torchrun, tcp://) and returns from creating the group when every
    rank has read what it needs from the Store, not before: a peer still reading would otherwise
    fail in init_process_group on a closed connection (about every other run at 4 ranks)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert (
        rank_harness.run_process_ranks(4, _create_then_leave, port, timeout=120) == ["created"] * 4
    )
