"""Ranks that are processes of one host share its CPUs (torch_bindings/intra_op_threads.h).

With torch's default pool of a thread per CPU in every rank, one rank's OpenMP region (a copy of
more than 32K elements) waits for the CPUs the other ranks' threads hold, and every collective
waits for that rank: milliseconds per call instead of microseconds. Like torchrun, the collops
c10d backend and OperationTorch lower each rank's intra-op threads to CPUs / ranks on the host,
unless OMP_NUM_THREADS says otherwise or a launcher pinned the rank to part of the CPUs.
"""
import os

import pytest
import torch

import rank_harness
from c10d_ranks import run_group_job

WORLD = 2


def _share(default_threads):
    """The thread count each of WORLD unpinned ranks should end with."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < os.cpu_count():
        return default_threads  # this test itself runs pinned: nothing to expect
    return min(default_threads, max(1, cpus // WORLD))


def _threads_around(setup, user_threads=None, pin=False):
    """(threads before, threads after) `setup()` in this rank."""
    os.environ.pop("OMP_NUM_THREADS", None)
    if user_threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(user_threads)
    if pin:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    before = torch.get_num_threads()
    setup()
    return before, torch.get_num_threads()


def _c10d_group(ctx, user_threads, pin):
    import datetime

    import torch.distributed as dist

    import collops  # noqa: F401

    store = os.environ["COLLOPS_TEST_STORE"]

    def init():
        dist.init_process_group("collops", init_method=f"file://{store}", rank=ctx.rank,
                                world_size=ctx.world_size,
                                timeout=datetime.timedelta(seconds=60))
        dist.all_reduce(torch.ones(4))

    try:
        return _threads_around(init, user_threads, pin)
    finally:
        dist.destroy_process_group()


def _operation_torch(ctx):
    import collops  # noqa: F401

    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    assert '"result":0' in op.set_param(ctx.param(allReduceType="sum")).replace(" ", "")

    def execute():
        (y,) = op.execute([torch.ones(4)])
        assert torch.equal(y, torch.full((4,), float(ctx.world_size)))

    return _threads_around(execute)


def _run_c10d(tmp_path, user_threads=None, pin=False):
    os.environ["COLLOPS_TEST_STORE"] = str(tmp_path / "store")
    try:
        return rank_harness.run_process_ranks(WORLD, _c10d_group, user_threads, pin)
    finally:
        os.environ.pop("COLLOPS_TEST_STORE")


def test_c10d_group_shares_the_cpus_between_its_ranks(tmp_path):
    for before, after in _run_c10d(tmp_path):
        assert after == _share(before), (before, after)


def test_operation_torch_ranks_share_the_cpus(tmp_path):
    for before, after in rank_harness.run_process_ranks(WORLD, _operation_torch):
        assert after == _share(before), (before, after)


def test_omp_num_threads_is_the_users_choice(tmp_path):
    for before, after in _run_c10d(tmp_path, user_threads=2):
        assert after == before


def test_a_pinned_rank_keeps_its_threads(tmp_path):
    if os.cpu_count() < 2:
        pytest.skip("needs 2 CPUs to pin a rank to part of them")
    for before, after in _run_c10d(tmp_path, pin=True):
        assert after == before
