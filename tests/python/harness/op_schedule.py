"""A random schedule of OperationTorch calls (the ATB way of driving collops), checked on every
rank; golden_harness runs it as the case "random_schedule" on every engine its cases run on
(lccl threads and processes, backend "c10d" over a torch group, across simulated hosts).

Every rank draws the same seeded sequence of operations -- AllReduce, AllGather, AllGatherV,
ReduceScatter, ReduceScatterV, Broadcast, AllToAll, AllToAllV, AllToAllVV2 -- each with a dtype
its contract accepts, sizes from 0 (where the op allows it) to a few hundred thousand elements,
and the layouts the fixed goldens never use: AllGatherV and AllToAllV(V2) blocks received in a
random rank order (with gaps where the output allows them), ReduceScatterV and AllToAllV(V2)
sends laid out in a different random order with gaps on every rank. AllToAllVV2 and AllGatherV
rebind one op object every time (the MoE dispatch pattern). Goldens come from golden_harness
(computed with torch on every rank) and use its tolerances.
"""

import random

import torch

import golden_harness as golden

OPS = (
    "all_reduce",
    "all_gather",
    "all_gather_v",
    "reduce_scatter",
    "reduce_scatter_v",
    "broadcast",
    "all_to_all",
    "all_to_allv",
    "all_to_allvv2",
)


