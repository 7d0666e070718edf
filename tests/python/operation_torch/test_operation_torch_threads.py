"""Golden tests of every operation through OperationTorch with Python threads as the ranks
(commMode 1), plus the proof that execute releases the GIL."""

import json
import threading
import time

import pytest

import collops  # noqa: F401
import golden_harness as golden
from rank_harness import RankFailure, run_thread_ranks

SEED = 20261121


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("case", sorted(golden.GOLDEN_CASES))
def test_golden_threads(case, world_size):
    run_thread_ranks(world_size, golden.GOLDEN_CASES[case], SEED)


def test_seed_all_to_allvv2_example_threads():
    run_thread_ranks(2, golden.case_all_to_allvv2_seed, SEED)


def test_atb_reduce_scatter_v_case_threads():
    run_thread_ranks(2, golden.case_reduce_scatter_v_atb, SEED)


def test_send_recv_between_4_threads():
    run_thread_ranks(4, golden.case_send_recv, SEED)


def test_barrier_threads(tmp_path):
    run_thread_ranks(3, golden.case_barrier, str(tmp_path))


def test_explicit_lccl_backend_threads():
    run_thread_ranks(2, golden.case_all_gather, SEED, backend="lccl")


def test_rank_mismatch_fails_every_thread():
    run_thread_ranks(2, golden.case_rank_mismatch)


def test_execute_releases_the_gil():
    """Rank 0 blocks inside execute (a barrier) while this thread keeps running Python code; only
    then does rank 1 arrive. With the GIL held by rank 0 the counter could not advance."""
    params = [
        json.dumps({"rank": r, "rankSize": 2, "commMode": 1, "commDomain": "pytest-gil"})
        for r in range(2)
    ]
    ops = [golden.make_op("BarrierOperation", p) for p in params]
    finished = threading.Event()
    errors = []

    def rank0():
        try:
            ops[0].execute([])
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)
        finished.set()

    t = threading.Thread(target=rank0, daemon=True)
    t.start()
    time.sleep(0.2)  # let rank 0 enter execute
    counter, end = 0, time.monotonic() + 0.5
    while time.monotonic() < end:
        counter += 1
    assert not finished.is_set(), "rank 0 left the barrier before rank 1 entered"
    assert counter > 1000, f"Python made almost no progress ({counter}) while rank 0 waited"
    ops[1].execute([])
    assert finished.wait(30) and not errors, errors


def _raises_on_rank_1(ctx):
    if ctx.rank == 1:
        raise ValueError("rank 1 broke on purpose")
    return ctx.rank


def test_harness_reports_a_failing_thread_rank():
    with pytest.raises(RankFailure, match="(?s)1 of 2 thread ranks failed.*rank 1.*on purpose"):
        run_thread_ranks(2, _raises_on_rank_1)


def _hangs_on_rank_0(ctx):
    if ctx.rank == 0:
        time.sleep(5)


def test_harness_reports_a_hanging_thread_rank():
    with pytest.raises(RankFailure, match="rank 0: still running after"):
        run_thread_ranks(2, _hangs_on_rank_0, timeout=1)
