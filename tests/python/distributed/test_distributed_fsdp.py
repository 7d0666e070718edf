"""FSDP2 (torch.distributed.fsdp.fully_shard) over "collops" trains exactly like over gloo: same
seed, same data, full parameters equal after every step, in float32 and with bfloat16
all-gathers (MixedPrecisionPolicy). 3 ranks and layer widths that do not divide by 3, so shards
are padded and uneven."""

import torch
import torch.distributed as dist

from c10d_ranks import run_group_job
from side_by_side import train_side_by_side

STEPS = 4


def _model():
    torch.manual_seed(4321)
    return torch.nn.Sequential(torch.nn.Linear(10, 17), torch.nn.ReLU(), torch.nn.Linear(17, 5))


def _sharded(mesh, mixed):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if mixed
        else MixedPrecisionPolicy()
    )
    model = _model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    return fully_shard(model, mesh=mesh, mp_policy=policy)


def _job(ctx, mixed):
    from torch.distributed.device_mesh import DeviceMesh

    gloo = dist.new_group(backend="gloo")
    meshes = {
        "collops": DeviceMesh.from_group(dist.group.WORLD, "cpu"),
        "gloo": DeviceMesh.from_group(gloo, "cpu"),
    }
    nets = {name: _sharded(mesh, mixed) for name, mesh in meshes.items()}
    compared = train_side_by_side(
        ctx.rank, nets, STEPS, ((6, 10), (6, 5)), lr=0.05, full=lambda p: p.full_tensor()
    )
    # The parameters moved: training happened, not a no-op that leaves both equal.
    start = _model()
    moved = [
        not torch.equal(p.full_tensor(), q)
        for p, q in zip(nets["collops"].parameters(), start.parameters())
    ]
    assert all(moved), moved
    return compared


def test_fsdp2_collops_matches_gloo_every_step():
    assert run_group_job(3, _job, False) == [STEPS * 4] * 3


def test_fsdp2_bfloat16_all_gathers_match_gloo():
    assert run_group_job(3, _job, True) == [STEPS * 4] * 3