class _Step:
    def __init__(self, ctx, seed, step, reused):
        self.ctx, self.R, self.rank = ctx, ctx.world_size, ctx.rank
        self.seed = seed * 1000 + step
        self.draw = random.Random(seed * 7919 + step)  # the same draws on every rank
        self.reused = reused
        self.what = f"{ctx} step {step}"

    def count(self):
        kind = self.draw.randrange(8)
        return (
            0
            if kind == 0
            else self.draw.randint(1, 40)
            if kind < 4
            else self.draw.randint(200, 5000)
            if kind < 7
            else self.draw.randint(15_000, 60_000)
        )

    def data(self, rank, shape, dtype, tag=""):
        return golden.rank_tensor(f"{self.seed}/{tag}", rank, tuple(shape), dtype)

    def layout(self, sizes, gaps):
        """Offsets of blocks `sizes` in a random order, with random gaps when `gaps`; and the
        extent they span."""
        order = list(range(len(sizes)))
        self.draw.shuffle(order)
        offsets, at = [0] * len(sizes), 0
        for j in order:
            at += self.draw.randint(0, 3) if gaps else 0
            offsets[j], at = at, at + sizes[j]
        return offsets, at

    def op(self, name, **param):
        return golden.make_op(name, self.ctx.param(**param))

    # ---- one method per operation
    def all_reduce(self):
        reduce_type = self.draw.choice(golden.REDUCE_TYPES)
        dtype = self.draw.choice(golden.REDUCIBLE)
        shape = [self.count()] if self.draw.random() < 0.5 else [self.count() // 3 + 1, 3]
        xs = [self.data(r, shape, dtype) for r in range(self.R)]
        (y,) = self.op("AllReduceOperation", allReduceType=reduce_type).execute([xs[self.rank]])
        golden.assert_reduced(
            y,
            golden.reduce_golden(xs, reduce_type, dtype),
            f"{self.what} AllReduce {reduce_type} {dtype} {shape}",
        )

    def all_gather(self):
        dtype = self.draw.choice(golden.MOVABLE)
        shape = [self.count() // 2 + 1, 2]
        xs = [self.data(r, shape, dtype) for r in range(self.R)]
        (y,) = self.op("AllGatherOperation").execute([xs[self.rank]])
        golden.assert_equal(y, torch.stack(xs), f"{self.what} AllGather {dtype} {shape}")

    def all_gather_v(self):
        dtype, d1 = self.draw.choice(golden.MOVABLE), self.draw.choice((1, 2, 3))
        send = [self.count() for _ in range(self.R)]
        rdispls, extent = self.layout(send, gaps=True)
        rows = -(-extent // d1) + 1
        xs = [self.data(r, (-(-send[r] // d1) + 1, d1), dtype) for r in range(self.R)]
        want = torch.zeros(rows * d1, dtype=dtype)
        for i in range(self.R):
            want[rdispls[i] : rdispls[i] + send[i]] = xs[i].flatten()[: send[i]]
        op = self.reused("AllGatherVOperation")
        golden.bind(op, sendCount=send[self.rank], recvCounts=send, rdispls=rdispls)
        (y,) = op.execute(
            [
                xs[self.rank],
                golden.counts(send[self.rank]),
                golden.counts(*send),
                golden.counts(*rdispls),
                torch.zeros(rows, dtype=torch.int8),
            ]
        )
        golden.assert_equal(
            y,
            want.reshape(rows, d1),
            f"{self.what} AllGatherV {dtype} send {send} rdispls {rdispls}",
        )

    def reduce_scatter(self):
        reduce_type = self.draw.choice(golden.REDUCE_TYPES)
        dtype, n = self.draw.choice(golden.REDUCIBLE), self.count() // 4
        xs = [self.data(r, (self.R * n, 2), dtype) for r in range(self.R)]
        want = golden.reduce_golden(xs, reduce_type, dtype)[self.rank * n : (self.rank + 1) * n]
        (y,) = self.op("ReduceScatterOperation", reduceType=reduce_type).execute([xs[self.rank]])
        golden.assert_reduced(y, want, f"{self.what} ReduceScatter {reduce_type} {dtype} n={n}")

    def reduce_scatter_v(self):
        reduce_type = self.draw.choice(golden.REDUCE_TYPES)
        dtype, d1 = self.draw.choice(golden.REDUCIBLE), self.draw.choice((1, 2))
        c = [self.count() for _ in range(self.R)]
        layouts = [self.layout(c, gaps=True) for _ in range(self.R)]  # one per sending rank
        xs = [self.data(j, (-(-layouts[j][1] // d1) + 1, d1), dtype) for j in range(self.R)]
        me = self.rank
        blocks = [
            xs[j].flatten()[layouts[j][0][me] : layouts[j][0][me] + c[me]] for j in range(self.R)
        ]
        rows = -(-c[me] // d1) + 1
        want = torch.zeros(rows * d1, dtype=dtype)
        want[: c[me]] = golden.reduce_golden(blocks, reduce_type, dtype)
        sdispls = layouts[me][0]
        op = self.op("ReduceScatterVOperation", reduceType=reduce_type)
        golden.bind(op, sendCounts=c, sdispls=sdispls, recvCount=c[me])
        (y,) = op.execute(
            [
                xs[me],
                golden.counts(*c),
                golden.counts(*sdispls),
                golden.counts(c[me]),
                torch.zeros(rows, dtype=torch.int64),
            ]
        )
        golden.assert_reduced(
            y,
            want.reshape(rows, d1),
            f"{self.what} ReduceScatterV {reduce_type} {dtype} counts {c}",
        )

    def broadcast(self):
        dtype, root = self.draw.choice(golden.MOVABLE), self.draw.randrange(self.R)
        shape = [self.count()]
        x = self.data(self.rank, shape, dtype)
        assert list(self.op("BroadcastOperation", rankRoot=root).execute([x])) == []
        golden.assert_equal(
            x, self.data(root, shape, dtype), f"{self.what} Broadcast {dtype} root {root}"
        )

    def all_to_all(self):
        dtype, k = self.draw.choice(golden.MOVABLE), self.count() // 8
        xs = [self.data(r, (self.R * k, 2), dtype) for r in range(self.R)]
        chunk = 2 * k
        want = torch.cat([x.flatten()[self.rank * chunk : (self.rank + 1) * chunk] for x in xs])
        (y,) = self.op("AllToAllOperation").execute([xs[self.rank]])
        golden.assert_equal(y, want.reshape(self.R * k, 2), f"{self.what} AllToAll {dtype} k={k}")

    def _exchange(self):
        """(C, sdispls per rank, xs, recv, rdispls, golden) of a random AllToAllV: C[j][r]
        elements from j to r, each rank receiving at least one."""
        dtype = self.draw.choice(golden.MOVABLE)
        C = [[self.count() // 4 for _ in range(self.R)] for _ in range(self.R)]
        for r in range(self.R):
            C[r][r] = max(C[r][r], 1)
        sends = [self.layout(C[j], gaps=True) for j in range(self.R)]
        xs = [self.data(j, (sends[j][1] + 1,), dtype) for j in range(self.R)]
        me = self.rank
        recv = [C[j][me] for j in range(self.R)]
        rdispls, total = self.layout(recv, gaps=False)  # y [1, total] is tiled exactly
        want = torch.zeros(total, dtype=dtype)
        for j in range(self.R):
            sd = sends[j][0][me]
            want[rdispls[j] : rdispls[j] + recv[j]] = xs[j][sd : sd + recv[j]]
        return dtype, C[me], sends[me][0], xs[me], recv, rdispls, want.reshape(1, -1)

    def all_to_allv(self):
        dtype, send, sdispls, x, recv, rdispls, want = self._exchange()
        op = self.op(
            "AllToAllVOperation", sendCounts=send, sdispls=sdispls, recvCounts=recv, rdispls=rdispls
        )
        (y,) = op.execute([x])
        golden.assert_equal(y, want, f"{self.what} AllToAllV {dtype} send {send} recv {recv}")

    def all_to_allvv2(self):
        dtype, send, sdispls, x, recv, rdispls, want = self._exchange()
        op = self.reused("AllToAllVV2Operation")
        golden.bind(op, sendCounts=send, sdispls=sdispls, recvCounts=recv, rdispls=rdispls)
        (y,) = op.execute(
            [
                x,
                golden.counts(*send),
                golden.counts(*sdispls),
                golden.counts(*recv),
                golden.counts(*rdispls),
                torch.zeros(sum(recv), dtype=torch.int8),
            ]
        )
        golden.assert_equal(y, want, f"{self.what} AllToAllVV2 {dtype} send {send} recv {recv}")


def case_random_schedule(ctx, seed, steps=24):
    """`steps` random operations (module docstring); every rank must run the same seed."""
    ops = {}

    def reused(name):
        if name not in ops:
            ops[name] = golden.make_op(name, ctx.param())
        return ops[name]

    for step in range(steps):
        s = _Step(ctx, seed, step, reused)
        getattr(s, s.draw.choice(OPS))()
    return steps
