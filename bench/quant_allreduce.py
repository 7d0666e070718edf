#!/usr/bin/env python3
"""Quantised AllReduce (int8 on the wire) against float16 AllReduce of the same elements, in one run.

For R spawned ranks (one host, processes, lccl) and each N (given as the bytes N float16 elements
take), every round times each lccl path once, in turn, so load on the machine hits them alike, and
gloo_deq is timed in rounds of its own after them:
  quant       AllReduceOperation quantType 1, outDataType float16: x int8 [N/1024, 1024], scale
              and offset float16 [1]; y float16 (OperationTorch.execute_out)
  f16         AllReduceOperation of x float16 [N/1024, 1024] (OperationTorch.execute_out)
  gloo_deq    ATB's int8 pipeline by hand over gloo: dequantise x to float16 ((x + offset)·scale),
              then dist.all_reduce of the float16 tensor
  quant:A     with --algos A,B,...: the quantised AllReduce with lccl's algorithm A forced
              (oneshot, rsag), each over a communicator of its own created with
              COLLOPS_ALGO_QUANTALLREDUCE=A, so that the algorithms are compared with each other
              and with f16 in one run
A round times --calls calls of each path back to back after a barrier and the path's warm-up
calls, none of them timed: the ranks leave gloo's barrier at different times, and the first
calls after any gloo call run slower; each path is called, untimed, for about --warm-ms
(rank 0's estimate from its first calls, the same count on every rank), so that the timed calls
run as a model's back-to-back calls do. gloo_deq (the slowest path by far) is not in the lccl
paths' rounds: after its blocking waits and its float buffers of 2N elements, the next lccl
path's calls ran slower for longer than a millisecond of warm-up calls, which cost the quantised
path more in proportion than f16 (docs/performance.md). Round j starts at the j-th path, so that
no path always runs first or after the same one. Reported per path: the median
over rounds of the max over ranks of the time per call, in ms; then f16 ÷ quant and gloo_deq ÷
quant (> 1: the quantised AllReduce is faster). Every rank's y of the quantised paths is checked
against the float32 steps of its golden once, before the timing. Rank 0 times a cache line's
round trip between the first two CPUs (collops-line-latency, in $COLLOPS_BUILD_DIR) before every
round and after the last: a round between two probes that both read near is a near round, both
far (twice the run's fastest or more) a far one; the paired ratio of a round divides the paths'
times of that round, and the table gives the median of the paired ratios over all rounds, over
the near rounds and over the far ones, so that a virtual machine's CPUs moving apart during the
run (every collective slower) compare near with near and far with far. A second table gives,
per path, the CPU time per call summed over the ranks (user + system, waits included) and the
context switches per call summed over the ranks: with more ranks than CPUs the total work and
the number of times a rank gives up its CPU decide the time, and they vary less than the wall
clock on a shared machine.

    python3 bench/quant_allreduce.py                         # R = 2 and 4, 256 KiB..16 MiB
    python3 bench/quant_allreduce.py --ranks 2 --sizes 1M --rounds 5 --calls 1
    python3 bench/quant_allreduce.py --ranks 4 --algos oneshot,rsag   # the algorithms side by side
"""

import argparse
import contextlib
import math
import os
import re
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import line_probe  # noqa: E402  (bench/, beside this script)
import spawned_ranks  # noqa: E402

BUILD = os.environ.get("COLLOPS_BUILD_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "build"
)

PATHS = ("quant", "f16", "gloo_deq")
WARM_MAX_CALLS = 100  # a path's untimed calls per round, at most
ROW = 1024  # x is [N / ROW, ROW]: n = ROW, a multiple of 16 as ATB requires
UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20}


def _op(rank, world, **extra):
    return spawned_ranks.lccl_operation("AllReduceOperation", rank, world, "quant-bench", **extra)


