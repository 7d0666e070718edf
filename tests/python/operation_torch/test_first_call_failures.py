"""A rank whose first call of an operation fails its own checks through OperationTorch, before the
operation's communicator exists: it joins the communicator's creation, where its peer waits, and
tells the peer (OperationBase::ShareFailure), so the peer fails at once with ERROR_RANK_MISMATCH
naming it and its Status instead of waiting for the timeout, and it raises its own error. Each case
runs on a commDomain of its own, so its refused call is the domain's first; every wait is checked
against a fraction of a short timeout, and a good call on the same domain must deliver afterwards
(both ranks are still at the same call)."""

import os
import time

import pytest
import torch

import golden_harness as golden
from rank_harness import run_process_ranks

TIMEOUT = 20  # COLLOPS_TIMEOUT
QUICK = TIMEOUT / 4  # a peer told of the failure fails well within this
DEADLINE = 150  # the harness kills every rank still running after this
N = 4


# Each returns this rank's call: call(bad) runs it, spoiled on rank 1 when `bad`, and returns
# (what it delivered, what it must deliver) of a good call.


def _reduce_scatter_x_of_a_shape_rank_size_does_not_divide(ctx, param):
    # execute: InferShape refuses rank 1's x (its outputs cannot be made).
    op = golden.make_op("ReduceScatterOperation", param())
    x = torch.arange(N, dtype=torch.float) + ctx.rank
    golden_y = (torch.arange(N, dtype=torch.float) * 2 + 1)[ctx.rank * N // 2 :][: N // 2]
    return lambda bad: (op.execute([torch.ones(N + 1) if bad else x])[0], golden_y)


def _all_reduce_y_of_another_shape(ctx, param):
    # execute_out: the op's Setup refuses rank 1's y.
    op = golden.make_op("AllReduceOperation", param())
    x = torch.arange(N, dtype=torch.float) + ctx.rank

    def call(bad):
        y = torch.empty(N + 1 if bad else N)
        op.execute_out([x], [y])
        return y, torch.arange(N, dtype=torch.float) * 2 + 1

    return call


def _recv_y_of_an_unknown_dtype(ctx, param):
    # Rank 1's Recv template has a dtype collops has no name for; rank 0 sends.
    sent = torch.arange(N, dtype=torch.float) + 7
    if ctx.rank == 0:
        op = golden.make_op("SendOperation", param(destRank=1))
        return lambda bad: (op.execute([sent]), [])
    op = golden.make_op("RecvOperation", param(srcRank=0))
    dtype_of = lambda bad: torch.complex64 if bad else torch.float  # noqa: E731
    return lambda bad: (op.execute([torch.empty(N, dtype=dtype_of(bad))])[0], sent)


# (how a call is made, rank 1's own error, what rank 0's error says)
CASES = [
    (
        _reduce_scatter_x_of_a_shape_rank_size_does_not_divide,
        "ERROR_INVALID_TENSOR_DIM",
        "rank 1 failed its own checks for this call (ERROR_INVALID_TENSOR_DIM)",
    ),
    (
        _all_reduce_y_of_another_shape,
        "outTensors[0] (y) has shape",
        "rank 1 failed its own checks for this call (ERROR_INVALID_TENSOR_DIM)",
    ),
    (
        _recv_y_of_an_unknown_dtype,
        "ERROR_INVALID_TENSOR_DTYPE",
        "rank 1 refused its receive from rank 0 (ERROR_INVALID_TENSOR_DTYPE",
    ),
]


def _first_calls(ctx, backend):
    os.environ["COLLOPS_TIMEOUT"] = str(TIMEOUT)  # read when the communicator is made
    for i, (make_call, own, told) in enumerate(CASES):
        domain = f"first-call-{i}"

        def param(domain=domain, **extra):
            return ctx.param(domain=domain, backend=backend, **extra)

        call = make_call(ctx, param)
        start = time.monotonic()
        with pytest.raises(RuntimeError) as raised:
            call(bad=ctx.rank == 1)
        elapsed = time.monotonic() - start
        text = str(raised.value)
        if ctx.rank == 1:
            assert own in text and "ERROR_TIMEOUT" not in text, text
        else:
            assert "ERROR_RANK_MISMATCH" in text and told in text, text
        assert elapsed < QUICK, f"rank {ctx.rank}: {make_call.__name__}: {elapsed:.1f} s"
        # Still at the same call: a good one on the same domain delivers.
        got, expected = make_call(ctx, param)(bad=False)
        assert torch.equal(torch.as_tensor(got), torch.as_tensor(expected)), (i, got, expected)
    return True


@pytest.mark.parametrize("backend", ["hccl", "lccl"])
def test_a_rank_failing_its_first_call_fails_its_peer_at_once(backend):
    assert run_process_ranks(2, _first_calls, backend, timeout=DEADLINE) == [True, True]
