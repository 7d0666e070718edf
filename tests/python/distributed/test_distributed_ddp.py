"""DDP over "cpu:collops" trains exactly like DDP over gloo: same seed, same data, parameters
allclose after every step."""

import torch
import torch.distributed as dist

from c10d_ranks import run_group_job
from side_by_side import train_side_by_side

STEPS = 5


def _model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _job(ctx):
    from torch.nn.parallel import DistributedDataParallel as DDP

    gloo = dist.new_group(backend="gloo")
    # Small buckets, so several allreduces per step go through the comm hook's futures.
    nets = {
        name: DDP(_model(), process_group=pg, bucket_cap_mb=0.0005)
        for name, pg in (("collops", None), ("gloo", gloo))
    }
    compared = train_side_by_side(ctx.rank, nets, STEPS, ((16, 8), (16, 4)), lr=0.1)
    # Gradients were really averaged: both ranks hold identical parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in nets["collops"].parameters()])
    both = [torch.empty_like(flat) for _ in range(ctx.world_size)]
    dist.all_gather(both, flat)
    assert torch.equal(both[0], both[1])
    return compared


def test_ddp_collops_matches_gloo_every_step():
    assert run_group_job(2, _job, backend="cpu:collops") == [STEPS * 4] * 2
