"""One lccl rank for test_lccl_ptrace_scope.py, run as its own interpreter beside its peers (as
torchrun starts them: siblings, not parent and child). Runs calls large enough for the single
copy (process_vm_readv/writev): an AllReduce of 4 MiB and an uneven AllToAllV of 256-768 KiB
pieces, and prints one JSON line saying whether each result was golden.
"""

import json
import os

import torch

import collops  # noqa: F401

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])


def make_op(name, **extra):
    op = torch.classes.OperationTorch.OperationTorch(name)
    answer = json.loads(
        op.set_param(
            json.dumps(dict(rank=rank, rankSize=world, rankRoot=0, backend="lccl", **extra))
        )
    )
    assert answer["result"] == 0, answer
    return op


def all_reduce_is_golden(n=1 << 20):
    (total,) = make_op("AllReduceOperation", allReduceType="sum").execute(
        [torch.full((n,), float(rank + 1))]
    )
    return bool(torch.all(total == world * (world + 1) / 2))


def piece(sender, receiver):
    """Elements rank `sender` sends rank `receiver`: uneven, all at least 64K floats."""
    return (1 + (sender + 2 * receiver) % 3) << 16


def all_to_allv_is_golden():
    send = [piece(rank, j) for j in range(world)]
    recv = [piece(j, rank) for j in range(world)]
    sdispls = [sum(send[:j]) for j in range(world)]
    rdispls = [sum(recv[:j]) for j in range(world)]
    x = torch.arange(sum(send), dtype=torch.float32) + 1e6 * rank
    (y,) = make_op(
        "AllToAllVOperation", sendCounts=send, sdispls=sdispls, recvCounts=recv, rdispls=rdispls
    ).execute([x])
    want = []
    for j in range(world):
        offset = sum(piece(j, k) for k in range(rank))  # where j's piece for this rank starts
        want.append(torch.arange(offset, offset + recv[j], dtype=torch.float32) + 1e6 * j)
    return torch.equal(y.reshape(-1), torch.cat(want))


print(
    json.dumps(
        {
            "rank": rank,
            "pid": os.getpid(),
            "all_reduce": all_reduce_is_golden(),
            "all_to_allv": all_to_allv_is_golden(),
        }
    ),
    flush=True,
)
