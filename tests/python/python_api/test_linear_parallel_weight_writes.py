"""The W8A8 LinearParallelOperation through OperationTorch multiplies its weight as it is at each
call: the same tensor passed again after in-place writes torch counts (add_, copy_, a view's base)
and writes it does not (`w.data.copy_`, a numpy view, a raw pointer, inference mode), views and
slices, a new tensor over rewritten bytes at a freed tensor's address, and two weights in turn.
Every call is checked against a float64 golden on every rank (exit codes checked by
rank_harness): 2 process ranks on lccl and hccl, and 2 thread ranks."""

import pytest

import linear_weight_writes_ranks as ranks
from rank_harness import run_process_ranks, run_thread_ranks


@pytest.mark.parametrize("backend", ["lccl", "hccl"])
def test_weight_as_last_written_two_processes(backend):
    for names in run_process_ranks(2, ranks.written_weight_steps, 21, backend=backend):
        assert names == ranks.step_names()


def test_weight_as_last_written_thread_ranks():
    for names in run_thread_ranks(2, ranks.written_weight_steps, 22):
        assert names == ranks.step_names()
