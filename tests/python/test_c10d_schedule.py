"""Random schedules of torch.distributed calls on the "collops" backend (dist_schedule.py): every
collective, list form and p2p call with random dtypes, layouts (strided, windows, lccl heap,
in place), sizes, async waits and a sub-group, checked bit for bit on every rank.

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
