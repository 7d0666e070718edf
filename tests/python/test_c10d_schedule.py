"""Random schedules of torch.distributed calls on the "collops" backend (dist_schedule.py): every
collective, list form and p2p call with random dtypes, layouts (strided, windows, lccl heap,
in place), sizes, async waits and a sub-group, checked bit for bit on every rank. On one host
(lccl) at R=2,3,4, and on 2 pretend hosts x 2 ranks (COLLOPS_HOST_ID), where the group runs
hierarchically: lccl inside a host, gloo between hosts (test_netns_c10d.py does the same across
network namespaces).

COLLOPS_TEST_SCHEDULE_SEED / COLLOPS_TEST_SCHEDULE_STEPS replay or lengthen a run (soak)."""
import os
import tempfile
import time

import pytest

import dist_schedule
import rank_harness
from c10d_ranks import run_group_job

SEED = int(os.environ.get("COLLOPS_TEST_SCHEDULE_SEED", "0"))
STEPS = int(os.environ.get("COLLOPS_TEST_SCHEDULE_STEPS", "70"))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_random_schedule_matches_its_golden(world):
    assert run_group_job(world, dist_schedule.run_schedule, SEED + world, STEPS) == [STEPS] * world


def _on_pretend_host(ctx, store, seed, steps):
    os.environ["COLLOPS_HOST_ID"] = f"pretend-host-{ctx.rank // 2}"
    import torch.distributed as dist

    import collops  # noqa: F401  (registers the "collops" backend)
    from collops import _c10d_backend

    dist.init_process_group("collops", init_method=f"file://{store}", rank=ctx.rank,
                            world_size=ctx.world_size)
    try:
        done = dist_schedule.Schedule(seed, steps, max_elems=100_000).run()
        return done, _c10d_backend.communicator_name()
    finally:
        dist.destroy_process_group()


def test_random_schedule_across_pretend_hosts():
    store = os.path.join(tempfile.gettempdir(), f"collops-store-{os.getpid()}-{time.time_ns()}")
    try:
        results = rank_harness.run_process_ranks(4, _on_pretend_host, store, SEED + 11, STEPS)
    finally:
        if os.path.exists(store):
            os.remove(store)
    assert results == [(STEPS, "hccl(lccl+c10d)")] * 4
