"""Send, Recv and SendRecv through OperationTorch when one rank refuses its own tensor (not
strided, or of a dtype collops has no name for) while its peer passes a good one: the refusing rank
raises its own error naming the tensor, and the peer, already waiting in the matching call, fails
at once with ERROR_RANK_MISMATCH naming the refusing rank and its Status
(OperationBase::RefusalsImpl), instead of waiting for the timeout. On lccl processes (backend
"hccl" on one host, and "lccl") and on the "c10d" engine over a gloo group; every wait is checked
against a fraction of a short timeout, and the pair must still deliver afterwards."""

import os
import time

import pytest
import torch
import torch.distributed as dist

import golden_harness as golden
from c10d_ranks import run_group_job
from rank_harness import run_process_ranks

TIMEOUT = 20  # COLLOPS_TIMEOUT, and the gloo group's timeout for the c10d engine
QUICK = TIMEOUT / 4  # a peer told of the refusal fails well within this
DEADLINE = 150  # the harness kills every rank still running after this
N = 4


def _good_send(ctx, param):
    # Rank 0 to rank 1, checked: the pair is in step.
    if ctx.rank == 0:
        golden.make_op("SendOperation", param(destRank=1)).execute([torch.arange(N) * 1.0])
    else:
        (y,) = golden.make_op("RecvOperation", param(srcRank=0)).execute([torch.empty(N)])
        assert torch.equal(y, torch.arange(N) * 1.0), y


# (refusing rank, its op, its bad tensor, its own error, what its peer's error says)
CASES = [
    (
        0,
        "SendOperation",
        lambda: torch.ones(N).to_sparse(),
        "inTensors[0] must be a dense (strided) tensor, got layout torch.sparse_coo",
        "rank 0 refused its send to rank 1 (ERROR_INVALID_TENSOR_FORMAT",
    ),
    (
        1,
        "RecvOperation",
        lambda: torch.ones(N, dtype=torch.complex64),
        "ERROR_INVALID_TENSOR_DTYPE",
        "rank 1 refused its receive from rank 0 (ERROR_INVALID_TENSOR_DTYPE",
    ),
    (
        1,
        "SendRecvOperation",
        lambda: torch.ones(N).to_mkldnn(),
        "inTensors[0] must be a dense (strided) tensor, got layout torch._mkldnn",
        "rank 1 refused its ",
    ),
]
PEER_OP = {"SendOperation": "RecvOperation", "RecvOperation": "SendOperation"}


def _refusals(ctx, param):
    peer = 1 - ctx.rank
    _good_send(ctx, param)  # the communicator exists: a refusal can be told through it
    for refuser, name, bad, own, told in CASES:
        mine = name if ctx.rank == refuser else PEER_OP.get(name, name)
        extra = {
            "SendOperation": {"destRank": peer},
            "RecvOperation": {"srcRank": peer},
            "SendRecvOperation": {"destRank": peer, "srcRank": peer},
        }[mine]
        op = golden.make_op(mine, param(**extra))
        start = time.monotonic()
        with pytest.raises(RuntimeError) as raised:
            op.execute([bad() if ctx.rank == refuser else torch.ones(N)])
        elapsed = time.monotonic() - start
        text = str(raised.value)
        if ctx.rank == refuser:
            assert own in text, text
        else:
            assert "ERROR_RANK_MISMATCH" in text and told in text, text
        assert elapsed < QUICK, (
            f"rank {ctx.rank}: {name} refused by rank {refuser}: {elapsed:.1f} s"
        )
        _good_send(ctx, param)
    return True


def _on_processes(ctx, backend):
    os.environ["COLLOPS_TIMEOUT"] = str(TIMEOUT)  # read when the communicator is made
    return _refusals(ctx, lambda **extra: ctx.param(backend=backend, **extra))


@pytest.mark.parametrize("backend", ["hccl", "lccl"])
def test_a_rank_refusing_its_tensor_fails_its_peer_at_once_on_processes(backend):
    assert run_process_ranks(2, _on_processes, backend, timeout=DEADLINE) == [True, True]


def _on_c10d(ctx):
    # Backend "c10d", commDomain "": the default group, gloo here.
    assert dist.is_initialized()
    return _refusals(ctx, lambda **extra: ctx.param(backend="c10d", **extra))


def test_a_rank_refusing_its_tensor_fails_its_peer_at_once_on_the_c10d_engine():
    assert run_group_job(2, _on_c10d, backend="gloo", group_timeout=TIMEOUT, timeout=DEADLINE) == [
        True,
        True,
    ]
