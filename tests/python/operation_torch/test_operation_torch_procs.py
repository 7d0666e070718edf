"""Golden tests of every operation through OperationTorch with processes as the ranks
(commMode 0, the multi-process lccl communicator behind backend "hccl"), ATB's documented
cases, and examples/python/all_to_allvv2.py.

These tests do not skip when the multi-process backend is missing: they fail, with the ranks'
ERROR_BACKEND_UNAVAILABLE messages in the report.
"""

import os
import subprocess
import sys
import time

import pytest

import collops
import golden_harness as golden
from rank_harness import RankFailure, run_process_ranks
from repo_paths import PYTHON_DIR, REPO, SHIM_PYTHONPATH

SEED = 11212026


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("case", sorted(golden.GOLDEN_CASES))
def test_golden_processes(case, world_size):
    run_process_ranks(world_size, golden.GOLDEN_CASES[case], SEED)


def test_seed_all_to_allvv2_example_processes():
    run_process_ranks(2, golden.case_all_to_allvv2_seed, SEED)


def test_atb_reduce_scatter_v_case_processes():
    run_process_ranks(2, golden.case_reduce_scatter_v_atb, SEED)


def test_send_recv_between_4_processes():
    run_process_ranks(4, golden.case_send_recv, SEED)


def test_barrier_processes(tmp_path):
    run_process_ranks(3, golden.case_barrier, str(tmp_path))


def test_explicit_lccl_backend_and_named_domain_processes():
    run_process_ranks(2, golden.case_all_gather, SEED, backend="lccl", domain="pytest-named")


def test_rank_mismatch_fails_every_process():
    run_process_ranks(2, golden.case_rank_mismatch)


def test_seeds_script_passes_all_7_dtypes():
    """examples/python/all_to_allvv2.py, as a user runs it."""
    script = os.path.join(REPO, "examples", "python", "all_to_allvv2.py")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("COLLOPS_JOB_ID", None)
    done = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, env=env, timeout=400
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    for dtype in golden.SEED_DTYPES:
        for rank in (0, 1):
            assert f"rank {rank}: AllToAllVV2Operation {dtype}: PASS" in done.stdout, output[-4000:]


# ---- the harness itself: no rank can fail silently ----------------------------------------------


def _infer_shape_failure_on_rank_1(ctx):
    # execute() infers its outputs' shapes before the op's Setup; rank 1's failure there must
    # reach rank 0, which would otherwise wait COLLOPS_TIMEOUT for a call rank 1 will not make.
    import torch

    op = torch.classes.OperationTorch.OperationTorch("ReduceScatterOperation")
    op.set_param(ctx.param())
    op.execute([torch.ones(4, 2)])  # the communicator exists from here on
    start = time.time()
    with pytest.raises(RuntimeError) as raised:
        op.execute([torch.ones(3 if ctx.rank == 1 else 4, 2)])
    want = (
        "ERROR_INVALID_TENSOR_DIM"
        if ctx.rank == 1
        else "rank 1 failed its own checks for this call (ERROR_INVALID_TENSOR_DIM)"
    )
    assert want in str(raised.value), str(raised.value)
    assert time.time() - start < 10
    # The ranks stay in step: the next call runs on both.
    out = op.execute([torch.full((4, 2), float(ctx.rank))])[0]
    assert torch.equal(out, torch.ones(2, 2))
    return True


def test_a_rank_failing_execute_before_setup_fails_its_peers_too():
    assert all(run_process_ranks(2, _infer_shape_failure_on_rank_1))


def _domains_released(ctx):
    import gc
    import json

    import torch

    def fds():
        return len(os.listdir("/proc/self/fd"))

    def all_reduce(domain):
        op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
        op.set_param(ctx.param(domain=domain, allReduceType="sum"))
        (out,) = op.execute([torch.ones(4)])
        assert torch.equal(out, torch.full((4,), float(ctx.world_size)))

    all_reduce(f"{ctx.domain}-warm")
    before = fds()
    for cycle in range(3):
        for d in range(10):  # each op is dropped at once; its communicator stays cached
            all_reduce(f"{ctx.domain}-{cycle}-{d}")
        cached = fds()
        gc.collect()
        assert collops.release_communicators(f"{ctx.domain}-{cycle}-0") == 1
        assert collops.release_communicators(None) == 10  # the rest, and the warm-up's
        all_reduce(f"{ctx.domain}-warm")  # a released domain makes a new communicator
        after = fds()
        assert cached > after + 20, (before, cached, after)  # R + 1 descriptors per communicator
        assert after <= before + 2, (before, cached, after)
    with pytest.raises(TypeError, match="comm_domain must be a str or None"):
        collops.release_communicators(3)
    return json.dumps([before, after])


