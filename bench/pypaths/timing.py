"""Timing one row: collops-bench for the C++ engine, and every Python path on the ranks in both
modes, with iterations sized from a probe.
"""

import json
import os
import statistics
import subprocess

import line_probe
from pypaths.columns import MODES
from pypaths.ranks import TIMEOUT_S


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


def measure_row(args, ranks, op, dtype, size):
    """{path: {mode: {"us": ..., "wrong": ...} | {"error": ...}}, "notes": {...}, "line_ns":
    [...]} for one row, every path and mode in turn, repeated --repeat times (median of the
    repeats); line_ns holds the cache line's round trips between the CPUs measured before every
    path and after the last (empty without collops-line-latency)."""
    probes = []
    world = ranks.world
    names, notes = ranks.gather(("row", op, dtype, size))[0]
    paths = [p for p in args.paths if p == "engine" or p in names]
    runs = {p: {m: [] for m in MODES} for p in paths}
    errors = {}
    for _ in range(args.repeat):
        for path in paths:
            if path in errors:
                continue
            probes.append(line_probe.round_trip_ns(args.build, timeout=TIMEOUT_S))
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
    probes.append(line_probe.round_trip_ns(args.build, timeout=TIMEOUT_S))
    out = {"notes": notes, "line_ns": [t for t in probes if t is not None]}
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
