#!/usr/bin/env python3
"""TorchAir's collective-in-graph example, rewritten for plain torch, on CPU with collops.

``torchair.patch_for_hcom()`` becomes ``collops.patch_torch_distributed()``; the "hccl" process
group becomes "collops"; TorchAir's npu backend becomes torch.compile's default one, with
``fullgraph=True`` so any graph break is an error. Two spawned ranks; torch.multiprocessing's
join raises if either exits nonzero.

Run (after building the library, see python/collops/README.md):
    python3 examples/python/compile_collectives.py
"""

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import collops  # noqa: E402

collops.patch_torch_distributed()


class AllReduceSingeGroup(torch.nn.Module):
    def forward(self, x, y):
        x = x + y
        torch.distributed.all_reduce(x, op=torch.distributed.ReduceOp.SUM)
        return x


def example(rank, world_size, store):
    torch.distributed.init_process_group(
        "collops", init_method=f"file://{store}", rank=rank, world_size=world_size
    )
    x = torch.ones([2, 2], dtype=torch.int32)
    y = torch.ones([2, 2], dtype=torch.int32)
    model = torch.compile(AllReduceSingeGroup(), fullgraph=True, dynamic=False)
    out = torch.ones([2, 2], dtype=torch.int32) * 2 * world_size
    ret = model(x, y)
    assert out.equal(ret), ret
    # The uneven ops compile too: rank r contributes r + 1 rows.
    sizes = [r + 1 for r in range(world_size)]
    gather = torch.compile(lambda t: collops.functional.all_gather_v(t, sizes), fullgraph=True)
    g = gather(torch.full((rank + 1, 2), float(rank)))
    assert g.equal(torch.cat([torch.full((r + 1, 2), float(r)) for r in range(world_size)]))
    print(f"rank {rank}: PASS compiled all_reduce {ret.tolist()} and all_gather_v {g.shape}")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    store = os.path.join(tempfile.mkdtemp(), "store")
    torch.multiprocessing.spawn(example, args=(2, store), nprocs=2, join=True)
