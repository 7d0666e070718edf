"""Quantised AllReduce (quantType 1 / 2) through OperationTorch at the rank counts the shared
golden tests (test_operation_torch_threads/_procs: R = 2, 3) do not reach: R = 1, 4, 7 on threads
and processes. The cases are harness/quant_cases.py's; every rank's outcome is checked."""

import pytest

import collops  # noqa: F401  (registers OperationTorch for the thread ranks)
import quant_cases
from rank_harness import run_process_ranks, run_thread_ranks

SEED = 20260733


@pytest.mark.parametrize("world_size", [1, 4, 7])
def test_quant_all_reduce_threads(world_size):
    run_thread_ranks(world_size, quant_cases.case_all_reduce_quant, SEED)
    run_thread_ranks(world_size, quant_cases.case_all_reduce_quant_errors)


@pytest.mark.parametrize("world_size", [1, 4, 7])
def test_quant_all_reduce_processes(world_size):
    run_process_ranks(world_size, quant_cases.case_all_reduce_quant, SEED)
    run_process_ranks(world_size, quant_cases.case_all_reduce_quant_errors)
