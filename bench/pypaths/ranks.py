"""The rank processes: each sets up torch.distributed (the collops group, a no-op and a gloo group,
DeepSpeed when asked) and answers the parent's commands over a pipe.
"""

import os
import tempfile
import time

from pypaths.deepspeed_peer import DeepSpeedShm
from pypaths.rank_calls import Row, SpinBarrier


TIMEOUT_S = 600  # one rank's answer to one command, the largest rows included


class RankEnv:
    def __init__(self, rank, world, store, use_ds):
        import torch.distributed as dist
        import collops  # noqa: F401  (OperationTorch, torch.ops.collops, the "collops" backend)
        import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake")

        self.rank, self.world = rank, world
        dist.init_process_group(
            "cpu:collops", init_method=f"file://{store}", rank=rank, world_size=world
        )
        self.noop = dist.new_group(backend="fake")
        self.gloo = dist.new_group(backend="gloo")
        self.ds = DeepSpeedShm() if use_ds else None


def _rank_main(rank, world, store, words, use_ds, conn):
    """A rank: answers the parent's commands on `conn` until "quit"."""
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_SIZE=str(world)
    )
    try:
        env = RankEnv(rank, world, store, use_ds)
        spin = SpinBarrier(words, world, rank)
        conn.send(("ready", env.ds.version if env.ds else None))
    except Exception as e:  # noqa: BLE001 -- the parent reports it
        conn.send(("error", f"rank {rank}: {type(e).__name__}: {e}"))
        return
    row = None
    while True:
        cmd = conn.recv()
        try:
            kind = cmd[0]
            if kind == "quit":
                break
            if kind == "row":
                row = None
                row = Row(env, *cmd[1:])
                reply = sorted(row.calls), row.notes
            elif kind == "probe":  # (path, calls): mean seconds per call
                fn = row.calls[cmd[1]]
                spin.wait()
                t0 = time.perf_counter()
                for _ in range(cmd[2]):
                    fn()
                reply = (time.perf_counter() - t0) / cmd[2]
            elif kind == "time":  # (path, mode, warmup, iters)
                _, path, mode, warmup, iters = cmd
                fn = row.calls[path]
                for _ in range(warmup):
                    fn()
                if mode == "loop":
                    spin.wait()
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        fn()
                    reply = (time.perf_counter() - t0) / iters
                else:
                    times = []
                    clock = time.perf_counter
                    for _ in range(iters):
                        spin.wait()
                        t0 = clock()
                        fn()
                        times.append(clock() - t0)
                    reply = times
            elif kind == "check":
                spin.wait()
                reply = row.checks[cmd[1]]()
            else:
                raise ValueError(f"unknown command {kind}")
            conn.send(("ok", reply))
        except Exception as e:  # noqa: BLE001 -- the parent reports it
            conn.send(("error", f"rank {rank}: {type(e).__name__}: {e}"))
    import torch.distributed as dist

    dist.destroy_process_group()


class Ranks:
    """R spawned rank processes and the parent's side of their pipes."""

    def __init__(self, world, use_ds):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.world = world
        self.store = os.path.join(
            tempfile.gettempdir(), f"collops-python-paths-{os.getpid()}-{world}"
        )
        self.words = ctx.RawArray("Q", world * SpinBarrier.STRIDE)
        self.conns, self.procs = [], []
        for r in range(world):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(
                target=_rank_main, args=(r, world, self.store, self.words, use_ds, theirs)
            )
            p.start()
            self.conns.append(mine)
            self.procs.append(p)
        self.ds_version = self.gather(None)[0]

    def gather(self, cmd):
        if cmd is not None:
            for c in self.conns:
                c.send(cmd)
        replies, errors = [], []
        for r, c in enumerate(self.conns):
            if not c.poll(TIMEOUT_S):
                errors.append(
                    f"rank {r}: no answer within {TIMEOUT_S} s (exit code {self.procs[r].exitcode})"
                )
                continue
            status, value = c.recv()
            (errors if status == "error" else replies).append(value)
        if errors:
            raise RuntimeError("; ".join(errors))
        return replies

    def close(self):
        for c, p in zip(self.conns, self.procs):
            if p.is_alive():
                try:
                    c.send(("quit",))
                except OSError:
                    pass
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        if os.path.exists(self.store):
            os.remove(self.store)
