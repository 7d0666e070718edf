"""Tensor parallelism (DTensor's ColwiseParallel / RowwiseParallel) and pipeline parallelism
(torch.distributed.pipelining) over "collops" give what the same model gives in one process:
the tensor-parallel MLP trains step for step like its unsplit copy, eager and compiled without a
graph break, and a two-stage GPipe schedule returns the unsplit model's output, loss and gradients.
"""

import torch
import torch.distributed as dist

from c10d_ranks import run_group_job

STEPS = 3


def _mlp():
    torch.manual_seed(2468)
    # The hidden width divides by the ranks: DTensor's tensor parallelism (over gloo too) cannot
    # propagate uneven shards of it through the row-parallel matmul.
    return torch.nn.Sequential(torch.nn.Linear(10, 18), torch.nn.ReLU(), torch.nn.Linear(18, 5))


def _tensor_parallel(mesh):
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    return parallelize_module(_mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})


def _tp_job(ctx, compiled):
    from torch.distributed.device_mesh import DeviceMesh

    mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    split, whole = _tensor_parallel(mesh), _mlp()
    run = torch.compile(split, fullgraph=True) if compiled else split
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (split, whole)]
    data = torch.Generator().manual_seed(99)  # the same batch on every rank, as TP expects
    compared = 0
    for _ in range(STEPS):
        x, y = torch.randn(6, 10, generator=data), torch.randn(6, 5, generator=data)
        for opt in opts:
            opt.zero_grad()
        out, expected = run(x), whole(x)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
        torch.nn.functional.mse_loss(out, y).backward()
        torch.nn.functional.mse_loss(expected, y).backward()
        for opt in opts:
            opt.step()
        for (name, p), q in zip(split.named_parameters(), whole.parameters()):
            torch.testing.assert_close(p.full_tensor(), q, rtol=1e-5, atol=1e-6, msg=name)
            compared += 1
    # The column-parallel weight really is split: this rank holds only its rows of it.
    local_rows = split[0].weight.to_local().shape[0]
    assert local_rows == 18 // ctx.world_size, local_rows
    return compared


def test_tensor_parallel_mlp_trains_like_the_unsplit_model():
    assert run_group_job(3, _tp_job, False) == [STEPS * 4] * 3


def test_compiled_tensor_parallel_mlp_is_one_graph_and_trains_like_the_unsplit_model():
    # fullgraph=True: a graph break anywhere in the forward (a collective dynamo cannot trace)
    # is an error, not a silent fallback to eager.
    assert run_group_job(2, _tp_job, True) == [STEPS * 4] * 2


def _stages():
    torch.manual_seed(1357)
    first = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.ReLU())
    second = torch.nn.Sequential(torch.nn.Linear(12, 3))
    return first, second


def _pipeline_job(ctx):
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    stages = _stages()
    whole = torch.nn.Sequential(*_stages())
    mine = stages[ctx.rank]
    stage = PipelineStage(mine, ctx.rank, ctx.world_size, torch.device("cpu"))
    schedule = ScheduleGPipe(
        stage,
        n_microbatches=4,
        loss_fn=lambda out, target: torch.nn.functional.mse_loss(out, target),
    )
    data = torch.Generator().manual_seed(7)
    x, y = torch.randn(8, 8, generator=data), torch.randn(8, 3, generator=data)
    if ctx.rank == 0:
        schedule.step(x)
    else:
        losses = []
        out = schedule.step(target=y, losses=losses)
        torch.testing.assert_close(out, whole(x), rtol=1e-5, atol=1e-6)
        # GPipe's loss per microbatch of 2 rows; their mean is the whole batch's loss.
        expected = [
            torch.nn.functional.mse_loss(whole(xm), ym) for xm, ym in zip(x.chunk(4), y.chunk(4))
        ]
        torch.testing.assert_close(torch.stack(losses), torch.stack(expected))
    # The schedule divides the summed microbatch gradients by their number (scale_grads): for
    # equal microbatches, the gradients of the whole batch's mean loss.
    torch.nn.functional.mse_loss(whole(x), y).backward()
    own = whole[ctx.rank]
    compared = 0
    for (name, p), q in zip(mine.named_parameters(), own.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
        compared += 1
    return compared


def test_two_stage_gpipe_gives_the_unsplit_models_output_loss_and_gradients():
    assert run_group_job(2, _pipeline_job) == [2, 2]
