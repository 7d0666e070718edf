"""hfai.distributed's API backed by collops: uneven collectives, pairwise_apply, object collectives.

Tensor functions work on any process group (collops runs uneven lists natively; other backends
go through ``torch.ops.collops``' padded fallbacks). The object functions -- ``barrier``,
``broadcast``, ``gather`` -- move pickled Python objects through the default group's Store, so
they need no tensor communication at all; every rank of the group must call them in the same
order. The Store lives in one rank's process (global rank 0 hosts torch's TCPStore), and a
program may end as soon as a call returns, so in every round the closer -- global rank 0 when it
is a member, else the group's lowest rank -- returns last: it waits until every other member has
made its last Store call of the round, then deletes the round's keys.
"""

import itertools
import pickle

import torch
import torch.distributed as dist

from . import functional as F
from ._c10d_backend import empty_shared

__all__ = [
    "all_gather",
    "reduce_scatter",
    "all_gather_into_tensor_uneven",
    "reduce_scatter_tensor_uneven",
    "pairwise_apply",
    "barrier",
    "broadcast",
    "gather",
    "empty_shared",
]


def _equal(sizes):
    return all(s == sizes[0] for s in sizes)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """``dist.all_gather``, but the tensors may differ in size per rank (tensor_list[i] receives
    rank i's tensor). ``async_op=True`` is only supported when every size is equal."""
    sizes = [t.numel() for t in tensor_list]
    if _equal([t.shape for t in tensor_list]) and tensor.shape == tensor_list[0].shape:
        return dist.all_gather(tensor_list, tensor, group=group, async_op=async_op)
    if async_op:
        raise ValueError("collops.distributed.all_gather: async_op=True needs equal sizes")
    out = F.all_gather_v(tensor.reshape(-1), sizes, group)
    for dst, src in zip(tensor_list, out.split(sizes)):
        dst.copy_(src.view(dst.shape))
    return None


