"""collops.patch_torch_distributed(): dist.* collectives inside torch.compile(fullgraph=True)
become collops ops (no graph break) with eager's results, including a tensor-parallel MLP."""

import torch
import torch.distributed as dist

from c10d_ranks import run_group_job

WORLD = 2


def _dist_calls(x, rank, world):
    """Every patched API once; returns what the calls filled."""
    a = x * 2
    dist.all_reduce(a)
    gathered = [torch.empty(2 + r, 3) for r in range(world)]  # uneven list
    dist.all_gather(gathered, torch.ones(2 + rank, 3) * rank + x.sum())
    flat = torch.empty(world * x.numel())
    dist.all_gather_single(flat, x.reshape(-1))
    stacked = torch.empty(world, *x.shape)
    dist.all_gather_into_tensor(stacked, x * 3)  # the name before torch 2.13
    rs = torch.empty(x.numel() // world)
    dist.reduce_scatter_single(rs, x.reshape(-1) + 1)
    rs_old = torch.empty(x.shape[1])
    dist.reduce_scatter_tensor(rs_old, (x - 1).reshape(-1)[: world * x.shape[1]])
    splits_in = [1, 2] if rank == 0 else [3, 1]
    splits_out = [1, 3] if rank == 0 else [2, 1]
    a2a = torch.empty(sum(splits_out), 2)
    dist.all_to_all_single(
        a2a, torch.arange(sum(splits_in) * 2.0).view(-1, 2) + 10 * rank, splits_out, splits_in
    )
    even = torch.empty(4)
    dist.all_to_all_single(even, torch.arange(4.0) + 10 * rank)
    outs = [torch.empty(r + rank + 1) for r in range(world)]
    dist.all_to_all(outs, [torch.full((rank + j + 1,), float(rank * 10 + j)) for j in range(world)])
    b = x.clone()
    dist.broadcast(b, src=1)
    return [a, *gathered, flat, stacked, rs, rs_old, a2a, even, *outs, b]


class _TensorParallelMLP(torch.nn.Module):
    """Megatron's MLP: column-parallel fc1 (each rank holds hidden/world outputs), GELU,
    row-parallel fc2 whose partial sums are all-reduced."""

    def __init__(self, dim, hidden, rank, world):
        super().__init__()
        torch.manual_seed(0)
        full1, full2 = torch.randn(hidden, dim), torch.randn(dim, hidden)
        shard = hidden // world
        self.fc1 = torch.nn.Parameter(full1[rank * shard : (rank + 1) * shard].clone())
        self.fc2 = torch.nn.Parameter(full2[:, rank * shard : (rank + 1) * shard].clone())
        self.full = (full1, full2)

    def forward(self, x):
        y = torch.nn.functional.gelu(x @ self.fc1.t()) @ self.fc2.t()
        dist.all_reduce(y)
        return y


def _job(ctx):
    import collops
    from torch._dynamo.utils import counters

    rank, world = ctx.rank, ctx.world_size
    x = torch.arange(6.0).view(2, 3) + rank
    eager = _dist_calls(x, rank, world)
    collops.patch_torch_distributed()
    counters.clear()
    compiled = torch.compile(_dist_calls, fullgraph=True)(x, rank, world)
    for i, (got, want) in enumerate(zip(compiled, eager)):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"output {i}")
    # The compiled graph really holds collops ops (it is not the original dist calls).
    graphs = []
    torch._dynamo.reset()
    torch.compile(
        _dist_calls, fullgraph=True, backend=lambda gm, _: graphs.append(gm) or gm.forward
    )(x, rank, world)
    targets = {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}
    assert any("collops" in t for t in targets), targets
    # ... and none is left to Dynamo's own remapping onto torch's functional collectives.
    assert not [t for t in targets if "c10d" in t], targets

    mlp = _TensorParallelMLP(8, 16, rank, world)
    inp = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = mlp(inp)
        got = torch.compile(mlp, fullgraph=True)(inp)
        full1, full2 = mlp.full
        reference = torch.nn.functional.gelu(inp @ full1.t()) @ full2.t()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(want, reference, rtol=1e-5, atol=1e-5)
    assert not counters["graph_break"], dict(counters["graph_break"])
    collops.patch.unpatch_torch_distributed()
    return sorted(t for t in targets if "collops" in t)


def test_patched_dist_calls_and_tensor_parallel_mlp_compile_fullgraph():
    targets = run_group_job(WORLD, _job)[0]
    for op in (
        "all_reduce",
        "all_gather",
        "all_gather_v",
        "reduce_scatter",
        "all_to_all_v",
        "broadcast",
    ):
        assert {f"collops.{op}", f"collops.{op}.default"} & set(targets), (op, targets)


def _constants_job(ctx):
    """Tensors made inside the compiled function are constants: tracing runs the ops' real
    kernels on them, which called the patched dist.* again, without end (RecursionError)."""
    import collops

    rank, world = ctx.rank, ctx.world_size
    collops.patch_torch_distributed()
    try:

        def step(x):
            t = torch.tensor([1.0])
            dist.all_reduce(t)
            gathered = torch.empty(world)
            dist.all_gather_into_tensor(gathered, torch.tensor([2.0]))
            scattered = torch.empty(1)
            dist.reduce_scatter_tensor(scattered, torch.tensor([3.0, 4.0]))
            return x + t, gathered, scattered

        got = torch.compile(step, fullgraph=True)(torch.zeros(2))
    finally:
        collops.patch.unpatch_torch_distributed()
    want = (
        torch.full((2,), float(world)),
        torch.full((world,), 2.0),
        torch.tensor([(3.0 + rank) * world]),
    )
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    return True


def test_patched_calls_on_constants_made_inside_the_compiled_function():
    assert all(run_group_job(WORLD, _constants_job))
