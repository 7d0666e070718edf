"""torch_atb (python/collops/compat/torch_atb.py, `import torch_atb` through the shim path): ATB's
param classes and Operation(param).forward(tensors) over collops, on 2 process ranks (every
rank's exit code checked by rank_harness), thread ranks, every backend a Python process reaches
(lccl, hccl, c10d over gloo), and an ATB-style script run unchanged as its own job."""

import os
import subprocess
import sys

import pytest
import torch

import c10d_ranks
import torch_atb_ranks as ranks
from rank_harness import run_process_ranks, run_thread_ranks
from repo_paths import REPO, SHIM_PYTHONPATH

sys.path.insert(0, os.path.join(REPO, "python", "torch_npu_shim"))
import torch_atb  # noqa: E402

TYPES = ["LINEAR_ALL_REDUCE", "LINEAR_REDUCE_SCATTER", "ALL_GATHER_LINEAR", "PURE_LINEAR"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("type_name", TYPES)
def test_linear_parallel_two_processes(type_name, dtype):
    # Both backends of one host, alternating over the grid so each meets every type.
    backend = ("lccl", "hccl")[(TYPES.index(type_name) + len(dtype)) % 2]
    run_process_ranks(
        2,
        ranks.linear_parallel_layouts,
        type_name,
        dtype,
        TYPES.index(type_name) * 10 + len(dtype),
        backend=backend,
    )


@pytest.mark.parametrize("type_name", TYPES)
def test_linear_parallel_thread_ranks(type_name):
    run_thread_ranks(2, ranks.linear_parallel, type_name, "bfloat16", True, True, 5)


def test_linear_parallel_over_c10d_gloo_group():
    c10d_ranks.run_group_job(2, ranks.linear_over_c10d, 9, backend="gloo")


@pytest.mark.parametrize("backend, dtype", [("lccl", "bfloat16"), ("hccl", "float16")])
def test_two_dim_linear_four_processes(backend, dtype):
    """ALL_GATHER_LINEAR_REDUCE_SCATTER on R = 4: grids 1 x 4, 2 x 2, 4 x 1, both inner dims."""
    run_process_ranks(4, ranks.two_dim_linear, dtype, 60, backend=backend)


def test_two_dim_linear_over_c10d_gloo_group():
    c10d_ranks.run_group_job(4, ranks.two_dim_over_c10d, 70, backend="gloo")


@pytest.mark.parametrize("backend", ["lccl", "hccl"])
def test_collective_params_two_processes(backend):
    run_process_ranks(2, ranks.collectives, 3, backend=backend)


def test_forward_error_carries_status_and_tensor():
    run_process_ranks(2, ranks.forward_error)


def test_atb_style_script_runs_unchanged():
    """examples/python/torch_atb_linear_parallel.py is written as ATB's torch_atb tests are
    (mp.spawn, torch_npu.npu.set_device, .npu(), torch.npu.synchronize()); with the shim path it
    runs on CPU, and mp.spawn fails the job when any rank fails."""
    env = dict(os.environ, PYTHONPATH=SHIM_PYTHONPATH)
    script = os.path.join(REPO, "examples", "python", "torch_atb_linear_parallel.py")
    proc = subprocess.run(
        [sys.executable, script], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "linear_parallel test success" in proc.stdout, proc.stdout


# ---- params and errors (no ranks needed) -----------------------------------------------------


def test_params_have_atb_fields_defaults_and_json_keys():
    p = torch_atb.LinearParallelParam()
    assert (
        p.trans_weight,
        p.rank,
        p.rank_size,
        p.has_residual,
        p.backend,
        p.type,
        p.keep_intermediate,
        p.quant_type,
        p.quant_group_size,
        p.out_data_type,
    ) == (True, 0, 0, False, "hccl", 0, False, -1, 0, -1)
    assert p.type == torch_atb.LinearParallelParam.ParallelType.LINEAR_ALL_REDUCE
    p.type = torch_atb.LinearParallelParam.ParallelType.ALL_GATHER_LINEAR
    p.comm_mode = torch_atb.COMM_MULTI_THREAD
    p.out_data_type = torch_atb.ACL_BF16
    assert p._json()["type"] == 2 and p._json()["commMode"] == 1
    assert p._json()["outDataType"] == 27
    assert torch_atb.ReduceScatterParam().backend == "lccl"  # ATB's default there
    assert p._json()["twoDimTPInfo"] == {"agDim": 0, "rsDim": 0, "innerDimIsAg": 1}
    assert p._json()["moeInfo"] == {"localExpertNums": 1, "epSize": 1, "tpSize": 1}
    p.two_dim_TP_info = torch_atb.LinearParallelParam.TwoDimTPInfo(2, 1, 0)
    assert p._json()["twoDimTPInfo"] == {"agDim": 2, "rsDim": 1, "innerDimIsAg": 0}
    assert torch_atb.LinearParallelParam.ParallelType.ALL_GATHER_LINEAR_REDUCE_SCATTER == 4
    moe = torch_atb.LinearParallelParam.MoeInfo(epSize=2)
    assert (moe.localExpertNums, moe.epSize, moe.tpSize) == (0, 2, 0)  # ATB's Python defaults
    with pytest.raises(TypeError, match="at most 3 positional"):
        torch_atb.LinearParallelParam.TwoDimTPInfo(2, 2, 1, 0)
    with pytest.raises(TypeError, match="ag_dims"):
        torch_atb.LinearParallelParam.TwoDimTPInfo(ag_dims=2)
    ar = torch_atb.AllReduceParam(
        quant_type=torch_atb.AllReduceParam.QuantType.QUANT_TYPE_PER_TENSOR,
        out_data_type=torch_atb.ACL_FLOAT16,
    )
    assert ar._json()["quantType"] == 1 and ar._json()["outDataType"] == 1
    assert "quantType" not in torch_atb.AllReduceParam()._json()
    with pytest.raises(TypeError, match="rank_sizes"):
        torch_atb.AllGatherParam(rank_sizes=2)
    with pytest.raises(AttributeError):
        torch_atb.AllGatherParam().rank_sizes = 2


@pytest.mark.parametrize(
    "param, status, text",
    [
        (lambda: torch_atb.LinearParallelParam(rank_size=0), 1, "rankSize = 0"),
        (
            lambda: torch_atb.LinearParallelParam(rank_size=2, type=2, quant_type=0),
            1,
            "quantType = 0 (PER_TENSOR) is supported with type = 0",
        ),
        (lambda: torch_atb.LinearParallelParam(rank_size=2, type=5), 1, "is not supported"),
        (lambda: torch_atb.LinearParallelParam(rank_size=2, type=4), 1, "twoDimTPInfo.agDim >= 1"),
        (
            lambda: torch_atb.LinearParallelParam(rank_size=2, keep_intermediate=True),
            1,
            "keepIntermediate",
        ),
        (lambda: torch_atb.LinearParallelParam(rank_size=2, hccl_comm=1), 1, "hccl_comm"),
        (
            lambda: torch_atb.LinearParallelParam(
                rank_size=2,
                type=4,
                two_dim_TP_info=torch_atb.LinearParallelParam.TwoDimTPInfo(ag_dim=2, rs_dim=2),
            ),
            1,
            "twoDimTPInfo.agDim * twoDimTPInfo.rsDim = rankSize",
        ),
        (
            lambda: torch_atb.LinearParallelParam(rank_size=2, two_dim_TP_info=(2, 1)),
            1,
            "two_dim_TP_info",
        ),
        (lambda: torch_atb.AllReduceParam(rank_size=2, all_reduce_type="avg"), 1, "allReduceType"),
        (lambda: torch_atb.AllToAllParam(rank_size=2, backend="lccc"), 1, "backend"),
    ],
)
def test_bad_params_raise_with_status_and_field(param, status, text):
    with pytest.raises(torch_atb.OperationError) as info:
        torch_atb.Operation(param())
    assert info.value.status == status and info.value.status_name == "ERROR_INVALID_PARAM"
    assert text in str(info.value)


def test_forward_on_a_sparse_tensor_raises_operation_error_naming_the_slot():
    op = torch_atb.Operation(torch_atb.AllReduceParam(rank=0, rank_size=1))
    with pytest.raises(torch_atb.OperationError) as info:
        op.forward([torch.ones(4).to_sparse()])
    assert info.value.status_name == "ERROR_INVALID_TENSOR_FORMAT", info.value
    assert "inTensors[0] must be a dense (strided) tensor, got layout torch.sparse_coo" in str(
        info.value
    )


def test_operation_needs_a_param_class():
    with pytest.raises(TypeError, match="LinearParallelParam"):
        torch_atb.Operation({"rankSize": 2})
