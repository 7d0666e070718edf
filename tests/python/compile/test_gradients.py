"""Gradients through torch.ops.collops.*, eager and under torch.compile(fullgraph=True).

Golden: every rank rebuilds every rank's inputs from their seeds, runs the same collective as
plain torch on one process (stack and reduce, cat, split), and lets torch's autograd
differentiate the sum of all ranks' losses; its gradient for this rank's input must match the
one the distributed backward computed, for every op and every reduce op, with ties for max/min,
zeros for prod, uneven splits, and a chain of collectives (MoE dispatch and return) whose
backward runs the collectives in reverse. Over a collops group and over gloo (the uneven ops'
padded fallbacks).
"""

import torch
import torch.distributed as dist

from c10d_ranks import run_group_job

WORLD = 3
ROWS = [2, 0, 3]  # uneven rows per rank (all_gather_v)
SEND = [[1, 0, 2], [2, 1, 1], [0, 3, 1]]  # SEND[i][j]: rows rank i sends to rank j
REDUCE_OPS = ("sum", "avg", "max", "min", "prod")
_TORCH_REDUCE = {
    "sum": lambda s: s.sum(0),
    "avg": lambda s: s.mean(0),
    "max": lambda s: s.amax(0),
    "min": lambda s: s.amin(0),
    "prod": lambda s: s.prod(0),
}


def _input(op, rank, rows):
    """Rank `rank`'s input: small integers, so max/min meet ties and prod meets zeros."""
    g = torch.Generator().manual_seed(1000 * rank + rows)
    low = -2 if op == "prod" else 0
    return torch.randint(low, 3, (rows, 3), generator=g).double()


def _weights(rank, shape):
    """Rank `rank`'s loss is (output * weights).sum()."""
    g = torch.Generator().manual_seed(7 + rank)
    return torch.rand(shape, generator=g, dtype=torch.float64) + 0.5


def _cases():
    """(name, reduce op for the inputs, rows of rank r's input, collops call, reference that
    maps every rank's input to every rank's output)."""
    import collops.functional as F

    R = WORLD
    cases = []
    for op in REDUCE_OPS:
        cases.append(
            (
                f"all_reduce/{op}",
                op,
                lambda r: 4,
                lambda x, g, op=op: F.all_reduce(x, op, g),
                lambda xs, op=op: [_TORCH_REDUCE[op](torch.stack(xs))] * R,
            )
        )
        cases.append(
            (
                f"reduce_scatter/{op}",
                op,
                lambda r: 2 * R,
                lambda x, g, op=op: F.reduce_scatter(x, op, g),
                lambda xs, op=op: list(_TORCH_REDUCE[op](torch.stack(xs)).chunk(R)),
            )
        )
        cases.append(
            (
                f"reduce_scatter_v/{op}",
                op,
                lambda r: sum(ROWS),
                lambda x, g, op=op: F.reduce_scatter_v(x, ROWS, op, g),
                lambda xs, op=op: list(_TORCH_REDUCE[op](torch.stack(xs)).split(ROWS)),
            )
        )
    cases += [
        (
            "all_gather",
            "sum",
            lambda r: 2,
            lambda x, g: F.all_gather(x, g),
            lambda xs: [torch.cat(xs)] * R,
        ),
        (
            "all_gather_v",
            "sum",
            lambda r: ROWS[r],
            lambda x, g: F.all_gather_v(x, ROWS, g),
            lambda xs: [torch.cat(xs)] * R,
        ),
        (
            "all_to_all",
            "sum",
            lambda r: 2 * R,
            lambda x, g: F.all_to_all(x, g),
            lambda xs: [torch.cat([x.chunk(R)[j] for x in xs]) for j in range(R)],
        ),
        (
            "all_to_all_v",
            "sum",
            lambda r: sum(SEND[r]),
            lambda x, g: F.all_to_all_v(
                x, [SEND[i][_rank(g)] for i in range(R)], SEND[_rank(g)], g
            ),
            lambda xs: [
                torch.cat([x.split(SEND[i])[j] for i, x in enumerate(xs)]) for j in range(R)
            ],
        ),
        (
            "broadcast",
            "sum",
            lambda r: 3,
            lambda x, g: F.broadcast(x, 1, g),
            lambda xs: [xs[1]] * R,
        ),
        # MoE: dispatch rows, transform them, send them back, then gather every rank's result.
        ("moe_round_trip", "sum", lambda r: sum(SEND[r]), _moe_round_trip, _moe_reference),
    ]
    return cases


def _rank(group):
    return dist.get_rank(group)


def _moe_round_trip(x, g):
    import collops.functional as F

    r = _rank(g)
    incoming = [SEND[i][r] for i in range(WORLD)]
    y = F.all_to_all_v(x, incoming, SEND[r], g)
    y = torch.tanh(y) * (r + 1)
    back = F.all_to_all_v(y, SEND[r], incoming, g)
    return F.all_gather_v(back * x, [sum(send) for send in SEND], g)


def _moe_reference(xs):
    # Rows rank i sends to rank j come back transformed by rank j: tanh(row) * (j + 1).
    outs = []
    for x, send in zip(xs, SEND):
        blocks = [torch.tanh(b) * (j + 1) for j, b in enumerate(x.split(send))]
        outs.append(torch.cat(blocks) * x)
    return [torch.cat(outs)] * WORLD


def _reference_grad(reference, xs, rank):
    xs = [x.clone().requires_grad_(True) for x in xs]
    outs = reference(xs)
    total = sum((out * _weights(j, out.shape)).sum() for j, out in enumerate(outs))
    return torch.autograd.grad(total, xs[rank], materialize_grads=True)[0]


def _distributed_grad(fn, x, rank, group):
    x = x.clone().requires_grad_(True)
    out = fn(x, group)
    (out * _weights(rank, out.shape)).sum().backward()
    return x.grad


def _job(ctx):
    from torch._dynamo.utils import counters

    checked = []
    gloo = dist.new_group(backend="gloo")
    for group, compiled in ((dist.group.WORLD, False), (dist.group.WORLD, True), (gloo, False)):
        torch._dynamo.reset()
        counters.clear()
        for name, op, rows, call, reference in _cases():
            xs = [_input(op, r, rows(r)) for r in range(WORLD)]
            want = _reference_grad(reference, xs, ctx.rank)
            fn = torch.compile(call, fullgraph=True) if compiled else call
            got = _distributed_grad(fn, xs[ctx.rank], ctx.rank, group)
            torch.testing.assert_close(
                got,
                want,
                rtol=1e-12,
                atol=1e-12,
                msg=lambda m, name=name, compiled=compiled: f"{name} (compiled={compiled}): {m}",
            )
            checked.append((name, compiled, dist.get_backend(group)))
        assert not counters["graph_break"], dict(counters["graph_break"])
    return checked


def test_gradients_match_a_single_process_reference():
    results = run_group_job(WORLD, _job)
    checked = results[0]
    cases = 3 * len(REDUCE_OPS) + 6
    assert len(checked) == 3 * cases
    assert {c[1] for c in checked} == {False, True}
    assert all(r == checked for r in results)
