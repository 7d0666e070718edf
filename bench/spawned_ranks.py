"""The rank processes of a Python benchmark (bench/linear_parallel.py, bench/quant_allreduce.py):
R spawned processes of one host that meet through a FileStore, each reporting its rows on a queue,
every exit code checked; the lccl operation each rank times, and the statistic of the tables."""

import json
import os
import queue
import statistics
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


def lccl_operation(name, rank, world, domain, **extra):
    """An OperationTorch of operation `name` on this rank's lccl communicator in `domain`, with
    `extra` params; fails the rank when set_param refuses them."""
    import torch

    op = torch.classes.OperationTorch.OperationTorch(name)
    param = {"rank": rank, "rankSize": world, "backend": "lccl", "commDomain": domain, **extra}
    result = json.loads(op.set_param(json.dumps(param)))
    assert result["result"] == 0, result
    return op


def median_of_max(per_rank, pick, rounds):
    """The median over rounds of the slowest rank's time: pick(report) is a rank's list of times."""
    return statistics.median(max(pick(r)[j] for r in per_rank) for j in range(rounds))