def reduce_scatter(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """``dist.reduce_scatter``, but input_list[i] (rank i's share) may differ in size per i."""
    if _equal([t.shape for t in input_list]):
        return dist.reduce_scatter(output, input_list, op=op, group=group, async_op=async_op)
    if async_op:
        raise ValueError("collops.distributed.reduce_scatter: async_op=True needs equal sizes")
    sizes = [t.numel() for t in input_list]
    flat = torch.cat([t.reshape(-1) for t in input_list])
    output.copy_(F.reduce_scatter_v(flat, sizes, op, group).view(output.shape))
    return None


def _row_sizes(split_sizes, total_rows, world, what):
    if split_sizes is None:
        if total_rows % world:
            raise ValueError(
                f"collops.distributed.{what}: {total_rows} rows do not split evenly "
                f"over {world} ranks; pass split sizes"
            )
        return [total_rows // world] * world
    return [int(s) for s in split_sizes]


def _copy_result(output, result, what):
    """output[...] = result, refusing another shape: copy_ would broadcast a smaller result over
    a larger output (and this rank's mistake must not corrupt it silently). Checked after the
    collective, so the peers are not left waiting in it."""
    if output.shape != result.shape:
        raise ValueError(
            f"collops.distributed.{what}: output has shape {tuple(output.shape)}, "
            f"but the result has shape {tuple(result.shape)}"
        )
    output.copy_(result)


def _done_work(output):
    """What ``async_op=True`` returns: a Work that is already complete (collops runs the
    collective before returning), whose ``wait()`` is True and whose future holds [output]."""
    future = torch.futures.Future()
    future.set_result([output])
    return torch._C._distributed_c10d._create_work_from_future(future)


def all_gather_into_tensor_uneven(
    output, input, output_split_sizes=None, group=None, async_op=False
):
    """torch_npu's signature: rank i's `input` (output_split_sizes[i] rows) lands in `output`'s
    rows in rank order. None = equal splits of output. Returns None, or a completed Work when
    `async_op` (the collective has run by then, as every collops collective has)."""
    sizes = _row_sizes(
        output_split_sizes,
        output.shape[0],
        dist.get_world_size(group),
        "all_gather_into_tensor_uneven",
    )
    _copy_result(output, F.all_gather_v(input, sizes, group), "all_gather_into_tensor_uneven")
    return _done_work(output) if async_op else None


def reduce_scatter_tensor_uneven(
    output, input, input_split_sizes=None, op=dist.ReduceOp.SUM, group=None, async_op=False
):
    """torch_npu's signature: `input`'s rows split as input_split_sizes; rank r's `output` gets
    the reduction over ranks of split r. None = equal splits of input. Returns None, or a
    completed Work when `async_op`."""
    sizes = _row_sizes(
        input_split_sizes,
        input.shape[0],
        dist.get_world_size(group),
        "reduce_scatter_tensor_uneven",
    )
    _copy_result(
        output, F.reduce_scatter_v(input, sizes, op, group), "reduce_scatter_tensor_uneven"
    )
    return _done_work(output) if async_op else None


def pairwise_apply(f, x, args=(), group=None, equal_size=False):
    """``[f(x, x_j, *args) for j in ranks]`` where x_j is rank j's `x`. Shapes may differ per
    rank (same number of dims) unless `equal_size`, which skips the shape exchange."""
    world = dist.get_world_size(group)
    if equal_size:
        shapes = [tuple(x.shape)] * world
    else:
        mine = torch.tensor(list(x.shape), dtype=torch.int64)
        shapes = [tuple(s.tolist()) for s in F.all_gather(mine.view(1, -1), group)]
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    flat = F.all_gather_v(x.reshape(-1), sizes, group)
    xs = [chunk.view(shape) for chunk, shape in zip(flat.split(sizes), shapes)]
    return [f(x, xs[j], *args) for j in range(world)]


_generations = {}  # group name -> itertools.count(): every member calls in the same order


class _ObjectRound:
    """One object collective of `group` through the default Store: its members (global ranks),
    this rank's place among them, the closer (see the module docstring) and a key prefix no
    other round uses."""

    def __init__(self, kind, group):
        self.rank = dist.get_rank()
        group = group if group is not None else dist.group.WORLD
        if group is dist.GroupMember.NON_GROUP_MEMBER:  # what new_group gives the other ranks
            self.members = []
            return
        self.members = dist.get_process_group_ranks(group)
        self.closer = min(self.members)
        name = group.group_name
        generation = next(_generations.setdefault(name, itertools.count()))
        self.key = f"collops/objects/{name}/{kind}/{generation}"
        self.store = dist.distributed_c10d._get_default_store()

    def member(self):
        return self.rank in self.members

    def check_rank(self, rank, what):
        if rank not in self.members:
            raise ValueError(
                f"collops.distributed.{what}: rank {rank} is not in the group "
                f"(its ranks are {self.members})"
            )

    def last_of(self, counter, expected):
        """True on the rank whose arrival brings `counter` to `expected`."""
        return self.store.add(f"{self.key}/{counter}", 1) == expected

    def finish(self, *suffixes):
        """Ends this rank's part in the round. Every member but the closer makes its last Store
        call here (the last of them also says so); the closer waits for that, then deletes the
        round's keys (`suffixes`, and the two of this hand-over)."""
        others = len(self.members) - 1
        if self.rank != self.closer:
            if self.last_of("left", others):
                self.store.set(f"{self.key}/closed", b"1")
            return
        if others:
            self.store.wait([f"{self.key}/closed"])
            suffixes += ("/left", "/closed")
        for suffix in suffixes:
            self.store.delete_key(f"{self.key}{suffix}")


def _result(async_op):
    return _done_work(None) if async_op else None


def barrier(group=None, async_op=False):
    """Returns once every rank of `group` (default: all) has entered, through the Store. With
    ``async_op=True`` it still waits, then returns a completed Work."""
    r = _ObjectRound("barrier", group)
    if not r.member():
        return None
    if r.last_of("entered", len(r.members)):
        r.store.set(f"{r.key}/open", b"1")
    r.store.wait([f"{r.key}/open"])
    r.finish("/entered", "/open")
    return _result(async_op)


def broadcast(objs, src=0, group=None, async_op=False):
    """objs[0] of rank `src` (a global rank; any picklable object) replaces objs[0] on every other
    rank of `group`."""
    r = _ObjectRound("broadcast", group)
    if not r.member():
        return None
    r.check_rank(src, "broadcast")
    if len(r.members) == 1:
        return _result(async_op)
    if r.rank == src:
        r.store.set(f"{r.key}/object", pickle.dumps(objs[0]))
    else:
        objs[0] = pickle.loads(r.store.get(f"{r.key}/object"))
    r.finish("/object")
    return _result(async_op)


def gather(obj, gather_list=None, dst=0, group=None, async_op=False):
    """Rank `dst` (a global rank) gets every member's `obj` in gather_list, in group rank order;
    the others pass None."""
    r = _ObjectRound("gather", group)
    if not r.member():
        return None
    r.check_rank(dst, "gather")
    r.store.set(f"{r.key}/{r.rank}", pickle.dumps(obj))
    objects = None
    if r.rank == dst:
        objects = [pickle.loads(r.store.get(f"{r.key}/{m}")) for m in r.members]
    # Before the check below: the round ends on every rank, and its keys do not outlive it.
    r.finish(*[f"/{m}" for m in r.members])
    if objects is not None:
        if gather_list is None:
            raise ValueError("collops.distributed.gather: rank dst needs a gather_list")
        gather_list[:] = objects
    return _result(async_op)
