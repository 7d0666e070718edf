#!/usr/bin/env python3
"""The Python entry points of collops against the C++ engine, torch's own floor, DeepSpeed's
shared-memory all_reduce and gloo, per call, interleaved in one run.

Columns (every one measured in the same run, row by row, one after the other):
  engine          the C++ engine: collops-bench (process mode, Setup once, Execute in a loop, the
                  cross-rank check inside every call), run between the Python paths of the row
  execute         OperationTorch.execute([x]) (new outputs every call, over reused memory when the
                  previous ones were dropped)
  execute_out     OperationTorch.execute_out([x], [y]) into outputs from empty_shared (once)
  ops             torch.ops.collops.<op>, eager: all_reduce(x) (the schema's defaults: "sum" on
                  the default group, the collops one here), all_gather(x, group_name)
  ops_            torch.ops.collops.inference_all_reduce_(y): in place, nothing allocated
                  (all_reduce only), DeepSpeed's op shape (ds_kernel's, the tensor alone) on
                  all_reduce_'s kernel, which takes no defaults torch fills in per call
  dist            torch.distributed on the "cpu:collops" group (dist.all_reduce(y),
                  dist.all_gather_single(y, x))
  noop            the same torch.distributed call on a group of torch's registered no-op backend
                  ("fake": its collectives return a completed Work and move nothing): what torch
                  itself costs per call, the floor under `dist`
  gloo            the same call on a gloo group of the same ranks
  deepspeed       deepspeed.comm.inference_all_reduce(y) (DeepSpeed's shared-memory kernel, as its
                  users call it), when DeepSpeed is installed; all_reduce only: DeepSpeed 0.19.8
                  has no shared-memory all_gather (its all_gather is torch.distributed's)
  ds_kernel       torch.ops.deepspeed.inference_all_reduce_(y): that kernel without DeepSpeed's
                  Python wrapper
Ops: allreduce (sum; S = the input) and allgather (S = the gathered output, each rank gives S/R),
float32 and bfloat16. Every call is timed two ways, one after the other:
  sync   a barrier outside every library under test before each call (each rank spins on a word
         of its own in shared memory, as `collops-bench --timing spin` does), the call's latency
         the max over ranks; the median over calls
  loop   calls back to back, the mean per call, the max over ranks
Every path's result is checked once per row against golden values (DeepSpeed's too, which also
says whether its shared-memory kernel ran or DeepSpeed fell back to torch.distributed).
Iterations: about --budget-ms of calls per path and mode (5 at least), after a probe and about
30 ms of warm-up; calls of 10 ms or more get one probe and one warm-up call.

    python3 bench/python_paths.py                                 # R=2, 4 KiB..1 MiB
    python3 bench/python_paths.py --ranks 2,4 --sizes 256,4K,64K,1M,16M,64M --dtypes float32,bfloat16
    python3 bench/python_paths.py --docs docs                     # also the docs section and plots
Needs `import collops` (the torch binding, README.md) and collops-bench (--build).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The package from this source tree (it finds the library through COLLOPS_BUILD_DIR), unless one
# is installed.
sys.path.append(os.path.join(ROOT, "python"))

PATHS = [
    "engine",
    "execute",
    "execute_out",
    "ops",
    "ops_",
    "dist",
    "noop",
    "gloo",
    "deepspeed",
    "ds_kernel",
]
OPS = ["allreduce", "allgather"]
DTYPES = ["float32", "bfloat16"]
MODES = ["sync", "loop"]
DS_PATHS = ("deepspeed", "ds_kernel")
SECTION_BEGIN = "<!-- bench/python_paths.py: begin -->"
SECTION_END = "<!-- bench/python_paths.py: end -->"
TIMEOUT_S = 600  # one rank's answer to one command, the largest rows included


def human(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def parse_size(text):
    m = re.fullmatch(r"([0-9]+)([kKmM]?)", text)
    if not m or int(m[1]) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (256, 4K, 64M)")
    return int(m[1]) << {"": 0, "k": 10, "m": 20}[m[2].lower()]


def comma_list(parse, allowed=None):
    def inner(text):
        items = [parse(x) for x in text.split(",")]
        if allowed is not None:
            bad = [x for x in items if x not in allowed]
            if bad:
                raise argparse.ArgumentTypeError(f"{bad} not among {allowed}")
        return items

    return inner


# ---- the ranks -------------------------------------------------------------------------------


class SpinBarrier:
    """A barrier outside every library under test (bench/spin_barrier.h in Python): each rank
    writes its round into a word of its own (one cache line apart) and waits until every word has
    reached it. With more ranks than CPUs a waiting rank yields its CPU on every look."""

    STRIDE = 8  # 64-byte lines of uint64

    def __init__(self, words, ranks, rank):
        self.words, self.ranks, self.rank, self.round = words, ranks, rank, 0
        self.yield_cpu = ranks > (os.cpu_count() or 1)

    def wait(self, timeout=120.0):
        self.round += 1
        words, stride, target = self.words, self.STRIDE, self.round
        words[self.rank * stride] = target
        deadline = time.monotonic() + timeout
        for r in range(self.ranks):
            looks = 0
            while words[r * stride] < target:
                if self.yield_cpu:
                    os.sched_yield()
                looks += 1
                if looks % 65536 == 0 and time.monotonic() > deadline:
                    raise RuntimeError(f"spin barrier: rank {r} did not arrive in {timeout} s")


def _torch_dtype(name):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


class Row:
    """One rank's tensors and callables for one (op, dtype, size): {path: call} and {path: check},
    check() returning the number of wrong elements after one call on golden inputs."""

    def __init__(self, env, op, dtype, size):
        import torch
        import torch.distributed as dist

        self.calls, self.checks, self.notes = {}, {}, {}
        R, rank = env.world, env.rank
        t = _torch_dtype(dtype)
        esize = torch.empty((), dtype=t).element_size()
        param = json.dumps(
            {
                "rank": rank,
                "rankSize": R,
                "backend": "lccl",
                "commMode": 0,
                "commDomain": "python-paths",
            }
        )
        gname = dist.group.WORLD.group_name
        if op == "allreduce":
            n = max(size // esize, 1)
            x = torch.zeros(n, dtype=t)
            y = torch.zeros(n, dtype=t)
            opt = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
            opt.set_param(json.dumps({**json.loads(param), "allReduceType": "sum"}))
            opt.execute([x])  # creates the communicator, so empty_shared can use its heap
            out = opt.empty_shared([n], t)
            golden = R * (R + 1) / 2
            self.calls = {
                "execute": lambda: opt.execute([x]),
                "execute_out": lambda: opt.execute_out([x], [out]),
                # "sum" on the default group: the schema's defaults, as DeepSpeed users call theirs.
                "ops": lambda: torch.ops.collops.all_reduce(x),
                # DeepSpeed's op shape: ds_kernel's call with collops for deepspeed.
                "ops_": lambda: torch.ops.collops.inference_all_reduce_(y),
                "dist": lambda: dist.all_reduce(y),
                "noop": lambda: dist.all_reduce(y, group=env.noop),
                "gloo": lambda: dist.all_reduce(y, group=env.gloo),
            }

            def wrong(result):
                return int((result.float() != golden).sum())

            def check_out_of_place(fn, result_of):
                x.fill_(rank + 1)
                try:
                    return wrong(result_of(fn()))
                finally:
                    x.zero_()

            def check_in_place(fn):
                y.fill_(rank + 1)
                try:
                    fn()
                    return wrong(y)
                finally:
                    y.zero_()

            self.checks = {
                "execute": lambda: check_out_of_place(self.calls["execute"], lambda r: r[0]),
                "execute_out": lambda: check_out_of_place(
                    lambda: (out.fill_(-1), self.calls["execute_out"]()), lambda r: out
                ),
                "ops": lambda: check_out_of_place(self.calls["ops"], lambda r: r),
                "ops_": lambda: check_in_place(self.calls["ops_"]),
                "dist": lambda: check_in_place(self.calls["dist"]),
                "noop": lambda: 0,  # moves nothing by design
                "gloo": lambda: check_in_place(self.calls["gloo"]),
            }
            if env.ds is not None:
                import deepspeed.comm as dscomm

                self.calls["deepspeed"] = lambda: dscomm.inference_all_reduce(y)
                self.calls["ds_kernel"] = lambda: torch.ops.deepspeed.inference_all_reduce_(y)
                for p in DS_PATHS:
                    self.checks[p] = lambda p=p: env.ds.checked(
                        lambda: check_in_place(self.calls[p]), t
                    )
                    self.notes[p] = env.ds.path_taken(t)
        elif op == "allgather":
            n = max(size // esize // R, 1)  # each rank's block: S is the gathered output
            x = torch.zeros(n, dtype=t)
            y = torch.zeros(n * R, dtype=t)
            opt = torch.classes.OperationTorch.OperationTorch("AllGatherOperation")
            opt.set_param(param)
            opt.execute([x])
            out = opt.empty_shared([R, n], t)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            self.calls = {
                "execute": lambda: opt.execute([x]),
                "execute_out": lambda: opt.execute_out([x], [out]),
                "ops": lambda: torch.ops.collops.all_gather(x, gname),
                "dist": lambda: gather(y, x),
                "noop": lambda: gather(y, x, group=env.noop),
                "gloo": lambda: gather(y, x, group=env.gloo),
            }
            golden = torch.arange(1, R + 1, dtype=torch.float32).repeat_interleave(n)

            def wrong_gather(result):
                return int((result.reshape(-1).float() != golden).sum())

            def check(fn, result_of, poison):
                x.fill_(rank + 1)
                poison.fill_(-1)
                try:
                    return wrong_gather(result_of(fn()))
                finally:
                    x.zero_()

            self.checks = {
                "execute": lambda: check(self.calls["execute"], lambda r: r[0], y),
                "execute_out": lambda: check(self.calls["execute_out"], lambda r: out, out),
                "ops": lambda: check(self.calls["ops"], lambda r: r, y),
                "dist": lambda: check(self.calls["dist"], lambda r: y, y),
                "noop": lambda: 0,
                "gloo": lambda: check(self.calls["gloo"], lambda r: y, y),
            }
            for p in DS_PATHS:
                self.notes[p] = "no shared-memory all_gather in DeepSpeed"
        else:
            raise ValueError(op)


class DeepSpeedShm:
    """DeepSpeed's CPU accelerator and its shared-memory kernel, as deepspeed.init_distributed
    sets them up over the existing default group. path_taken() says which way
    deepspeed.comm.inference_all_reduce goes for a dtype, by DeepSpeed's own rule; checked()
    also counts the calls that reached torch.distributed.all_reduce (a fallback) during one
    call."""

    def __init__(self):
        import deepspeed
        import deepspeed.comm as dscomm
        from deepspeed.utils import logger

        logger.setLevel("WARNING")
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
        self.cdb = dscomm.comm.cdb
        self.version = deepspeed.__version__

    def path_taken(self, dtype):
        import torch

        if getattr(self.cdb, "shm_comm_op", None) is None:
            return "fallback: DeepSpeed built no shared-memory kernel"
        if not (
            hasattr(torch.ops, "deepspeed")
            and hasattr(torch.ops.deepspeed, "inference_all_reduce_")
        ):
            return "fallback: torch.ops.deepspeed.inference_all_reduce_ is missing"
        need = 1 if dtype == torch.float32 else 2
        have = getattr(self.cdb, "shm_vector_kernel_level", 0)
        if have < need:
            return (
                f"fallback: this CPU lacks the ISA of DeepSpeed's {dtype} kernel (level "
                f"{have} < {need}: avx2 for float32, avx512bw for 16-bit)"
            )
        return "shm"

    def checked(self, check, dtype):
        import torch.distributed as dist

        original, calls = dist.all_reduce, []

        def counting(*args, **kwargs):
            calls.append(1)
            return original(*args, **kwargs)

        dist.all_reduce = counting
        try:
            wrong = check()
        finally:
            dist.all_reduce = original
        taken = self.path_taken(dtype)
        if calls and taken == "shm":
            raise RuntimeError(
                "DeepSpeed reached torch.distributed.all_reduce although its "
                "rule says the shared-memory kernel runs"
            )
        return wrong


def ds_segments(world, addr, port):
    """The shared-memory files DeepSpeed's kernel makes for ranks 0..world-1 of a job with
    MASTER_ADDR `addr` and MASTER_PORT `port`: its shm.cpp names each
    deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank> (in /dev/shm) and never unlinks it, so
    every rank's file (over 64 MiB) outlives the job."""
    prefix = f"deepspeed_allreduce_buffer_{os.getuid()}_{addr}_{port}"
    return [os.path.join("/dev/shm", f"{prefix}_{r}") for r in range(world)]


