"""A random schedule of torch.distributed calls on a "collops" group, checked on every rank.

Every rank draws the same seeded sequence of calls -- all_reduce, all_gather (uneven lists),
all_gather_single (concatenated or stacked, in place or not), reduce_scatter (uneven lists),
reduce_scatter_single (in place or not), all_to_all_single (random split matrix, zeros
included), all_to_all, broadcast, reduce, gather, scatter, batch_isend_irecv over a random
permutation, the object collectives, barrier -- on the world group or a sub-group, with a dtype, sizes from five classes
(0 up to past the lccl slot) and, per tensor, a layout: contiguous, transposed, every other element
of a larger buffer, or a window inside guard elements, or memory from the group's lccl heap
(collops.distributed.empty_shared). Some calls are async and waited on a few calls later.

Each rank knows every rank's data (it is a function of seed, step and rank), so the golden is
computed on every rank in torch, independently of collops, in a wide type and cast once; values
are small integers or halves, so every result is exact in every dtype and checked bit for bit.
Guards and gaps around each tensor must come back untouched.

The C++ twin is tests/cpp/random_schedule.cpp (communicator level); this one covers what only
the binding does: strided and aliased tensors, lists, complex and bool, async Work, sub-groups.
"""

import math
import os
import random

import torch
import torch.distributed as dist

REDUCIBLE = (
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)
MOVABLE = REDUCIBLE + (torch.bool, torch.complex64, torch.complex128)
OPS = (
    dist.ReduceOp.SUM,
    dist.ReduceOp.PRODUCT,
    dist.ReduceOp.MIN,
    dist.ReduceOp.MAX,
    dist.ReduceOp.AVG,
)
LAYOUTS = ("contiguous", "transposed", "strided", "window", "shared")
KINDS = (
    "all_reduce",
    "all_gather",
    "all_gather_single",
    "reduce_scatter",
    "reduce_scatter_single",
    "all_to_all_single",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "p2p",
    "objects",
    "barrier",
)
_GUARD = 5


def _wide(dtype):
    if dtype.is_complex:
        return torch.complex128
    return torch.float64 if dtype.is_floating_point else torch.int64


def _sentinel(dtype):
    return True if dtype == torch.bool else 77


class _Placed:
    """A tensor of `shape` laid out as `layout`, with the memory around it to check afterwards."""

    def __init__(self, shape, dtype, layout, group):
        n = math.prod(shape)
        self.base = None
        if layout == "shared" and group is not None:
            import collops.distributed as cdist

            self.tensor = cdist.empty_shared(tuple(shape), dtype, group=group)
            self.tensor.fill_(_sentinel(dtype))
        elif layout == "transposed" and len(shape) == 2:
            self.tensor = torch.full((shape[1], shape[0]), _sentinel(dtype), dtype=dtype).t()
        elif layout == "strided":
            self.base = torch.full((2 * n + 1,), _sentinel(dtype), dtype=dtype)
            self.tensor = self.base[1::2][:n].view(shape) if n else self.base[:0].view(shape)
        elif layout == "window":
            self.base = torch.full((n + 2 * _GUARD,), _sentinel(dtype), dtype=dtype)
            self.tensor = self.base[_GUARD : _GUARD + n].view(shape)
        else:
            self.tensor = torch.full(tuple(shape), _sentinel(dtype), dtype=dtype)
        self.before = None if self.base is None else self.base.clone()

    def untouched_outside(self):
        """True when nothing outside the tensor's own elements changed."""
        if self.base is None:
            return True
        inside = torch.zeros_like(self.base, dtype=torch.bool)
        inside.as_strided(
            self.tensor.shape,
            self.tensor.stride(),
            self.tensor.storage_offset() - self.base.storage_offset(),
        ).fill_(True)
        return torch.equal(self.base[~inside], self.before[~inside])


