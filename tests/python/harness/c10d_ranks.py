"""Process-group set-up shared by the torch.distributed tests (test_c10d_*, test_compile_*,
test_distributed_*): every rank runs under rank_harness.run_process_ranks (deadline, every exit
code checked) and joins one FileStore-backed default group, so tests never race for a TCP port."""

import os
import tempfile
import time

import rank_harness


def run_group_job(
    world_size,
    fn,
    *args,
    backend="collops",
    timeout=None,
    hosts=None,
    group_timeout=None,
    before_init=None,
):
    """Runs fn(ctx, *args) on `world_size` spawned ranks inside an initialised default group.

    hosts: rank r joins as if it ran on pretend host hosts[r] (COLLOPS_HOST_ID), so a "collops"
    group spanning several runs hierarchically. group_timeout: init_process_group's timeout, in
    seconds (None: torch's default). before_init(ctx): runs in the rank just before it joins the
    group (what the group reads when it is created). timeout: the harness deadline."""
    store = os.path.join(tempfile.gettempdir(), f"collops-store-{os.getpid()}-{time.time_ns()}")
    kwargs = {} if timeout is None else {"timeout": timeout}
    try:
        return rank_harness.run_process_ranks(
            world_size,
            _in_group,
            fn,
            backend,
            store,
            args,
            hosts,
            group_timeout,
            before_init,
            **kwargs,
        )
    finally:
        if os.path.exists(store):
            os.remove(store)


def _in_group(ctx, fn, backend, store, args, hosts, group_timeout, before_init):
    import datetime

    import torch.distributed as dist

    import collops  # noqa: F401  (registers the "collops" backend)

    if hosts is not None:
        os.environ["COLLOPS_HOST_ID"] = f"pretend-host-{hosts[ctx.rank]}"
    kwargs = {} if group_timeout is None else {"timeout": datetime.timedelta(seconds=group_timeout)}
    if before_init is not None:
        before_init(ctx)
    dist.init_process_group(
        backend, init_method=f"file://{store}", rank=ctx.rank, world_size=ctx.world_size, **kwargs
    )
    try:
        return fn(ctx, *args)
    finally:
        dist.destroy_process_group()


# The refusal tests (a rank refusing its part of a call while its peers are in it): the group's
# timeout, after which the communicator's waits give up, is short, so a peer left waiting fails
# the test in seconds, and a peer told of a refusal must fail well within REFUSAL_PROMPT.
REFUSAL_WORLD = 2
REFUSAL_GROUP_TIMEOUT = 20
REFUSAL_PROMPT = REFUSAL_GROUP_TIMEOUT / 4
REFUSAL_DEADLINE = 240  # the harness kills every rank still running after this


def run_refusal_job(fn, *args, backend="collops", hosts=None, world=REFUSAL_WORLD):
    """run_group_job of `world` ranks with the refusal tests' timeouts."""
    return run_group_job(
        world,
        fn,
        *args,
        backend=backend,
        hosts=hosts,
        group_timeout=REFUSAL_GROUP_TIMEOUT,
        timeout=REFUSAL_DEADLINE,
    )


def fresh_interpreter_json(script, test_file, *args):
    """Runs `script` in an interpreter of its own (python -c), its arguments the folder of
    `test_file`, this harness's folder and `args`, and returns the JSON it prints: what a process
    that never imported what the test's own process did makes of the same calls."""
    import json
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(test_file))
    harness = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, "-c", script, here, harness, *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(out.stdout)


def timed(ctx, what, body, limit):
    """Runs body(); fails naming the rank and `what` unless it ended within `limit` seconds."""
    start = time.monotonic()
    body()
    elapsed = time.monotonic() - start
    assert elapsed < limit, f"rank {ctx.rank}: {what} took {elapsed:.1f} s"


def group_works(ctx):
    """An all_reduce of ones on the default group gives the world size everywhere: the group is
    still in step."""
    import torch
    import torch.distributed as dist

    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(ctx.world_size)))
