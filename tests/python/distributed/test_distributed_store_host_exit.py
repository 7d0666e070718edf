"""A program may end right after any collops.distributed object collective: rank 0, whose process
hosts the TCPStore, returns and exits while its peer is still slow, and the peer still succeeds
(its last Store call of the round happened before rank 0 returned)."""

import os
import time

import pytest
import torch.distributed as dist

import rank_harness

WORLD = 2
ROUNDS = 2
PEER_DELAY = 0.2  # seconds before each Store call of rank 1: a rank the scheduler holds back


class _SlowStore:
    """The default Store, each call made `PEER_DELAY` late, as by a rank that lost its CPU
    between two Store calls; rank 0 meanwhile runs on, returns and ends its program."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        call = getattr(self._store, name)

        def late(*args, **kwargs):
            time.sleep(PEER_DELAY)
            return call(*args, **kwargs)

        return late


def _store(ctx, port_file):
    """Rank 0 hosts a TCPStore on a free port of 127.0.0.1 and tells the port through a file;
    rank 1 connects to it (torch's env:// does the same with a fixed port)."""
    if ctx.rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, WORLD, is_master=True, wait_for_workers=False)
        with open(port_file + ".tmp", "w") as f:
            f.write(str(store.port))
        os.replace(port_file + ".tmp", port_file)
        return store
    deadline = time.monotonic() + 60
    while not os.path.exists(port_file):
        assert time.monotonic() < deadline, "rank 0 published no store port within 60 s"
        time.sleep(0.01)
    with open(port_file) as f:
        return dist.TCPStore("127.0.0.1", int(f.read()), WORLD, is_master=False)


def _call(what, rank):
    import collops.distributed as cdist

    if what == "barrier":
        cdist.barrier()
    elif what.startswith("broadcast"):
        src = int(what[-1])
        objs = [("from", src)] if rank == src else [None]
        cdist.broadcast(objs, src=src)
        assert objs == [("from", src)], objs
    else:
        dst = int(what[-1])
        got = [] if rank == dst else None
        cdist.gather(("rank", rank), got, dst=dst)
        if rank == dst:
            assert got == [("rank", 0), ("rank", 1)], got


def _one_program(ctx, what, port_file):
    """A whole program: join, one object collective, destroy the group, end (rank 0 at once)."""
    import collops  # noqa: F401  (registers the "collops" backend)

    store = _store(ctx, port_file)
    dist.init_process_group("collops", store=store, rank=ctx.rank, world_size=WORLD)
    if ctx.rank == 1:
        slow = _SlowStore(dist.distributed_c10d._get_default_store())
        dist.distributed_c10d._get_default_store = lambda: slow
    _call(what, ctx.rank)
    dist.destroy_process_group()
    return True


@pytest.mark.parametrize(
    "what", ["barrier", "broadcast from 0", "broadcast from 1", "gather to 0", "gather to 1"]
)
def test_rank_0_ends_its_program_right_after_an_object_collective(what, tmp_path):
    for round_ in range(ROUNDS):
        port_file = str(tmp_path / f"port-{round_}")
        assert all(
            rank_harness.run_process_ranks(WORLD, _one_program, what, port_file, timeout=120)
        )
