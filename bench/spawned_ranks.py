"""The rank processes of a Python benchmark (bench/linear_parallel.py): R spawned processes of
one host that meet through a FileStore, each reporting its rows on a queue, every exit code
checked."""

import os
import queue
import sys
import tempfile

import torch.multiprocessing as mp


def _next(results, procs, name):
    """The next rank's report; exits once a rank has died without sending one."""
    while True:
        try:
            return results.get(timeout=1)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                sys.exit(f"{name}: a rank died (exit codes {[p.exitcode for p in procs]})")


def run(target, ranks, args, name, join_seconds=60):
    """Runs target(rank, ranks, store, args, results) in `ranks` spawned processes, where store is
    a FileStore path for init_process_group and each rank puts (rank, rows) on results once.
    Returns the reports in arrival order; exits naming the exit codes when any rank fails."""
    os.environ.setdefault("COLLOPS_JOB_ID", f"{name}-{os.getpid()}")
    store = os.path.join(tempfile.gettempdir(), f"collops-{name}-{os.getpid()}")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(r, ranks, store, args, results)) for r in range(ranks)
    ]
    for p in procs:
        p.start()
    try:
        reports = [_next(results, procs, name) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=join_seconds)
        if os.path.exists(store):
            os.remove(store)
    if any(p.exitcode != 0 for p in procs):
        sys.exit(f"{name}: a rank failed: " + str([p.exitcode for p in procs]))
    return reports
