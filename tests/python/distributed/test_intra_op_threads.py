"""Ranks that are processes of one host share its CPUs (torch_bindings/intra_op_threads.h).

With torch's default pool of a thread per CPU in every rank, one rank's OpenMP region (a copy of
more than 32K elements) waits for the CPUs the other ranks' threads hold, and every collective
waits for that rank: milliseconds per call instead of microseconds. Like torchrun, the collops
c10d backend and OperationTorch lower each rank's intra-op threads to CPUs / ranks on the host,
unless OMP_NUM_THREADS says otherwise or a launcher pinned the rank to part of the CPUs.
"""

import functools
import os

import pytest
import torch
import torch.distributed as dist

import rank_harness
from c10d_ranks import run_group_job

WORLD = 2


def _share(default_threads):
    """The thread count each of WORLD unpinned ranks should end with."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < os.cpu_count():
        return default_threads  # this test itself runs pinned: nothing to expect
    return min(default_threads, max(1, cpus // WORLD))


_threads_before = None  # this rank's intra-op threads before it set anything up


def _prepare(ctx=None, user_threads=None, pin=False):
    """Sets this rank up as its launcher would and notes its threads."""
    global _threads_before
    os.environ.pop("OMP_NUM_THREADS", None)
    if user_threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(user_threads)
    if pin:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    _threads_before = torch.get_num_threads()


def _threads():
    """(threads before the set-up, threads now) in this rank."""
    return _threads_before, torch.get_num_threads()


def _in_c10d_group(ctx):
    dist.all_reduce(torch.ones(4))
    return _threads()


def _operation_torch(ctx):
    import collops  # noqa: F401

    _prepare()
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    assert '"result":0' in op.set_param(ctx.param(allReduceType="sum")).replace(" ", "")
    (y,) = op.execute([torch.ones(4)])
    assert torch.equal(y, torch.full((4,), float(ctx.world_size)))
    return _threads()


def _run_c10d(**prepare):
    return run_group_job(WORLD, _in_c10d_group, before_init=functools.partial(_prepare, **prepare))


def test_c10d_group_shares_the_cpus_between_its_ranks():
    for before, after in _run_c10d():
        assert after == _share(before), (before, after)


def test_operation_torch_ranks_share_the_cpus():
    for before, after in rank_harness.run_process_ranks(WORLD, _operation_torch):
        assert after == _share(before), (before, after)


def test_omp_num_threads_is_the_users_choice():
    for before, after in _run_c10d(user_threads=2):
        assert after == before


def test_a_pinned_rank_keeps_its_threads():
    if os.cpu_count() < 2:
        pytest.skip("needs 2 CPUs to pin a rank to part of them")
    for before, after in _run_c10d(pin=True):
        assert after == before
