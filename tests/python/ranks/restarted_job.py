"""A job for torchrun --max-restarts 1 whose rank 1 dies in the first attempt, after the group was
made and used: the restarted attempt must make its group afresh and finish. Prints one line per
rank of the attempt that finished (test_c10d_join.py, test_netns_c10d.py)."""

import os

import torch
import torch.distributed as dist

import collops  # noqa: F401  (registers the "collops" backend)
from collops import _c10d_backend

dist.init_process_group("cpu:collops")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
t = torch.ones(1000)
dist.all_reduce(t)
if attempt == 0 and rank == 1:
    os._exit(3)  # the first attempt loses a rank mid-job
for _ in range(3):
    dist.all_reduce(t)
assert torch.equal(t, torch.full((1000,), float(world**4))), t
print(f"rank {rank} attempt {attempt} done on {_c10d_backend.communicator_name()}", flush=True)
dist.destroy_process_group()
