"""DDP over "cpu:collops" trains exactly like DDP over gloo: same seed, same data, parameters
allclose after every step."""
import torch
import torch.distributed as dist

from c10d_ranks import run_group_job

STEPS = 5


def _model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _job(ctx):
    from torch.nn.parallel import DistributedDataParallel as DDP

    gloo = dist.new_group(backend="gloo")
    # Small buckets, so several allreduces per step go through the comm hook's futures.
    nets = {name: DDP(_model(), process_group=pg, bucket_cap_mb=0.0005)
            for name, pg in (("collops", None), ("gloo", gloo))}
    opts = {name: torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
            for name, net in nets.items()}
    data = torch.Generator().manual_seed(ctx.rank)
    compared = 0
    for _ in range(STEPS):
        x, y = torch.randn(16, 8, generator=data), torch.randn(16, 4, generator=data)
        for name, net in nets.items():
            opts[name].zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opts[name].step()
        for (n, p), q in zip(nets["collops"].named_parameters(), nets["gloo"].parameters()):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6, msg=n)
            compared += 1
    # Gradients were really averaged: both ranks hold identical parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in nets["collops"].parameters()])
    both = [torch.empty_like(flat) for _ in range(ctx.world_size)]
    dist.all_gather(both, flat)
    assert torch.equal(both[0], both[1])
    return compared


def test_ddp_collops_matches_gloo_every_step():
    assert run_group_job(2, _job, backend="cpu:collops") == [STEPS * 4] * 2
