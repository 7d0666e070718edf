#!/usr/bin/env python3
"""The Python entry points of collops against the C++ engine, torch's own floor, DeepSpeed's
shared-memory all_reduce and gloo, per call, interleaved in one run.

Columns (every one measured in the same run, row by row, one after the other):
  engine          the C++ engine: collops-bench (process mode, Setup once, Execute in a loop, the
                  cross-rank check inside every call), run between the Python paths of the row
  execute         OperationTorch.execute([x]) (new outputs every call, over reused memory when the
                  previous ones were dropped)
  execute_torch   the same call through torch's custom-class method
                  (torch.ScriptObject.__getattr__(op, "execute")), which the builtin execute that
                  `import collops` installs skips
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
Before every path of a row and after the last, collops-line-latency (in --build) times the
round trip of one cache line between the first two CPUs, the floor of every synchronisation
round: a virtual machine's CPUs can move further apart while it runs, which slows every path,
and the report marks the rows where that happened (*far*).

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
import sys
import time

import line_probe
from pypaths import ROOT
from pypaths.columns import DS_PATHS, DTYPES, OPS, PATHS
from pypaths.deepspeed_peer import ds_segments, remove_ds_segments
from pypaths.machine import cpu_text, loadavg, sh
from pypaths.ranks import Ranks
from pypaths.report import far_rows, fmt, human, markdown, plot, run_probes, write_section
from pypaths.timing import measure_row


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
    probes = run_probes(results)
    if probes:
        meta["cache line round trip between the first two CPUs"] = (
            f"{line_probe.span(probes)} ns over the run, {len(far_rows(results))} of "
            f"{len(results)} rows *far*"
        )
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
