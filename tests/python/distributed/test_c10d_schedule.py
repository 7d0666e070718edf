"""Random schedules of torch.distributed calls on the "collops" backend (dist_schedule.py): every
collective, list form and p2p call with random dtypes, layouts (strided, windows, lccl heap,
in place), sizes, async waits and a sub-group, checked bit for bit on every rank. On one host
(lccl) at R=2,3,4, and on 2 pretend hosts x 2 ranks (COLLOPS_HOST_ID), where the group runs
hierarchically: lccl inside a host, gloo between hosts (test_netns_c10d.py does the same across
network namespaces).

COLLOPS_TEST_SCHEDULE_SEED / COLLOPS_TEST_SCHEDULE_STEPS replay or lengthen a run (soak)."""

import os

import pytest

import dist_schedule
from c10d_ranks import run_group_job

SEED = int(os.environ.get("COLLOPS_TEST_SCHEDULE_SEED", "0"))
STEPS = int(os.environ.get("COLLOPS_TEST_SCHEDULE_STEPS", "70"))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_random_schedule_matches_its_golden(world):
    assert run_group_job(world, dist_schedule.run_schedule, SEED + world, STEPS) == [STEPS] * world


def _schedule_and_engine(ctx, seed, steps):
    from collops import _c10d_backend

    done = dist_schedule.Schedule(seed, steps, max_elems=100_000).run()
    return done, _c10d_backend.communicator_name()


def test_random_schedule_across_pretend_hosts():
    results = run_group_job(4, _schedule_and_engine, SEED + 11, STEPS, hosts=[0, 0, 1, 1])
    assert results == [(STEPS, "hccl(lccl+c10d)")] * 4
