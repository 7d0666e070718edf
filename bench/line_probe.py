"""The round trip of one cache line between the first two CPUs, from collops-line-latency
(bench/line_latency.cpp): the benchmarks take it between their measurements, because a virtual
machine's CPUs can move between places that share a cache and places that do not while a
benchmark runs, and every collective's speed moves with them.
"""

import json
import os
import subprocess

# A round trip this many times the run's fastest means the CPUs were further apart: far.
FAR_FACTOR = 2.0


def tool(build):
    """The collops-line-latency of CMake build `build`, or None when it is not built there."""
    exe = os.path.join(build, "bench", "collops-line-latency")
    return exe if os.access(exe, os.X_OK) else None


def first_two_cpus():
    """The first two CPUs this process may run on (None with one): taken before a rank pins
    itself to one CPU, whose processes the tool would then inherit."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[:2] if len(cpus) >= 2 else None


def round_trip_ns(build, cpus=None, timeout=30):
    """The median round trip in ns over about 10 ms of measuring, between `cpus` (two CPU
    numbers; the first two this process may run on by default); None when the tool is not built
    in `build` or cannot pin its threads."""
    exe = tool(build)
    if exe is None:
        return None
    where = ["--cpus", f"{cpus[0]},{cpus[1]}"] if cpus else []
    p = subprocess.run(
        [exe, "--json", "--trips", "5000", "--blocks", "5", *where],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    return lines[0]["round_trip_ns_med"] if p.returncode == 0 and lines else None


def span(probes):
    """The fastest and slowest of `probes` in ns, e.g. "85-391"; "—" when there are none or one
    failed."""
    if not probes or None in probes:
        return "—"
    return f"{min(probes):.0f}-{max(probes):.0f}"


def is_far(ns, fastest):
    """Whether a round trip of `ns` means far CPUs in a run whose fastest was `fastest`."""
    return ns is not None and fastest is not None and ns >= FAR_FACTOR * fastest
