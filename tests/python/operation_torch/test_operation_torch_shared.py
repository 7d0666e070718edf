"""OperationTorch.empty_shared: tensors in the lccl heap (Communicator::AllocateShared), which the
collectives between processes move with one copy. Results must equal the golden values whatever
memory the tensors live in; the tests also check, from /proc/self/maps, that the memory really is
the communicator's shared segment where it should be, and ordinary memory where it cannot be."""

import json
import os

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
    want = torch.cat(
        [payload(j)[sum(piece(j, d) for d in range(me)) :][: recv[j]] for j in range(R)]
    ).reshape(1, -1)
    for step in range(3):
        ins = [
            x,
            golden.counts(*send),
            golden.counts(*sd),
            golden.counts(*recv),
            golden.counts(*rd),
            torch.zeros(sum(recv), dtype=torch.int8),
        ]
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


def fork_child_leaves_shared_memory_alone(ctx):
    """A child of fork() shares the heap's pages with its parent (MAP_SHARED memfd): its free of
    an inherited tensor (the deleter, run at `del` or at the child's exit) punched them out of the
    parent's tensor, which read zeros; its empty_shared handed it the parent's next tensor."""
    R = ctx.world_size
    op = golden.make_op("AllReduceOperation", ctx.param(allReduceType="sum"))
    op.execute([torch.ones(10)])  # the communicator exists: execute's outputs are in the heap
    (u,) = op.execute([torch.ones(1 << 16)])
    assert in_lccl_segment(u)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            try:
                op.empty_shared([1 << 16], torch.float32)
                code = 1
            except RuntimeError as e:
                if "ERROR_COMM_FAIL" not in str(e) or f"belongs to pid {os.getppid()}" not in str(
                    e
                ):
                    code = 2
            del u  # its deleter frees the heap range, in the child
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    golden.assert_equal(
        u, torch.full([1 << 16], float(R)), f"{ctx}: the parent's tensor after the child"
    )
    code = os.waitstatus_to_exitcode(status)
    assert code == 0, f"{ctx}: the child " + {
        1: "got shared memory",
        2: "was told something else",
    }.get(code, f"exited with {code}")
    v = op.empty_shared([1 << 16], torch.float32)
    assert in_lccl_segment(v)
    v.fill_(ctx.rank + 1)
    (w,) = op.execute([v])
    golden.assert_equal(
        w, torch.full([1 << 16], R * (R + 1) / 2), f"{ctx}: AllReduce after the fork"
    )
    golden.assert_equal(
        u, torch.full([1 << 16], float(R)), f"{ctx}: the parent's tensor at the end"
    )


def test_a_forked_child_leaves_its_parents_shared_tensors_alone(monkeypatch):
    monkeypatch.setenv("COLLOPS_SHM_HEAP_CACHE_BYTES", "0")  # every free gives its pages back
    run_process_ranks(2, fork_child_leaves_shared_memory_alone)


def test_thread_ranks_get_ordinary_memory_and_the_same_results():
    run_thread_ranks(2, alltoallvv2_shared, False)


def test_without_a_heap_empty_shared_falls_back_to_ordinary_memory(monkeypatch):
    monkeypatch.setenv("COLLOPS_SHM_HEAP_BYTES", "0")
    run_process_ranks(2, alltoallvv2_shared, False)


def test_empty_shared_rejects_an_unsupported_dtype():
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    assert (
        json.loads(
            op.set_param(
                json.dumps(
                    {"rank": 0, "rankSize": 1, "commMode": 1, "commDomain": "pytest-shared-dtype"}
                )
            )
        )["result"]
        == 0
    )
    try:
        op.empty_shared([4], torch.complex64)
    except RuntimeError as e:
        assert "complex" in str(e).lower() and "empty_shared" in str(e), str(e)
    else:
        raise AssertionError("empty_shared accepted complex64")


@pytest.mark.parametrize(
    "sizes,error",
    [
        ([-3], r"ERROR_INVALID_TENSOR_DIM.*shape \[-3\] has a negative dim"),
        (
            [2**62],
            r"ERROR_INVALID_TENSOR_SIZE.*shape \[4611686018427387904\] of Float needs more "
            r"than 2\^63 - 1 bytes",
        ),
        # Empty for collops, but torch's own size check overflows on the way: its message, without
        # the C++ backtrace.
        (
            [2**40, 2**40, 0, 2**40],
            r"ERROR_INTERNAL_ERROR.*torch: Storage size calculation "
            r"overflowed with sizes=\[1099511627776, 1099511627776, 0, "
            r"1099511627776\]$",
        ),
    ],
)
def test_empty_shared_checks_the_shape(sizes, error):
    # A byte count that wrapped to 0 once gave a tensor claiming 2^64 bytes over none.
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    assert (
        json.loads(
            op.set_param(
                json.dumps(
                    {"rank": 0, "rankSize": 1, "commMode": 1, "commDomain": "pytest-shared-shape"}
                )
            )
        )["result"]
        == 0
    )
    with pytest.raises(RuntimeError, match=error):
        op.empty_shared(sizes, torch.float32)