def remove_ds_segments(candidates, existed):
    """Unlinks the files of `candidates` that exist now and were not in `existed` (the ones this
    run created); returns their paths."""
    removed = []
    for path in candidates:
        if path not in existed and os.path.exists(path):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


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


# ---- the engine (collops-bench) ----------------------------------------------------------------


def engine(args, op, dtype, world, size, mode, budget_s):
    """collops-bench's time for one row in `mode`: {"us": ..., "wrong": ...} or {"error": ...}.
    One probe run sets the iterations, as for the Python paths."""
    exe = os.path.join(args.build, "bench", "collops-bench")
    timing = "spin" if mode == "sync" else "loop"

    def run(iters, warmup):
        cmd = [
            exe,
            "-r",
            str(world),
            "--mode",
            "process",
            "-o",
            op,
            "-d",
            dtype,
            "-b",
            str(size),
            "-e",
            str(size),
            "-w",
            str(warmup),
            "-n",
            str(iters),
            "--settle-ms",
            "50",
            "--timing",
            timing,
            "-c",
            "--json",
        ]
        env = dict(os.environ, COLLOPS_SHM_BIND="1")
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        if p.returncode != 0 or not lines or lines[0].get("error"):
            why = (lines[0].get("error") if lines else "") or p.stderr.strip()[-300:]
            return {"error": f"collops-bench: {why}", "command": " ".join(cmd)}
        r = lines[0]
        return {"us": r["time_med_us"], "wrong": r["wrong"], "command": " ".join(cmd)}

    probe = run(5, 5)
    if "error" in probe:
        return probe
    iters = iterations(probe["us"] * 1e-6, budget_s, args.max_iters)
    return run(iters, max(5, iters // 10))


def iterations(per_call_s, budget_s, most):
    """Calls that take about `budget_s`, at least 5 and at most `most`."""
    return int(min(most, max(5, budget_s / max(per_call_s, 1e-7))))


# Calls this long or longer (the 16-64 MiB rows, gloo from about 1 MiB) are timed with one probe
# call and one warm-up call: the first call has faulted the pages in, and at these sizes the
# caches hold nothing between calls, so more only lengthens the run (and these rows are most of
# it); their 5 timed calls are what the budget allows anyway.
LONG_CALL_S = 0.01


def probe(ranks, path):
    """Seconds per call of `path`, the max over ranks: one call, then three more when it was
    short."""
    per_call = max(ranks.gather(("probe", path, 1)))
    if per_call < LONG_CALL_S:
        per_call = max(ranks.gather(("probe", path, 3)))
    return per_call


def warmup_calls(per_call_s, iters, most):
    """Warm-up calls before `iters` timed ones: about 30 ms of them, at least 3, one for long
    calls."""
    if per_call_s >= LONG_CALL_S:
        return 1
    return max(3, min(iters, iterations(per_call_s, 0.03, most)))


# ---- one row -----------------------------------------------------------------------------------


def measure_row(args, ranks, op, dtype, size):
    """{path: {mode: {"us": ..., "wrong": ...} | {"error": ...}}, "notes": {...}} for one row,
    every path and mode in turn, repeated --repeat times (median of the repeats)."""
    world = ranks.world
    names, notes = ranks.gather(("row", op, dtype, size))[0]
    paths = [p for p in args.paths if p == "engine" or p in names]
    runs = {p: {m: [] for m in MODES} for p in paths}
    errors = {}
    for _ in range(args.repeat):
        for path in paths:
            if path in errors:
                continue
            per_call = None
            for mode in MODES:
                try:
                    if path == "engine":
                        r = engine(args, op, dtype, world, size, mode, args.budget_ms / 1000)
                        if "error" in r:
                            raise RuntimeError(r["error"])
                        runs[path][mode].append(r)
                        continue
                    if per_call is None:
                        per_call = probe(ranks, path)
                    iters = iterations(per_call, args.budget_ms / 1000, args.max_iters)
                    warmup = warmup_calls(per_call, iters, args.max_iters)
                    times = ranks.gather(("time", path, mode, warmup, iters))
                    if mode == "loop":
                        us = max(times) * 1e6
                    else:
                        us = statistics.median(max(ts) for ts in zip(*times)) * 1e6
                    runs[path][mode].append({"us": us, "iters": iters})
                except RuntimeError as e:
                    errors[path] = str(e)
                    break
    out = {"notes": notes}
    for path in paths:
        if path in errors:
            out[path] = {m: {"error": errors[path]} for m in MODES}
            continue
        wrong = None
        if path != "engine":
            try:
                wrong = sum(ranks.gather(("check", path)))
            except RuntimeError as e:
                out[path] = {m: {"error": str(e)} for m in MODES}
                continue
        out[path] = {}
        for mode in MODES:
            rs = runs[path][mode]
            us = statistics.median(r["us"] for r in rs)
            w = wrong if wrong is not None else max(r.get("wrong", 0) for r in rs)
            out[path][mode] = {"us": us, "wrong": w, "repeats": [round(r["us"], 3) for r in rs]}
            if path == "engine":
                out[path][mode]["command"] = rs[-1]["command"]
    return out


# ---- verdicts and Markdown ---------------------------------------------------------------------


def us_of(row, path, mode):
    r = row.get(path, {}).get(mode)
    if not r or "error" in r or r.get("wrong"):
        return None
    return r["us"]


def fmt(row, path, mode):
    r = row.get(path, {}).get(mode)
    if not r:
        return "—"
    if "error" in r:
        return "error"
    if r.get("wrong"):
        return "WRONG"
    t = r["us"]
    return f"{t / 1000:.2f} ms" if t >= 10000 else f"{t:.1f}"


def budgets(row, mode):
    """The targets for this row: {path: µs it may take} (None where unmeasured)."""
    e, floor = us_of(row, "engine", mode), us_of(row, "noop", mode)
    out = {}
    if e is not None:
        out["execute"] = out["ops"] = out["ops_"] = 1.5 * e + 3
        if floor is not None:
            out["dist"] = floor + 1.5 * e + 3
    return out


def verdicts(op, size, row, mode):
    """The target checks of one row and mode: a list of (what, ratio or None, met)."""
    got = []
    for path, limit in budgets(row, mode).items():
        t = us_of(row, path, mode)
        if t is not None:
            got.append((f"{path} ≤ {limit:.1f} µs", limit / t, t <= limit))
    ds = [us_of(row, p, mode) for p in DS_PATHS]
    ds = [t for t in ds if t is not None]
    for path in ("execute", "ops", "ops_", "dist"):
        t = us_of(row, path, mode)
        if t is None:
            continue
        if ds and op == "allreduce":
            got.append((f"{path} vs DeepSpeed", min(ds) / t, t < min(ds)))
        g = us_of(row, "gloo", mode)
        if g is not None and size <= 1 << 20:
            got.append((f"{path} vs gloo (20×)", g / t, g / t >= 20))
    return got


def markdown(results, meta, plots):
    L = [
        SECTION_BEGIN,
        "## Python entry points (bench/python_paths.py)",
        "",
        "Generated by `bench/python_paths.py` (also run by `bench/compare --python`); every "
        "number in this section comes from the run described here.",
        "",
    ]
    for k, v in meta.items():
        L.append(f"- **{k}**: {v}")
    L += [
        "",
        "Per call, µs. `sync`: a barrier outside every library before each call (ranks spin on "
        "words of their own in shared memory; `collops-bench --timing spin` for the engine), "
        "the latency the max over ranks, the median over calls. `loop`: calls back to back, the "
        "mean per call, the max over ranks. `engine`: collops-bench (process mode, "
        "`COLLOPS_SHM_BIND=1`: Setup once, Execute in a loop, the cross-rank check inside every "
        "call). `execute`: OperationTorch.execute (new outputs every call); `execute_out`: "
        "into outputs from `empty_shared`; `ops`: eager `torch.ops.collops.*` "
        '(`all_reduce(x)`: "sum" on the default group by the schema\'s defaults); `ops_`: eager '
        "`torch.ops.collops.inference_all_reduce_(y)` (in place, `ds_kernel`'s op shape on "
        "`all_reduce_`'s kernel); `dist`: "
        'torch.distributed on "cpu:collops"; `noop`: the same call on torch\'s registered no-op '
        'backend ("fake"), torch\'s own cost; `gloo`; `deepspeed`: '
        "`deepspeed.comm.inference_all_reduce`, `ds_kernel`: "
        "`torch.ops.deepspeed.inference_all_reduce_` (DeepSpeed's shared-memory kernel; "
        "DeepSpeed has no shared-memory all_gather). Targets: `execute`, `ops` and `ops_` ≤ 1.5 × "
        "engine + 3 µs; `dist` ≤ noop + 1.5 × engine + 3 µs; faster than DeepSpeed; ≥ 20× gloo "
        "up to 1 MiB. Ratios: the budget or the peer's time ÷ ours (≥ 1 met).",
        "",
    ]
    keys = sorted(results, key=lambda k: (k[0], k[1], k[2], k[3]))
    combos = sorted(
        {(op, dtype, R) for (op, dtype, R, _) in keys},
        key=lambda c: (OPS.index(c[0]), DTYPES.index(c[1]), c[2]),
    )
    paths = [p for p in PATHS if any(p in results[k] for k in keys)]
    misses = []
    for op, dtype, R in combos:
        L.append(f"### {op}, {dtype}, R={R}")
        L.append("")
        if (op, dtype) in plots:
            L.append(f"![{op} {dtype}](img/{plots[(op, dtype)]})")
            L.append("")
        notes = {
            n for k in keys if k[:3] == (op, dtype, R) for n in results[k].get("notes", {}).values()
        }
        if notes:
            L.append("DeepSpeed: " + "; ".join(sorted(notes)) + ".")
            L.append("")
        L.append("| size | mode | " + " | ".join(paths) + " | targets (ratio ≥ 1: met) |")
        L.append("|---|---|" + "---|" * len(paths) + "---|")
        for k in keys:
            if k[:3] != (op, dtype, R):
                continue
            size, row = k[3], results[k]
            for mode in MODES:
                checks = verdicts(op, size, row, mode)
                text = "; ".join(
                    f"{what} {x:.2f}×" + ("" if met else " **missed**") for what, x, met in checks
                )
                L.append(
                    f"| {human(size)} | {mode} | "
                    + " | ".join(fmt(row, p, mode) for p in paths)
                    + f" | {text} |"
                )
                misses += [
                    f"- {op} {dtype} R={R} {human(size)} {mode}: {what} {x:.2f}×"
                    for what, x, met in checks
                    if not met
                ]
        L.append("")
    L += ["### Targets missed in this run", ""] + (misses or ["- none"]) + [""]
    errors = [
        f"- {k} {p}: {v[m]['error']}"
        for k in keys
        for p, v in results[k].items()
        if p != "notes"
        for m in MODES
        if "error" in v.get(m, {})
    ]
    if errors:
        L += ["### Errors", ""] + sorted(set(errors)) + [""]
    L.append(SECTION_END)
    return "\n".join(L) + "\n"


def write_section(docs, text):
    """Puts `text` between the section markers of docs/performance.md (appended when absent,
    before the hand-written notes when bench/compare's marker is there)."""
    path = os.path.join(docs, "performance.md")
    old = open(path).read() if os.path.exists(path) else "# Performance\n\n"
    b, e = old.find(SECTION_BEGIN), old.find(SECTION_END)
    if b >= 0 and e > b:
        new = old[:b] + text + old[e + len(SECTION_END) + 1 :]
    else:
        notes = old.find("<!-- Everything below this line is written by people")
        at = notes if notes >= 0 else len(old)
        new = old[:at] + text + "\n" + old[at:]
    with open(path, "w") as f:
        f.write(new)


def plot(results, op, dtype, img_dir):
    """docs/img/python-paths-<op>-<dtype>.png: µs per call against size, one panel per R and
    mode, one line per path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted({R for (o, d, R, s) in results if (o, d) == (op, dtype)})
    fig, axes = plt.subplots(len(ranks), len(MODES), figsize=(11, 4 * len(ranks)), squeeze=False)
    for i, R in enumerate(ranks):
        for j, mode in enumerate(MODES):
            ax = axes[i][j]
            for path in PATHS:
                pts = [
                    (s, us_of(results[(o, d, RR, s)], path, mode))
                    for (o, d, RR, s) in sorted(results)
                    if (o, d, RR) == (op, dtype, R)
                ]
                pts = [(s, t) for s, t in pts if t is not None]
                if pts:
                    style = "--" if path in ("noop", "engine") else "-"
                    ax.plot(*zip(*pts), style, marker="o", ms=3, label=path)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("size S (bytes)")
            ax.set_ylabel("µs per call")
            ax.set_title(f"{op} {dtype}, R={R}, {mode}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    name = f"python-paths-{op}-{dtype}.png"
    fig.savefig(os.path.join(img_dir, name), dpi=100)
    plt.close(fig)
    return name


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def cpu_text():
    flags = sh(
        "grep -m1 -o -w -E 'avx512bw|avx512_bf16|avx2' /proc/cpuinfo | sort -u | tr '\\n' ' '"
    )
    return f"{sh('lscpu | sed -n s/^Model.name:.//p').strip()} ({flags.strip() or 'no AVX2'})"


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    ap.add_argument("--ranks", type=comma_list(int), default=[2])
    ap.add_argument("--ops", type=comma_list(str, OPS), default=OPS)
    ap.add_argument("--dtypes", type=comma_list(str, DTYPES), default=["float32"])
    ap.add_argument("--sizes", type=comma_list(parse_size), default=[4 << 10, 64 << 10, 1 << 20])
    ap.add_argument("--paths", type=comma_list(str, PATHS), default=PATHS)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every path of a row this many times in turn (the median)",
    )
    ap.add_argument(
        "--budget-ms",
        type=float,
        default=150,
        help="about this long per path, mode and repeat (iterations: 5 to --max-iters)",
    )
    ap.add_argument("--max-iters", type=int, default=2000)
    ap.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeed out")
    ap.add_argument(
        "--build",
        default=os.environ.get("COLLOPS_BUILD_DIR") or os.path.join(ROOT, "build"),
        help="CMake build with bench/collops-bench",
    )
    ap.add_argument("--docs", help="write the section of DOCS/performance.md and DOCS/img/ plots")
    ap.add_argument("--out", help="also write the raw rows (JSON lines) here")
    args = ap.parse_args()
    if "engine" in args.paths and not os.access(
        os.path.join(args.build, "bench", "collops-bench"), os.X_OK
    ):
        sys.exit(f"python_paths: {args.build}/bench/collops-bench is not built (--build)")
    use_ds = not args.no_deepspeed and any(p in args.paths for p in DS_PATHS)
    if use_ds:
        try:
            import importlib.util

            use_ds = importlib.util.find_spec("deepspeed") is not None
        except ImportError:
            use_ds = False
        if not use_ds:
            print("python_paths: DeepSpeed is not installed: no DeepSpeed columns", flush=True)
    # DeepSpeed on its CPU accelerator; its shared-memory kernel names its segment after these.
    os.environ.update(
        DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000)
    )
    os.environ.setdefault("COLLOPS_JOB_ID", f"python-paths-{os.getpid()}")
    os.environ["COLLOPS_SHM_BIND"] = "1"  # the Python ranks pinned as collops-bench's are
    started = datetime.datetime.now(datetime.timezone.utc)
    segments = (
        ds_segments(max(args.ranks), os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
        if use_ds
        else []
    )
    existed = {p for p in segments if os.path.exists(p)}
    results, t0 = {}, time.time()
    raw = open(args.out, "w") if args.out else None
    ds_version = None
    try:
        for R in args.ranks:
            ranks = Ranks(R, use_ds)
            ds_version = ds_version or ranks.ds_version
            try:
                for op in args.ops:
                    for dtype in args.dtypes:
                        for size in args.sizes:
                            row = measure_row(args, ranks, op, dtype, size)
                            results[(op, dtype, R, size)] = row
                            if raw:
                                raw.write(
                                    json.dumps(
                                        {"op": op, "dtype": dtype, "ranks": R, "bytes": size, **row}
                                    )
                                    + "\n"
                                )
                                raw.flush()
                            print(
                                f"[{time.time() - t0:5.0f}s load {loadavg()}] {op} {dtype} "
                                f"R={R} {human(size)}: "
                                + "; ".join(
                                    f"{p} {fmt(row, p, 'sync')}/{fmt(row, p, 'loop')}"
                                    for p in PATHS
                                    if p in row
                                ),
                                flush=True,
                            )
            finally:
                ranks.close()
    finally:
        if raw:
            raw.close()
        removed = remove_ds_segments(segments, existed)
        if removed:
            print(
                f"python_paths: removed the {len(removed)} shared-memory files DeepSpeed made in "
                f"this run (it does not unlink them): {', '.join(removed)}",
                flush=True,
            )
    git = sh(f"git -C {ROOT} rev-parse --short HEAD")
    torch_version = sh(sys.executable + " -c 'import torch; print(torch.__version__)'")
    meta = {
        "command": " ".join(
            shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]
        ),
        "started (UTC)": started.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{cpu_text()}, {os.cpu_count()} cores, {platform.platform()}",
        "versions": f"collops {git}, torch {torch_version}, DeepSpeed "
        f"{ds_version or 'not installed'}, Python {platform.python_version()}",
        "engine": f"{args.build}/bench/collops-bench",
        "load average (1/5/15 min) at end": loadavg(),
        "elapsed": f"{time.time() - t0:.0f} s",
    }
    text = markdown(results, meta, {})
    if args.docs:
        img = os.path.join(args.docs, "img")
        os.makedirs(img, exist_ok=True)
        plots = {}
        try:
            for op in args.ops:
                for dtype in args.dtypes:
                    plots[(op, dtype)] = plot(results, op, dtype, img)
        except ImportError:
            print("python_paths: matplotlib is not installed: no plots", flush=True)
        text = markdown(results, meta, plots)
        write_section(args.docs, text)
    print(text)


if __name__ == "__main__":
    main()