@contextlib.contextmanager
def _forced(algo):
    """The environment a communicator forcing lccl's quantised algorithm `algo` is created in."""
    env = {"COLLOPS_ALGO_QUANTALLREDUCE": algo}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def _paths(rank, world, elements, gloo, algos, offset_value):
    gen = torch.Generator().manual_seed(rank)
    shape = (elements // ROW, ROW)
    x = torch.randint(-128, 128, shape, generator=gen, dtype=torch.int16).to(torch.int8)
    scale = torch.tensor([1 / 64], dtype=torch.float16)
    offset = torch.tensor([offset_value], dtype=torch.float16)
    y = torch.empty(shape, dtype=torch.float16)
    h = (torch.rand(shape, generator=gen) - 0.5).to(torch.float16)
    hy = torch.empty_like(h)
    deq = torch.empty_like(h)
    quant = _op(rank, world, quantType=1, outDataType=1)
    plain = _op(rank, world)

    def quant_call():
        quant.execute_out([x, scale, offset], [y])

    def gloo_call():
        torch.mul(x.float() + offset.float(), scale.float(), out=deq)
        dist.all_reduce(deq, group=gloo)

    calls = {
        "quant": quant_call,
        "f16": lambda: plain.execute_out([h], [hy]),
        "gloo_deq": gloo_call,
    }
    for algo in algos:
        with _forced(algo):
            # The communicator is created by the first call, in this environment.
            forced = _op(rank, world, quantType=1, outDataType=1, commDomain=f"quant-bench-{algo}")
            ya = torch.empty_like(y)
            forced.execute_out([x, scale, offset], [ya])
        if not torch.equal(ya, y_want(rank, world, x, scale, offset)):
            raise SystemExit(f"rank {rank}: quant:{algo} differs from the golden")
        calls[f"quant:{algo}"] = lambda f=forced, ya=ya: f.execute_out([x, scale, offset], [ya])
    return calls, (x, scale, offset, y)


def y_want(rank, world, x, scale, offset):
    """The float32 steps of the golden, from every rank's x (same seeds)."""
    total = torch.zeros(x.shape, dtype=torch.int32)
    for r in range(world):
        gen = torch.Generator().manual_seed(r)
        total += torch.randint(-128, 128, x.shape, generator=gen, dtype=torch.int16).to(torch.int32)
    return ((total.float() + world * offset.float()) * scale.float()).to(torch.float16)


def _check(rank, world, elements, tensors):
    """y of the quantised path against the float32 steps of its golden."""
    x, scale, offset, y = tensors
    want = y_want(rank, world, x, scale, offset)
    if not torch.equal(y, want):
        bad = (y != want).sum().item()
        raise SystemExit(
            f"rank {rank}: quantised AllReduce of {elements} elements: {bad} "
            "elements differ from the golden"
        )


def _rank(rank, world, store, args, results):
    import collops  # noqa: F401  (OperationTorch)

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    torch.set_num_threads(1)
    rows = []
    for size in args.sizes:
        elements = size // 2
        calls, tensors = _paths(rank, world, elements, gloo, args.algos, args.offset)
        for call in calls.values():  # warm-up: communicators, pages
            call()
        _check(rank, world, elements, tensors)
        warm = _warm_calls(rank, calls, args.warm_ms, gloo)
        times = {path: [] for path in calls}
        work = {path: [] for path in calls}
        lines = []  # rank 0's probes: before every round and after the last

        def timed(path):
            call = calls[path]
            dist.barrier(group=gloo)
            for _ in range(warm[path]):
                call()
            start, cpu, switches = time.perf_counter(), time.process_time(), _switches()
            for _ in range(args.calls):
                call()
            times[path].append((time.perf_counter() - start) * 1e3 / args.calls)
            work[path].append(
                (
                    (time.process_time() - cpu) * 1e3 / args.calls,
                    (_switches() - switches) / args.calls,
                )
            )

        order = [path for path in calls if path != "gloo_deq"]
        for j in range(args.rounds):
            if rank == 0:
                lines.append(line_probe.round_trip_ns(BUILD, args.probe_cpus))
            # Round j starts at path j: no path always runs first or after the same one.
            for path in order[j % len(order) :] + order[: j % len(order)]:
                timed(path)
        if rank == 0:
            lines.append(line_probe.round_trip_ns(BUILD, args.probe_cpus))
        # gloo_deq's rounds come after the lccl paths' (see the module's text).
        for _ in range(args.rounds):
            timed("gloo_deq")
        rows.append((size, times, work, lines))
    results.put((rank, rows))
    dist.destroy_process_group()


def _warm_calls(rank, calls, warm_ms, gloo):
    """Per path, how many untimed calls take about warm_ms (at least one: it absorbs the ranks'
    skew leaving the barrier); rank 0 times a few calls of each path and every rank takes its
    counts, so that all ranks make the same calls."""
    counts = [{} if rank == 0 else None]
    for path, call in calls.items():
        start = time.perf_counter()
        for _ in range(3):
            call()
        if rank == 0:
            per_call_ms = (time.perf_counter() - start) * 1e3 / 3
            counts[0][path] = max(1, min(WARM_MAX_CALLS, math.ceil(warm_ms / per_call_ms)))
    dist.broadcast_object_list(counts, src=0, group=gloo)
    return counts[0]


def _switches():
    """Context switches of this process so far (voluntary: waits; involuntary: preempted)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def parse_size(text):
    m = re.fullmatch(r"([0-9]+)([kKmM]?)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, optional K or M)")
    size = int(m[1]) * UNITS[m[2].lower()]
    if size <= 0 or size % (2 * ROW) != 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a multiple of {2 * ROW} bytes (float16 rows of {ROW})"
        )
    return size


def human(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-r", "--ranks", default="2,4", type=lambda s: [int(v) for v in s.split(",")]
    )
    parser.add_argument(
        "--sizes",
        default="256K,1M,4M,16M",
        type=lambda s: [parse_size(v) for v in s.split(",")],
        help="bytes of N float16 elements (the quantised x holds half of it)",
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--offset",
        type=float,
        default=0.5,
        help="the quantisation offset (float16): where R·offset is a whole number the kernel adds "
        "it to its int16 sums, otherwise in float32",
    )
    parser.add_argument("--calls", type=int, default=10, help="calls of a path per round")
    parser.add_argument(
        "--warm-ms",
        type=float,
        default=1.0,
        help="untimed calls of a path before its timed ones in each round, for about this long "
        "(at least one call)",
    )
    parser.add_argument(
        "--algos",
        default=[],
        type=lambda s: [v for v in s.split(",") if v],
        help="lccl quantised algorithms to time forced as well (oneshot, rsag)",
    )
    args = parser.parse_args()
    if any(a not in ("oneshot", "rsag") for a in args.algos):
        parser.error("--algos takes oneshot, rsag")
    # The pair the ranks' probes use, taken here: COLLOPS_SHM_BIND=1 pins each rank to one CPU.
    args.probe_cpus = line_probe.first_two_cpus()
    paths = PATHS + tuple(f"quant:{a}" for a in args.algos)
    forced = [f"quant:{a}" for a in args.algos]
    if min(args.ranks) < 1 or args.rounds < 1 or args.calls < 1:
        parser.error("ranks, rounds and calls must be >= 1")
    if not args.warm_ms >= 0:
        parser.error("--warm-ms must be >= 0")
    print(
        f"# Quantised AllReduce vs float16 AllReduce (lccl processes) and gloo's dequantise + "
        f"all_reduce; ms per call, median over {args.rounds} rounds of {args.calls} calls each, "
        f"of the max over ranks, after about {args.warm_ms} ms of untimed calls; offset {args.offset}"
    )
    ratios = ["f16 ÷ quant", "gloo_deq ÷ quant"] + [f"f16 ÷ {p}" for p in forced]
    paired = ["line ns", "f16 ÷ quant paired: all", "near", "far"]
    work_rows, rows = [], []
    for world in args.ranks:
        per_rank = spawned_ranks.run(_rank, world, args, "quant-bench", join_seconds=120)
        per_rank.sort(key=lambda r: r[0])
        for i, (size, *_) in enumerate(per_rank[0][1]):
            work_rows.append((world, size, _work(per_rank, i, paths, args.rounds)))
            rows.append((world, size, per_rank, i))
    # The fastest probe of the whole run is the near baseline: the CPUs may have been far
    # throughout the first row.
    probes = [ns for _, _, per_rank, i in rows for ns in per_rank[0][1][i][3] if ns is not None]
    fastest = min(probes, default=None)
    print("| R | float16 bytes | N | " + " | ".join(paths + tuple(ratios + paired)) + " |")
    print("|---|---|---|" + "---|" * (len(paths) + len(ratios) + len(paired)))
    for world, size, per_rank, i in rows:
        t = {
            path: spawned_ranks.median_of_max(
                per_rank, lambda r, i=i, path=path: r[1][i][1][path], args.rounds
            )
            for path in paths
        }
        shares = [t["f16"] / t["quant"], t["gloo_deq"] / t["quant"]]
        shares += [t["f16"] / t[p] for p in forced]
        lines = per_rank[0][1][i][3]
        print(
            f"| {world} | {human(size)} | {size // 2} | "
            + " | ".join(f"{t[p]:.3f}" for p in paths)
            + " | "
            + " | ".join(f"{v:.2f}×" for v in shares)
            + " | "
            + " | ".join(_paired(per_rank, i, lines, fastest, args.rounds))
            + " |"
        )
    # CPU time counts what every rank spent, waiting included, wherever the scheduler ran it: on
    # a machine shared with other work it varies less than the wall clock.
    print(
        "\n# CPU ms per call summed over ranks (process time: user + system), median over rounds; "
        "then context switches per call summed over ranks"
    )
    print(
        "| R | float16 bytes | "
        + " | ".join(f"{p} cpu" for p in paths)
        + " | f16 ÷ quant cpu | "
        + " | ".join(f"{p} switches" for p in paths)
        + " |"
    )
    print("|---|---|" + "---|" * (2 * len(paths) + 1))
    for world, size, (cpu, switches) in work_rows:
        print(
            f"| {world} | {human(size)} | "
            + " | ".join(f"{cpu[p]:.3f}" for p in paths)
            + f" | {cpu['f16'] / cpu['quant']:.2f}× | "
            + " | ".join(f"{switches[p]:.1f}" for p in paths)
            + " |"
        )


def _paired(per_rank, i, lines, fastest, rounds):
    """The cells of a row's paired ratios: its probes' range, then the median over all, near and
    far rounds of f16 ÷ quant within each round (the slowest rank's time of each path), each
    with its number of rounds."""

    def slowest(path, j):
        return max(r[1][i][1][path][j] for r in per_rank)

    ratio = [slowest("f16", j) / slowest("quant", j) for j in range(rounds)]
    kinds = ["all"] * rounds
    if len(lines) == rounds + 1 and None not in lines:
        for j in range(rounds):
            far = [line_probe.is_far(ns, fastest) for ns in lines[j : j + 2]]
            kinds[j] = "far" if all(far) else "near" if not any(far) else "mixed"
    cells = [line_probe.span(lines)]
    for kind in ("all", "near", "far"):
        picked = [x for x, k in zip(ratio, kinds) if kind == "all" or k == kind]
        cells.append(f"{statistics.median(picked):.2f}× ({len(picked)})" if picked else "—")
    return cells


def _work(per_rank, i, paths, rounds):
    """Per path: the median over rounds of the CPU ms summed over ranks, and of the switches."""
    cpu, switches = {}, {}
    for p in paths:
        cpu[p] = statistics.median(
            sum(r[1][i][2][p][j][0] for r in per_rank) for j in range(rounds)
        )
        switches[p] = statistics.median(
            sum(r[1][i][2][p][j][1] for r in per_rank) for j in range(rounds)
        )
    return cpu, switches


if __name__ == "__main__":
    main()