def test_released_communicators_free_their_descriptors():
    """OperationTorch's communicators live in the process' default context, one per commDomain:
    without collops.release_communicators a job going through many domains kept every one
    (R + 1 descriptors and 2 GiB of address space each)."""
    run_process_ranks(2, _domains_released)


def _raises_on_last_rank(ctx):
    if ctx.rank == ctx.world_size - 1:
        raise ValueError("last rank broke on purpose")
    return ctx.rank


def _exits_on_rank_0(ctx):
    if ctx.rank == 0:
        os._exit(3)  # no report, no traceback: only the exit code tells


def _hangs_on_rank_1(ctx):
    if ctx.rank == 1:
        time.sleep(600)


def test_harness_reports_a_raising_process_rank():
    with pytest.raises(
        RankFailure, match="(?s)1 of 3 process ranks failed.*rank 2: exit code 1.*on purpose"
    ):
        run_process_ranks(3, _raises_on_last_rank)


def test_harness_reports_a_silently_exiting_process_rank():
    with pytest.raises(RankFailure, match="rank 0: exit code 3"):
        run_process_ranks(2, _exits_on_rank_0)


def test_harness_kills_and_reports_a_hanging_process_rank():
    with pytest.raises(RankFailure, match="rank 1: still running after the 2 s deadline"):
        run_process_ranks(2, _hangs_on_rank_1, timeout=2)


def test_harness_returns_every_rank_result():
    assert run_process_ranks(3, _identity) == [0, 1, 2]


def _identity(ctx):
    return ctx.rank


ATB_STYLE_SCRIPT = """
import json, os, sys
import torch
import torch_npu
import torch.multiprocessing as mp

LIB = os.path.join(os.environ["ATB_HOME_PATH"], "lib/libatb_test_framework.so")
torch.classes.load_library(LIB)


def main_worker(rank, world_size):
    torch_npu.npu.set_device(rank)
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    op.set_param(json.dumps({"rank": rank, "rankSize": world_size, "rankRoot": 0,
                             "backend": "lccl", "allReduceType": "sum"}))
    torch.manual_seed(0)
    inputs = [torch.rand(3, 5).half() for _ in range(world_size)]
    out = op.execute([inputs[rank].npu()])[0]
    torch.npu.synchronize()
    golden = sum(t.float() for t in inputs).half()
    assert torch.allclose(out.cpu().float(), golden.float(), rtol=2 ** -8, atol=2 ** -8)
    print(f"rank {rank} ok", flush=True)


if __name__ == "__main__":
    mp.spawn(main_worker, nprocs=2, args=(2,), join=True)
"""


def test_unchanged_atb_style_script_runs_with_the_shim(tmp_path):
    """An ATB-style script (import torch_npu, load $ATB_HOME_PATH/lib/libatb_test_framework.so,
    torch.multiprocessing.spawn, .npu(), torch.npu.synchronize()) runs as written."""
    script = tmp_path / "atb_all_reduce.py"
    script.write_text(ATB_STYLE_SCRIPT)
    # ATB_HOME_PATH: the directory whose lib/ holds the library collops loads and its ATB alias
    # (<build>/torch_bindings in a build tree, the package directory when installed).
    env = {k: v for k, v in os.environ.items() if k != "COLLOPS_JOB_ID"}
    env.update(
        PYTHONPATH=SHIM_PYTHONPATH,
        ATB_HOME_PATH=os.path.dirname(os.path.dirname(collops.library_path())),
        COLLOPS_JOB_ID=f"atb-style-{os.getpid()}-{time.time_ns()}",
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "rank 0 ok" in done.stdout and "rank 1 ok" in done.stdout, done.stdout
