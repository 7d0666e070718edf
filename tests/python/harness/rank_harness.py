"""Runs one function as every rank of a collective job, and fails loudly if any rank does.

Two ways to host the ranks:

* :func:`run_thread_ranks` -- R Python threads of this process (``commMode`` 1). Works because
  OperationTorch's methods run with the GIL released.
* :func:`run_process_ranks` -- R fresh processes (``commMode`` 0, the multi-process lccl
  communicator), forked from multiprocessing's forkserver, which imports torch and its compiler
  front end (torch._dynamo) once for the whole session: a ``spawn``ed rank would spend most of a
  small test importing them.

Either way the rank function is called as ``fn(ctx, *args)`` with a :class:`RankContext`, every
rank's outcome is collected (return value, or the traceback it raised), every wait has a deadline,
and :class:`RankFailure` is raised naming each rank that raised, exited nonzero, or hung. Unlike
ATB's scripts, which join only the last process and never read exit codes, no rank can fail
silently.
"""

import itertools
import queue as queue_mod
import json
import multiprocessing
import os
import subprocess
import threading
import time
import traceback

DEFAULT_TIMEOUT = float(os.environ.get("COLLOPS_TEST_DEADLINE", "240"))
# Each collops wait gives up after COLLOPS_TIMEOUT seconds; keep it below the harness deadline so
# a lost peer surfaces as the library's own error message rather than as a kill.
RANK_COLLOPS_TIMEOUT = os.environ.get("COLLOPS_TIMEOUT", "60")

_run_ids = itertools.count()


class RankFailure(AssertionError):
    """One or more ranks failed; the message has a section per failed rank."""


class RankContext:
    """What a rank function knows about its job; picklable, so it crosses into spawned ranks."""

    def __init__(self, rank, world_size, comm_mode, domain, backend="hccl"):
        self.rank = rank
        self.world_size = world_size
        self.comm_mode = comm_mode  # 0 processes, 1 threads
        self.domain = domain
        self.backend = backend

    def param(self, domain=None, **extra):
        """The JSON params of an op for this rank: rank, rankSize, backend, commMode, commDomain,
        plus `extra` (which may override any of them)."""
        param = {
            "rank": self.rank,
            "rankSize": self.world_size,
            "backend": self.backend,
            "commMode": self.comm_mode,
            "commDomain": self.domain if domain is None else domain,
        }
        param.update(extra)
        return json.dumps(param)

    def __repr__(self):
        mode = "threads" if self.comm_mode == 1 else "processes"
        return f"rank {self.rank}/{self.world_size} ({mode}, domain {self.domain!r})"


def _report(kind, world_size, failures):
    lines = [f"{len(failures)} of {world_size} {kind} ranks failed:"]
    for rank in sorted(failures):
        lines.append(f"--- rank {rank}: {failures[rank].rstrip()}")
    return "\n".join(lines)


