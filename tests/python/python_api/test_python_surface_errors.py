"""Mistakes in the Python helpers give clear errors (or work as documented) instead of an
AttributeError, an IndexError or silently broadcast data."""

import pytest
import torch
import torch.distributed as dist

import collops  # noqa: F401  (registers the backend and the ops)
from c10d_ranks import run_group_job
from collops import distributed as cdist
from collops import functional as F
from collops.compat import npu
from collops.patch import unpatch_torch_distributed


def test_helpers_before_init_process_group_say_so():
    assert not dist.is_initialized()
    expected = "Default process group has not been initialized"
    with pytest.raises(RuntimeError, match=expected):
        F.all_reduce(torch.ones(2))
    with pytest.raises(RuntimeError, match=expected):
        cdist.empty_shared((2,), torch.float32)


def test_npu_shim_accepts_cpu_devices_with_an_index():
    for device in (torch.device("cpu", 0), "cpu:0", torch.device("cpu"), "npu:1", 3):
        npu.check_device(device)
    npu.set_device(torch.device("cpu", 0))
    assert npu.current_device() == 0
    with pytest.raises(RuntimeError, match="unsupported device"):
        npu.check_device("cuda:0")


def _one_rank_mistakes(ctx):
    group = F.group_name()
    # 0-dim tensors have no rows to gather or scatter: a clear error, not an IndexError.
    for call in (
        lambda: torch.ops.collops.all_gather(torch.tensor(1.0), group),
        lambda: torch.ops.collops.reduce_scatter(torch.tensor(1.0), "sum", group),
        lambda: torch.ops.collops.all_gather_v(torch.tensor(1.0), [1], group),
    ):
        with pytest.raises(ValueError, match=r"needs a tensor of at least 1 dim"):
            call()
    # An output of another shape is refused, not filled by broadcasting the result over it.
    with pytest.raises(
        ValueError,
        match=r"all_gather_into_tensor_uneven: output has shape "
        r"\(3, 2\), but the result has shape \(1, 2\)",
    ):
        cdist.all_gather_into_tensor_uneven(torch.zeros(3, 2), torch.ones(1, 2), [1])
    with pytest.raises(
        ValueError,
        match=r"reduce_scatter_tensor_uneven: output has shape "
        r"\(2, 2\), but the result has shape \(1, 2\)",
    ):
        cdist.reduce_scatter_tensor_uneven(torch.zeros(2, 2), torch.ones(1, 2), [1])


def test_row_ops_and_uneven_helpers_refuse_what_they_cannot_do():
    run_group_job(1, _one_rank_mistakes)


def _positional_async_op(ctx):
    collops.patch_torch_distributed()
    try:

        @torch.compile
        def reduce_async(t):
            return dist.all_reduce(t, dist.ReduceOp.SUM, None, True)

        t = torch.ones(3)
        work = reduce_async(t)
        # async_op=True given by position asks for a Work as much as the keyword does.
        assert work is not None, "the compiled call returned None instead of a Work"
        work.wait()
        assert torch.equal(t, torch.ones(3))
    finally:
        unpatch_torch_distributed()


def test_patched_call_with_positional_async_op_returns_a_work():
    run_group_job(1, _positional_async_op)