class Schedule:
    """One rank's view of the schedule: `run()` issues every call and checks every result."""

    def __init__(self, seed, steps, max_elems=300_000):
        self.seed, self.steps, self.max_elems = seed, steps, max_elems
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.shared = random.Random(seed)  # the same draws on every rank
        self.pending = []  # (work, check) of async calls not yet waited on
        members = sorted(self.shared.sample(range(self.world), self.shared.randint(1, self.world)))
        sub = dist.new_group(members, backend="collops")  # every rank creates it
        self.groups = [(dist.group.WORLD, list(range(self.world))), (sub, members)]

    # ---- shared draws
    def _count(self):
        kind = self.shared.randrange(10)
        if kind == 0:
            return 0
        if kind < 5:
            return self.shared.randint(1, 40)
        if kind < 8:
            return self.shared.randint(200, 5200)
        if kind < 9:
            return self.shared.randint(15_000, 40_000)
        return self.shared.randint(self.max_elems // 3, self.max_elems)

    def _shape(self, n):
        """A 0-d (n = 1: a loss, a flag), 1-d or 2-d shape of n elements."""
        if n == 1 and self.shared.random() < 0.5:
            return ()
        if n > 1 and self.shared.random() < 0.4:
            for cols in (3, 2, 5, 7):
                if n % cols == 0:
                    return (n // cols, cols)
        return (n,)

    def _layout(self):
        return self.shared.choice(LAYOUTS)

    # ---- per-rank data, known to every rank
    def values(self, step, rank, shape, dtype, tag=0, for_prod=False):
        """Small integers (and halves for floats): exact in every dtype, summed or multiplied."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step * 1009 + rank * 31 + tag)
        n = math.prod(shape)
        if dtype == torch.bool:
            return torch.randint(0, 2, (n,), generator=g).bool().view(shape)
        if for_prod:
            v = torch.randint(1, 3, (n,), generator=g)
            if dtype != torch.uint8:
                v = v * (torch.randint(0, 2, (n,), generator=g) * 2 - 1)
            return v.to(dtype).view(shape)
        low = 0 if dtype == torch.uint8 else -8
        v = torch.randint(low, 9, (n,), generator=g).to(_wide(dtype))
        if dtype.is_floating_point or dtype.is_complex:
            v = v + torch.randint(0, 2, (n,), generator=g) * 0.5
        if dtype.is_complex:
            v = torch.complex(v.real, torch.randint(-8, 9, (n,), generator=g).double())
        return v.to(dtype).view(shape)

    def fold(self, tensors, op, dtype):
        """The reduction over ranks, as gloo and NCCL define it, computed wide and cast once."""
        if dtype == torch.bool:
            stack = torch.stack(tensors)
            any_op = op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX)
            return stack.any(0) if any_op else stack.all(0)
        stack = torch.stack([t.to(_wide(dtype)) for t in tensors])
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            out = stack.sum(0).to(dtype)
            return out.div_(len(tensors)) if op == dist.ReduceOp.AVG else out
        if op == dist.ReduceOp.PRODUCT:
            return stack.prod(0).to(dtype)
        return (stack.max(0) if op == dist.ReduceOp.MAX else stack.min(0)).values.to(dtype)

    # ---- checks
    def expect(self, what, got, want, placed=None):
        if got.dtype != want.dtype or got.shape != want.shape:
            raise AssertionError(
                f"{what}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}"
            )
        if not torch.equal(got, want):
            diff = (got != want).reshape(-1).nonzero()
            i = int(diff[0]) if len(diff) else -1
            raise AssertionError(
                f"{what}: {len(diff)} elements differ, first [{i}] got "
                f"{got.reshape(-1)[i].item()} want {want.reshape(-1)[i].item()}"
            )
        for p in placed or ():
            if not p.untouched_outside():
                raise AssertionError(f"{what}: wrote outside its tensor (guards or gaps changed)")

    def done(self, what, work, check):
        """Checks now, or (async) when the Work is waited on a few calls later."""
        if work is None:
            check()
        else:
            self.pending.append((what, work, check))
        if self.pending and (work is None or self.shared.random() < 0.5):
            self.drain()

    def drain(self):
        for _, work, check in self.pending:
            assert work.wait()
            check()
        self.pending = []

    # ---- the calls
    def run(self):
        for step in range(self.steps):
            self.step = step
            # Drawn afresh per step: ranks outside the step's group draw nothing else this step.
            self.shared = random.Random(self.seed * 7919 + step)
            kind = self.shared.choice(KINDS)
            group, members = self.groups[self.shared.randrange(2)]
            self.members = members
            call = getattr(self, "_" + kind)
            what = f"step {step} {kind} on ranks {members}"
            if os.environ.get("COLLOPS_TEST_SCHEDULE_TRACE"):  # names the call that hangs
                print(f"rank {self.rank}: {what}", flush=True)
            if self.rank in members:
                call(what, group)
        self.drain()
        return self.steps

    def _me(self):
        return self.members.index(self.rank)

    def _async(self):
        return self.shared.random() < 0.25

    def _reduction(self):
        """A dtype and an op torch.distributed accepts for it (AVG: floating point; complex:
        SUM only)."""
        dtype = self.shared.choice(REDUCIBLE + (torch.bool, torch.complex64))
        if dtype.is_complex:
            return dtype, dist.ReduceOp.SUM
        return dtype, self.shared.choice(OPS if dtype.is_floating_point else OPS[:4])

    def _data(self, r, shape, dtype, op=None, tag=0):
        return self.values(
            self.step, self.members[r], shape, dtype, tag, for_prod=op == dist.ReduceOp.PRODUCT
        )

    def _all_reduce(self, what, group):
        dtype, op = self._reduction()
        shape, layout = self._shape(self._count()), self._layout()
        p = _Placed(shape, dtype, layout, group)
        p.tensor.copy_(self._data(self._me(), shape, dtype, op))
        want = self.fold(
            [self._data(r, shape, dtype, op) for r in range(len(self.members))], op, dtype
        )
        work = dist.all_reduce(p.tensor, op=op, group=group, async_op=self._async())
        self.done(
            what,
            work,
            lambda: self.expect(f"{what} {dtype} {op} {layout} {shape}", p.tensor, want, [p]),
        )

    def _all_gather(self, what, group):
        dtype = self.shared.choice(MOVABLE)
        shapes = [self._shape(self._count()) for _ in self.members]
        outs = [_Placed(s, dtype, self._layout(), group) for s in shapes]
        me = self._me()
        dist.all_gather([o.tensor for o in outs], self._data(me, shapes[me], dtype), group=group)
        for r, o in enumerate(outs):
            self.expect(f"{what} {dtype} from {r}", o.tensor, self._data(r, shapes[r], dtype), [o])

    def _all_gather_single(self, what, group):
        dtype = self.shared.choice(MOVABLE)
        n, world, me = self._count(), len(self.members), self._me()
        stacked, in_place = self.shared.random() < 0.5, self.shared.random() < 0.4
        out = torch.full((world, n) if stacked else (world * n,), _sentinel(dtype), dtype=dtype)
        mine = self._data(me, (n,), dtype)
        if in_place:
            inp = out[me] if stacked else out[me * n : (me + 1) * n]
            inp.copy_(mine)
        else:
            inp = mine
        work = dist.all_gather_single(out, inp, group=group, async_op=self._async())
        want = torch.stack([self._data(r, (n,), dtype) for r in range(world)])
        want = want if stacked else want.view(-1)
        self.done(
            what,
            work,
            lambda: self.expect(
                f"{what} {dtype} n={n} stacked={stacked} in_place={in_place}", out, want
            ),
        )

    def _reduce_scatter(self, what, group):
        dtype, op = self._reduction()
        world, me = len(self.members), self._me()
        shapes = [self._shape(self._count()) for _ in range(world)]
        out = _Placed(shapes[me], dtype, self._layout(), group)
        ins = [self._data(me, shapes[j], dtype, op, tag=j) for j in range(world)]
        dist.reduce_scatter(out.tensor, ins, op=op, group=group)
        want = self.fold(
            [self._data(r, shapes[me], dtype, op, tag=me) for r in range(world)], op, dtype
        )
        self.expect(f"{what} {dtype} {op} {shapes}", out.tensor, want, [out])

    def _reduce_scatter_single(self, what, group):
        dtype, op = self._reduction()
        n, world, me = self._count(), len(self.members), self._me()
        in_place = self.shared.random() < 0.4
        inp = self._data(me, (world * n,), dtype, op)
        out = (
            inp[me * n : (me + 1) * n]
            if in_place
            else torch.full((n,), _sentinel(dtype), dtype=dtype)
        )
        work = dist.reduce_scatter_single(out, inp, op=op, group=group, async_op=self._async())
        want = self.fold([self._data(r, (world * n,), dtype, op) for r in range(world)], op, dtype)[
            me * n : (me + 1) * n
        ]
        self.done(
            what,
            work,
            lambda: self.expect(f"{what} {dtype} {op} n={n} in_place={in_place}", out, want),
        )

    def _split_matrix(self, world):
        """rows[i][j]: rows member i sends to member j (the same matrix on every rank)."""
        return [
            [self._count() // 3 if self.shared.random() < 0.8 else 0 for _ in range(world)]
            for _ in range(world)
        ]

    def _all_to_all_single(self, what, group):
        dtype = self.shared.choice(MOVABLE)
        world, me = len(self.members), self._me()
        width = self.shared.choice((1, 2, 3))
        even = self.shared.random() < 0.25
        rows = self._split_matrix(world)
        if even:
            rows = [[rows[0][0]] * world for _ in range(world)]
        sent = [self._data(r, (sum(rows[r]), width), dtype) for r in range(world)]
        out = _Placed((sum(rows[j][me] for j in range(world)), width), dtype, self._layout(), group)
        work = dist.all_to_all_single(
            out.tensor,
            sent[me],
            None if even else [rows[j][me] for j in range(world)],
            None if even else rows[me],
            group=group,
            async_op=self._async(),
        )
        want = torch.cat(
            [sent[j][sum(rows[j][:me]) : sum(rows[j][: me + 1])] for j in range(world)]
        )
        self.done(
            what,
            work,
            lambda: self.expect(f"{what} {dtype} rows {rows} even={even}", out.tensor, want, [out]),
        )

    def _all_to_all(self, what, group):
        dtype = self.shared.choice(MOVABLE)
        world, me = len(self.members), self._me()
        counts = self._split_matrix(world)
        outs = [_Placed((counts[j][me],), dtype, self._layout(), group) for j in range(world)]
        ins = [self._data(me, (counts[me][j],), dtype, tag=j) for j in range(world)]
        dist.all_to_all([o.tensor for o in outs], ins, group=group)
        for j, o in enumerate(outs):
            self.expect(
                f"{what} {dtype} from {j} counts {counts}",
                o.tensor,
                self._data(j, (counts[j][me],), dtype, tag=me),
                [o],
            )

    @staticmethod
    def _global(group, r):
        """The global rank of group rank r (what dist's src/dst/peer arguments take)."""
        return r if group is dist.group.WORLD else dist.get_global_rank(group, r)

    def _root(self, group):
        r = self.shared.randrange(len(self.members))
        return r, self._global(group, r)

    def _broadcast(self, what, group):
        dtype = self.shared.choice(MOVABLE)
        shape, root = self._shape(self._count()), self._root(group)
        p = _Placed(shape, dtype, self._layout(), group)
        p.tensor.copy_(self._data(self._me(), shape, dtype))
        work = dist.broadcast(p.tensor, src=root[1], group=group, async_op=self._async())
        want = self._data(root[0], shape, dtype)
        self.done(
            what,
            work,
            lambda: self.expect(f"{what} {dtype} {shape} root {root[0]}", p.tensor, want, [p]),
        )

    def _reduce(self, what, group):
        dtype, op = self._reduction()
        shape, root = self._shape(self._count()), self._root(group)
        p = _Placed(shape, dtype, self._layout(), group)
        mine = self._data(self._me(), shape, dtype, op)
        p.tensor.copy_(mine)
        dist.reduce(p.tensor, dst=root[1], op=op, group=group)
        want = mine
        if self._me() == root[0]:
            want = self.fold(
                [self._data(r, shape, dtype, op) for r in range(len(self.members))], op, dtype
            )
        self.expect(f"{what} {dtype} {op} root {root[0]}", p.tensor, want, [p])

    def _gather(self, what, group):
        dtype = self.shared.choice(MOVABLE)
        shape, root = self._shape(self._count()), self._root(group)
        world, me = len(self.members), self._me()
        outs = [_Placed(shape, dtype, self._layout(), group) for _ in range(world)]
        dist.gather(
            self._data(me, shape, dtype),
            [o.tensor for o in outs] if me == root[0] else None,
            dst=root[1],
            group=group,
        )
        if me == root[0]:
            for r, o in enumerate(outs):
                self.expect(f"{what} {dtype} from {r}", o.tensor, self._data(r, shape, dtype), [o])

    def _scatter(self, what, group):
        dtype = self.shared.choice(MOVABLE)
        shape, root = self._shape(self._count()), self._root(group)
        world, me = len(self.members), self._me()
        out = _Placed(shape, dtype, self._layout(), group)
        pieces = [self._data(root[0], shape, dtype, tag=j) for j in range(world)]
        dist.scatter(out.tensor, pieces if me == root[0] else None, src=root[1], group=group)
        self.expect(f"{what} {dtype} root {root[0]}", out.tensor, pieces[me], [out])

    def _p2p(self, what, group):
        world, me = len(self.members), self._me()
        if world < 2:
            return
        perm = list(range(world))
        while any(perm[i] == i for i in range(world)):
            self.shared.shuffle(perm)
        sizes = [self._count() for _ in range(world)]  # sizes[i]: what member i sends
        dtype = self.shared.choice(MOVABLE)
        source = perm.index(me)
        got = _Placed((sizes[source],), dtype, self._layout(), group)
        ops = [
            dist.P2POp(
                dist.isend,
                self._data(me, (sizes[me],), dtype),
                self._global(group, perm[me]),
                group,
            ),
            dist.P2POp(dist.irecv, got.tensor, self._global(group, source), group),
        ]
        if self.shared.random() < 0.5:
            ops.reverse()
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        self.expect(
            f"{what} {dtype} from {source} perm {perm}",
            got.tensor,
            self._data(source, (sizes[source],), dtype),
            [got],
        )

    def _object(self, r, tag):
        """A picklable object of member r, its size drawn per member (pickles differ in length)."""
        return {
            "member": r,
            "step": self.step,
            "tag": tag,
            "payload": [self.members[r]] * self.lengths[r],
        }

    def _objects(self, what, group):
        world, me = len(self.members), self._me()
        self.lengths = [self.shared.choice((0, 1, 30, 5000)) for _ in range(world)]
        got = [None] * world
        dist.all_gather_object(got, self._object(me, "all"), group=group)
        assert got == [self._object(r, "all") for r in range(world)], f"{what} all_gather_object"
        root = self._root(group)
        objs = [self._object(me, "bcast"), 7]
        dist.broadcast_object_list(objs, src=root[1], group=group)
        assert objs == [self._object(root[0], "bcast"), 7], f"{what} broadcast_object_list"
        into = [None] * world if me == root[0] else None
        dist.gather_object(self._object(me, "gather"), into, dst=root[1], group=group)
        if me == root[0]:
            assert into == [self._object(r, "gather") for r in range(world)], f"{what} gather"
        out = [None]
        dist.scatter_object_list(
            out,
            [self._object(j, "scatter") for j in range(world)] if me == root[0] else None,
            src=root[1],
            group=group,
        )
        assert out == [self._object(me, "scatter")], f"{what} scatter_object_list"

    def _barrier(self, what, group):
        dist.barrier(group=group)


def run_schedule(ctx, seed, steps, max_elems=300_000):
    """Rank function for c10d_ranks.run_group_job: the schedule of `seed`, `steps` calls long."""
    return Schedule(seed, steps, max_elems).run()
