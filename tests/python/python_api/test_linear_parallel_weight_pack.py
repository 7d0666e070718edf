"""The W8A8 LinearParallelOperation through OperationTorch keeps its weight repacked into oneDNN's
layout while the caller passes the same unchanged tensor (one repack, at the second call), and
never computes with an old pack: in-place writes, views, slices and a new tensor over rewritten
bytes at a freed tensor's address each give a new content id. Every call is checked against a
float64 golden on every rank (exit codes checked by rank_harness): 2 process ranks on lccl and
hccl, and 2 thread ranks."""

import pytest

import collops
import linear_weight_pack_ranks as ranks
from rank_harness import run_process_ranks, run_thread_ranks


def _packs():
    return collops._c10d_backend.factory().linear_weight_packs()


@pytest.mark.parametrize("backend", ["lccl", "hccl"])
def test_repacks_once_per_unchanged_weight_two_processes(backend):
    for counts in run_process_ranks(2, ranks.repack_steps, 21, backend=backend):
        for name, expected, seen in counts:
            assert seen == expected, (name, expected, seen)


def test_repacks_once_per_unchanged_weight_thread_ranks():
    # The ranks share this process' count, so only the total is checked.
    before = _packs()
    results = run_thread_ranks(2, ranks.repack_steps, 22)
    expected = sum(e for counts in results for _, e, _ in counts)
    assert expected == 2 * 6
    assert _packs() - before == expected
