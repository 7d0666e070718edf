#!/usr/bin/env python3
"""The Python entry points, timed per call in one run: what an ATB script or a torch.distributed
user pays on top of the collective itself.

For R spawned ranks (one host, processes, lccl) and each size, back to back:
  execute       OperationTorch.execute (outputs allocated, in the lccl heap, on every call)
  execute_out   OperationTorch.execute_out into outputs from empty_shared (allocated once)
  collops       torch.distributed on a "collops" group (dist.all_reduce / all_to_all_single)
  gloo          the same call on a gloo group of the same ranks
  memcpy        torch copy_ of the same bytes between two preallocated tensors
Ops: allreduce (float32, sum) and alltoallv (int8, AllToAllVV2Operation with its counts bound by
set_varaintpack_param every call, as MoE dispatch does; even splits). Per call: the mean over
`--iters` calls after `--warmup`, the max over ranks. Needs `import collops` to work (build the
torch binding first, see README.md).

    python3 bench/python_paths.py                 # R=2, 4 KiB, 64 KiB, 1 MiB, 16 MiB
    python3 bench/python_paths.py -r 4 --sizes 4096,1048576
"""
import argparse
import json
import os
import queue
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# The package from this source tree (it finds the library in python/collops/lib/ or through
# COLLOPS_BUILD_DIR), unless one is installed.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

PATHS = ("execute", "execute_out", "collops", "gloo", "memcpy")


def _per_call(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def _param(rank, world, **extra):
    return json.dumps({"rank": rank, "rankSize": world, "backend": "lccl", "commMode": 0,
                       "commDomain": "python-paths", **extra})


def _allreduce(rank, world, size, gloo):
    x = torch.ones(size // 4)
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    op.set_param(_param(rank, world, allReduceType="sum"))
    op.execute([x])  # creates the communicator, so empty_shared can use its heap
    out = op.empty_shared(list(x.shape), torch.float32)
    y = torch.empty_like(x)
    return {
        "execute": lambda: op.execute([x]),
        "execute_out": lambda: op.execute_out([x], [out]),
        "collops": lambda: dist.all_reduce(y),
        "gloo": lambda: dist.all_reduce(y, group=gloo),
        "memcpy": lambda: y.copy_(x),
    }


def _alltoallv(rank, world, size, gloo):
    piece = size // world
    counts = [piece] * world
    displs = [piece * j for j in range(world)]
    bound = json.dumps({"sendCounts": counts, "sdispls": displs, "recvCounts": counts,
                        "rdispls": displs})
    x = torch.full((size,), rank, dtype=torch.int8)
    host = torch.tensor(counts), torch.tensor(displs)
    ins = [x, host[0], host[1], host[0], host[1], torch.empty(size, dtype=torch.int8)]
    op = torch.classes.OperationTorch.OperationTorch("AllToAllVV2Operation")
    op.set_param(_param(rank, world))
    op.set_varaintpack_param(bound)
    op.execute(ins)
    out = op.empty_shared([1, size], torch.int8)
    y = torch.empty_like(x)

    def execute():
        op.set_varaintpack_param(bound)
        return op.execute(ins)

    def execute_out():
        op.set_varaintpack_param(bound)
        op.execute_out(ins, [out])

    return {
        "execute": execute,
        "execute_out": execute_out,
        "collops": lambda: dist.all_to_all_single(y, x),
        "gloo": lambda: dist.all_to_all_single(y, x, group=gloo),
        "memcpy": lambda: y.copy_(x),
    }


CASES = {"allreduce": _allreduce, "alltoallv": _alltoallv}


def _rank(rank, world, store, args, results):
    import collops  # noqa: F401  (OperationTorch, the "collops" backend)

    dist.init_process_group("collops", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    gloo = dist.new_group(backend="gloo")
    rows = []
    for op in args.ops.split(","):
        for size in args.sizes:
            calls = CASES[op](rank, world, size, gloo)
            times = {}
            for path in PATHS:
                iters = max(10, args.iters // 5) if path == "gloo" else args.iters
                times[path] = _per_call(calls[path], args.warmup, iters)
            rows.append((op, size, times))
    results.put((rank, rows))
    dist.destroy_process_group()


def _result(results, procs):
    """The next rank's rows; fails once a rank has died without sending any."""
    while True:
        try:
            return results.get(timeout=1)
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                sys.exit(f"python_paths: a rank died (exit codes {[p.exitcode for p in procs]})")


def _size(text):
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--ranks", type=int, default=2)
    parser.add_argument("--ops", default="allreduce,alltoallv")
    parser.add_argument("--sizes", default="4K,64K,1M,16M",
                        type=lambda s: [_size(x) for x in s.split(",")])
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("COLLOPS_JOB_ID", f"python-paths-{os.getpid()}")
    store = os.path.join(tempfile.gettempdir(), f"collops-python-paths-{os.getpid()}")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, args.ranks, store, args, results))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    try:
        per_rank = [_result(results, procs) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
        if os.path.exists(store):
            os.remove(store)
    if any(p.exitcode != 0 for p in procs):
        sys.exit("python_paths: a rank failed: " + str([p.exitcode for p in procs]))
    rows = per_rank[0][1]
    print(f"# R={args.ranks}, µs per call (max over ranks); ratios: execute / execute_out, "
          "gloo / collops")
    print("| op | size | " + " | ".join(PATHS) + " | execute ÷ execute_out | gloo ÷ collops |")
    print("|---|---|" + "---|" * (len(PATHS) + 2))
    for i, (op, size, _) in enumerate(rows):
        t = {p: max(r[1][i][2][p] for r in per_rank) for p in PATHS}
        cells = " | ".join(f"{t[p]:.1f}" for p in PATHS)
        print(f"| {op} | {size >> 10} KiB | {cells} | {t['execute'] / t['execute_out']:.2f}× | "
              f"{t['gloo'] / t['collops']:.1f}× |")


if __name__ == "__main__":
    main()
