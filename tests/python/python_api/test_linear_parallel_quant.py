"""The quantised LinearParallelOperation from Python: W8A8 per-channel LINEAR_ALL_REDUCE on 2
process ranks (lccl and hccl) and thread ranks, W8A16 per-group PURE_LINEAR, each through
torch_atb and OperationTorch (every rank's exit code checked by rank_harness)."""

import os
import sys

import pytest

import linear_quant_ranks as ranks
from rank_harness import run_process_ranks, run_thread_ranks
from repo_paths import REPO

sys.path.insert(0, os.path.join(REPO, "python", "torch_npu_shim"))
import torch_atb  # noqa: E402


@pytest.mark.parametrize("backend", ["lccl", "hccl"])
def test_w8a8_per_channel_all_reduce_two_processes(backend):
    run_process_ranks(2, ranks.w8a8_per_channel_all_reduce, 11, backend=backend)


def test_w8a8_per_channel_all_reduce_thread_ranks():
    run_thread_ranks(2, ranks.w8a8_per_channel_all_reduce, 12)


def test_w8a16_per_group_pure_linear():
    run_thread_ranks(1, ranks.w8a16_per_group_pure_linear, 13)


def test_quantised_reduce_scatter_is_refused_naming_quant_type_and_type():
    param = torch_atb.LinearParallelParam(
        rank_size=2,
        type=torch_atb.LinearParallelParam.ParallelType.LINEAR_REDUCE_SCATTER,
        quant_type=torch_atb.LinearParallelParam.QuantType.QUANT_TYPE_PER_CHANNEL,
        out_data_type=torch_atb.ACL_FLOAT16,
    )
    with pytest.raises(torch_atb.OperationError) as info:
        torch_atb.Operation(param)
    assert info.value.status_name == "ERROR_INVALID_PARAM"
    assert "quantType = 1 (PER_CHANNEL)" in str(info.value)
    assert "type = 1 (LINEAR_REDUCE_SCATTER)" in str(info.value)