def run_thread_ranks(world_size, fn, *args, timeout=DEFAULT_TIMEOUT, backend="hccl"):
    """Runs fn(ctx, *args) on `world_size` threads as the ranks of a commMode 1 job.

    Returns the ranks' return values in rank order; raises RankFailure if any rank raised or had
    not finished by the deadline. Each call uses a fresh commDomain, so a job that failed cannot
    disturb the next one through the communicator cache.
    """
    domain = f"pytest-threads-{os.getpid()}-{next(_run_ids)}"
    results = [None] * world_size
    failures = {}

    def body(rank):
        ctx = RankContext(rank, world_size, 1, domain, backend)
        try:
            results[rank] = fn(ctx, *args)
        except BaseException:  # noqa: B902 -- every outcome of a rank must be reported
            failures[rank] = traceback.format_exc()

    threads = [
        threading.Thread(target=body, args=(r,), name=f"rank{r}", daemon=True)
        for r in range(world_size)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for rank, t in enumerate(threads):
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            failures.setdefault(rank, f"still running after the {timeout:.0f} s deadline (hang)")
    if failures:
        raise RankFailure(_report("thread", world_size, failures))
    return results


_rank_processes = None


def _rank_process_context():
    """The forkserver context, preloading torch and torch._dynamo (which starts no thread). Its
    server process starts at the first rank and holds no communicator, thread pool or tensor, so
    each rank starts as clean as a spawned one; only what torch reads from the environment while
    it is imported comes from the server's environment (the session's at that moment), which is
    why every rank is handed its launcher's environment explicitly."""
    global _rank_processes
    if _rank_processes is None:
        _rank_processes = multiprocessing.get_context("forkserver")
        _rank_processes.set_forkserver_preload(["torch", "torch._dynamo"])
    return _rank_processes


def _process_rank_main(fn, ctx, args, job_id, queue, environ):
    """Entry point of a rank process: takes its launcher's environment (as a spawned process
    would have), runs fn and reports through `queue` and the exit code."""
    os.environ.clear()
    os.environ.update(environ)
    os.environ["COLLOPS_JOB_ID"] = job_id
    os.environ.setdefault("COLLOPS_TIMEOUT", RANK_COLLOPS_TIMEOUT)
    try:
        import collops  # noqa: F401  (registers torch.classes.OperationTorch)

        result = fn(ctx, *args)
        queue.put((ctx.rank, True, result))
    except BaseException:  # noqa: B902
        queue.put((ctx.rank, False, traceback.format_exc()))
        raise SystemExit(1)


def run_process_ranks(world_size, fn, *args, timeout=DEFAULT_TIMEOUT, backend="hccl", domain=""):
    """Runs fn(ctx, *args) in `world_size` new processes as the ranks of a commMode 0 job.

    `fn` and `args` must be picklable (a module-level function). Every process gets the same
    fresh COLLOPS_JOB_ID, so concurrent test runs on one host never meet in a rendezvous. Returns
    the ranks' return values in rank order; raises RankFailure naming every rank that raised,
    exited nonzero (a crash shows its signal), or was still running at the deadline (then killed).
    """
    mp = _rank_process_context()
    queue = mp.Queue()
    job_id = f"pytest-{os.getpid()}-{next(_run_ids)}-{time.time_ns()}"
    procs = []
    for rank in range(world_size):
        ctx = RankContext(rank, world_size, 0, domain, backend)
        p = mp.Process(
            target=_process_rank_main,
            args=(fn, ctx, args, job_id, queue, dict(os.environ)),
            name=f"rank{rank}",
        )
        p.start()
        procs.append(p)

    outcomes = {}
    deadline = time.monotonic() + timeout
    # Drain the queue while waiting: a child cannot exit while its queue data is unflushed.
    while len(outcomes) < world_size and time.monotonic() < deadline:
        try:
            rank, ok, payload = queue.get(timeout=0.2)
            outcomes[rank] = (ok, payload)
        except queue_mod.Empty:
            if all(not p.is_alive() for p in procs):
                break
    failures = {}
    for rank, p in enumerate(procs):
        p.join(max(0.1, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(10)
            failures[rank] = f"still running after the {timeout:.0f} s deadline (hang); killed"
            continue
        ok, payload = outcomes.get(rank, (None, None))
        if p.exitcode != 0:
            how = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exit code {p.exitcode}"
            failures[rank] = f"{how}\n{payload or '(no report: the process died first)'}"
        elif ok is not True:
            failures[rank] = "exit code 0 but no success report"
    queue.close()
    if failures:
        raise RankFailure(_report("process", world_size, failures))
    return [outcomes[r][1] for r in range(world_size)]


def communicate_with_ranks(procs, timeout=120):
    """Waits for rank processes started with piped text output; returns (returncode, stdout,
    stderr) for each. One still running at the deadline kills them all: RankFailure names it."""
    results = []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise RankFailure(f"rank {rank} hung (no exit within {timeout} s)")
        results.append((proc.returncode, out, err))
    return results


def run_ranks(mode, world_size, fn, *args, **kwargs):
    """run_thread_ranks for mode "threads", run_process_ranks for mode "processes"."""
    if mode == "threads":
        return run_thread_ranks(world_size, fn, *args, **kwargs)
    if mode == "processes":
        return run_process_ranks(world_size, fn, *args, **kwargs)
    raise ValueError(f"unknown rank mode {mode!r}")


def in_lccl_segment(t):
    """Whether tensor t's memory lies in a mapping of the lccl memfd segment (its shared heap):
    how the shared-buffer tests tell heap memory from ordinary memory."""
    at = t.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= at < hi:
                return len(fields) == 6 and "memfd:collops-lccl" in fields[5]
    return False
