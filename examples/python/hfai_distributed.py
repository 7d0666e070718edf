#!/usr/bin/env python3
"""hfai.distributed's examples on collops: the uneven all_gather of two ranks and
pairwise_apply with f = x + y over four ranks, printing what hfai's docstrings show.

Run (after building the library, see python/collops/README.md):
    python3 examples/python/hfai_distributed.py
"""

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import collops  # noqa: E402,F401
import collops.distributed as dist  # noqa: E402


def example(rank, world_size, store):
    torch.distributed.init_process_group(
        "collops", init_method=f"file://{store}", rank=rank, world_size=world_size
    )
    # hfai's all_gather example has 2 ranks: a sub-group of ranks 0 and 1 (every rank must
    # call new_group).
    group = torch.distributed.new_group([0, 1])
    if rank < 2:
        tensor_list = [torch.zeros(2 + i, dtype=torch.int64) for i in range(2)]
        tensor = torch.arange(2 + rank, dtype=torch.int64) + 1 + 2 * rank
        dist.all_gather(tensor_list, tensor, group=group)
        assert [t.tolist() for t in tensor_list] == [[1, 2], [3, 4, 5]]
        print(f"rank {rank}: all_gather -> {tensor_list}")

    def f(x, y):
        return x + y

    x = torch.ones(1) * rank
    result = dist.pairwise_apply(f, x)
    assert [t.item() for t in result] == [float(rank + j) for j in range(world_size)]
    print(f"rank {rank}: pairwise_apply -> {result}")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    store = os.path.join(tempfile.mkdtemp(), "store")
    torch.multiprocessing.spawn(example, args=(4, store), nprocs=4, join=True)
