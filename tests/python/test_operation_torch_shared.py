"""OperationTorch.empty_shared: tensors in the lccl heap (Communicator::AllocateShared), which the
collectives between processes move with one copy. Results must equal the golden values whatever
memory the tensors live in; the tests also check, from /proc/self/maps, that the memory really is
the communicator's shared segment where it should be, and ordinary memory where it cannot be."""
import json

import pytest
import torch

import collops  # noqa: F401
import golden_harness as golden
from rank_harness import in_lccl_segment, run_process_ranks, run_thread_ranks


def piece(src, dst):
    """int8 elements rank src sends rank dst: uneven, from 0 to beyond the 8 KiB whole-piece size."""
    return ((src * 7 + dst * 3) % 5) * 9000


def alltoallvv2_shared(ctx, expect_shared):
    R, me = ctx.world_size, ctx.rank
    op = golden.make_op("AllToAllVV2Operation", ctx.param())
    send = [piece(me, d) for d in range(R)]
    sd = [sum(send[:d]) for d in range(R)]
    recv = [piece(j, me) for j in range(R)]
    rd = [sum(recv[:j]) for j in range(R)]
    golden.bind(op, sendCounts=send, sdispls=sd, recvCounts=recv, rdispls=rd)

    def payload(rank):
        n = sum(piece(rank, d) for d in range(R))
        return ((torch.arange(n, dtype=torch.int64) * 7 + rank * 31) % 251 - 125).to(torch.int8)

    x = op.empty_shared([sum(send)], torch.int8)
    assert x.shape == (sum(send),) and x.dtype == torch.int8
    assert in_lccl_segment(x) == expect_shared, f"{ctx}: input in segment {in_lccl_segment(x)}"
    x.copy_(payload(me))
    want = torch.cat([payload(j)[sum(piece(j, d) for d in range(me)):][:recv[j]]
                      for j in range(R)]).reshape(1, -1)
    for step in range(3):
        ins = [x, golden.counts(*send), golden.counts(*sd), golden.counts(*recv),
               golden.counts(*rd), torch.zeros(sum(recv), dtype=torch.int8)]
        (y,) = op.execute(ins)
        golden.assert_equal(y, want, f"{ctx} AllToAllVV2 on shared memory, step {step}")
        # The communicator exists once empty_shared ran, so execute's outputs are shared too.
        assert in_lccl_segment(y) == expect_shared, f"{ctx}: output in segment {in_lccl_segment(y)}"


def allreduce_shared(ctx):
    op = golden.make_op("AllReduceOperation", ctx.param(allReduceType="sum"))
    n = 300001  # reduce-scatter + all-gather, several chunks
    x = op.empty_shared([n], torch.float32)
    assert in_lccl_segment(x)
    x.copy_(torch.arange(n, dtype=torch.float32) % 97 * (ctx.rank + 1))
    (y,) = op.execute([x])
    want = torch.arange(n, dtype=torch.float32) % 97 * (ctx.world_size * (ctx.world_size + 1) / 2)
    golden.assert_equal(y, want, f"{ctx} AllReduce on shared memory")


def test_alltoallvv2_int8_on_shared_memory_between_processes():
    run_process_ranks(3, alltoallvv2_shared, True)


def test_allreduce_on_shared_memory_between_processes():
    run_process_ranks(2, allreduce_shared)


def test_thread_ranks_get_ordinary_memory_and_the_same_results():
    run_thread_ranks(2, alltoallvv2_shared, False)


def test_without_a_heap_empty_shared_falls_back_to_ordinary_memory(monkeypatch):
    monkeypatch.setenv("COLLOPS_SHM_HEAP_BYTES", "0")
    run_process_ranks(2, alltoallvv2_shared, False)


def test_empty_shared_rejects_an_unsupported_dtype():
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    assert json.loads(op.set_param(json.dumps({"rank": 0, "rankSize": 1, "commMode": 1,
                                               "commDomain": "pytest-shared-dtype"})))["result"] == 0
    try:
        op.empty_shared([4], torch.complex64)
    except RuntimeError as e:
        assert "complex" in str(e).lower() and "empty_shared" in str(e), str(e)
    else:
        raise AssertionError("empty_shared accepted complex64")


@pytest.mark.parametrize("sizes,error", [
    ([-3], r"ERROR_INVALID_TENSOR_DIM.*shape \[-3\] has a negative dim"),
    ([2**62], r"ERROR_INVALID_TENSOR_SIZE.*shape \[4611686018427387904\] of Float needs more "
              r"than 2\^63 - 1 bytes"),
    # Empty for collops, but torch's own size check overflows on the way: its message, without
    # the C++ backtrace.
    ([2**40, 2**40, 0, 2**40], r"ERROR_INTERNAL_ERROR.*torch: Storage size calculation "
                               r"overflowed with sizes=\[1099511627776, 1099511627776, 0, "
                               r"1099511627776\]$"),
])
def test_empty_shared_checks_the_shape(sizes, error):
    # A byte count that wrapped to 0 once gave a tensor claiming 2^64 bytes over none.
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    assert json.loads(op.set_param(json.dumps({"rank": 0, "rankSize": 1, "commMode": 1,
                                               "commDomain": "pytest-shared-shape"})))["result"] == 0
    with pytest.raises(RuntimeError, match=error):
        op.empty_shared(sizes, torch.float32)
