"""collops-line-latency and what bench/python_paths.py makes of it.

The tool times a cache line's round trip between two CPUs; python_paths.py records it before
every path of a row and after the last, and marks the rows where it grew (a virtual machine's CPUs moved further apart),
so that a ratio measured across the move is not read as a property of the code.
"""

import json
import os
import subprocess
import sys

import pytest

from repo_paths import REPO

BUILD = os.environ.get("COLLOPS_BUILD_DIR", os.path.join(REPO, "build"))
TOOL = os.path.join(BUILD, "bench", "collops-line-latency")
USAGE_EXIT = 2


def tool():
    if not os.access(TOOL, os.X_OK):
        pytest.skip(f"{TOOL} is not built (ninja -C {BUILD} collops-line-latency)")
    return TOOL


def run(*argv):
    return subprocess.run([tool(), *argv], capture_output=True, text=True, timeout=30)


def two_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("this process may run on one CPU only")
    return cpus[:2]


def test_reports_a_round_trip_between_the_first_two_cpus():
    a, b = two_cpus()
    done = run("--json", "--trips", "2000", "--blocks", "3")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["system"] == "line-latency" and row["cpus"] == [a, b]
    # A round trip is two transfers of a line between caches: tens of ns at least, and far
    # below the milliseconds of a scheduler's time slice (both threads spin on CPUs of their own).
    assert 10 < row["round_trip_ns_min"] <= row["round_trip_ns_med"] < 100_000, row


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--cpus", "0,0"], "two different CPU numbers"),
        (["--cpus", "1"], "two different CPU numbers"),
        (["--trips", "0"], "--trips must be at least 1"),
        (["--blocks", "-1"], "--blocks must be at least 1"),
        (["--trips"], "incomplete argument --trips"),
        (["--size", "4"], "unknown or incomplete argument --size"),
    ],
)
def test_refuses_a_bad_command_line_naming_it(argv, words):
    done = run(*argv)
    assert done.returncode == USAGE_EXIT, (done.returncode, done.stderr)
    assert words in done.stderr and done.stdout == "", done.stderr


def test_a_cpu_it_may_not_run_on_is_an_error_not_a_hang():
    a, _ = two_cpus()
    # Past every CPU of the system: a CPU merely outside this process's affinity could be pinned.
    missing = max(os.cpu_count() or 0, max(os.sched_getaffinity(0)) + 1)
    done = run("--cpus", f"{a},{missing}", "--trips", "100", "--blocks", "1")
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert f"cannot pin a thread to CPU {a} or {missing}" in done.stderr


def report():
    sys.path.insert(0, os.path.join(REPO, "bench"))
    try:
        from pypaths import report as module
    finally:
        sys.path.pop(0)
    return module


def row(us, line_ns, ds_us=None):
    r = {
        "notes": {},
        "line_ns": line_ns,
        "engine": {m: {"us": us / 2, "wrong": 0} for m in ("sync", "loop")},
        "execute": {m: {"us": us, "wrong": 0} for m in ("sync", "loop")},
    }
    if ds_us is not None:
        r["ds_kernel"] = {m: {"us": ds_us, "wrong": 0} for m in ("sync", "loop")}
    return r


def test_the_report_marks_the_rows_measured_with_the_cpus_further_apart():
    rep = report()
    results = {
        ("allreduce", "float32", 2, 256): row(1.0, [84.0, 90.0], ds_us=2.0),
        # The CPUs moved during this row: its execute lost to DeepSpeed measured before the move.
        ("allreduce", "float32", 2, 65536): row(8.0, [390.0, 85.0, 120.0], ds_us=7.0),
        ("allreduce", "float32", 2, 1 << 20): row(50.0, [], ds_us=60.0),
    }
    assert rep.far_rows(results) == {("allreduce", "float32", 2, 65536)}
    text = rep.markdown(results, {}, {})
    assert "| 64 KiB | sync | 85-390 *far* |" in text
    assert "| 256 B | sync | 84-90 |" in text and "| 1 MiB | sync | — |" in text
    assert "- allreduce float32 R=2 64 KiB sync: execute vs DeepSpeed 0.88× (*far*: 85-390 ns)" in (
        text
    )


def test_no_row_is_far_without_measurements_or_below_twice_the_fastest():
    rep = report()
    assert rep.far_rows({("allreduce", "float32", 2, 256): row(1.0, [])}) == set()
    near = {
        ("allreduce", "float32", 2, 256): row(1.0, [84.0, 100.0]),
        ("allreduce", "float32", 2, 4096): row(1.0, [120.0, 167.0]),
    }
    assert rep.far_rows(near) == set()


def quant_bench():
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(REPO, "bench"))
    try:
        import quant_allreduce as module
    finally:
        sys.path.pop(0)
    return module


def test_the_quantised_bench_pairs_each_rounds_paths_and_splits_near_from_far_rounds():
    quant = quant_bench()
    # Two ranks, one row, four rounds: rank 1 is the slower in the first two. The CPUs were near
    # around rounds 0 and 1, far around round 3, and moved during round 2 (mixed: in no split).
    times = [
        {"quant": [1.0, 1.0, 1.0, 2.0], "f16": [1.5, 1.6, 3.0, 4.0]},
        {"quant": [1.2, 1.1, 1.0, 2.0], "f16": [1.7, 1.6, 3.0, 4.0]},
    ]
    per_rank = [
        (r, [(1 << 20, times[r], {}, [80.0, 90.0, 85.0, 400.0, 420.0] if r == 0 else [])])
        for r in range(2)
    ]
    cells = quant._paired(per_rank, 0, per_rank[0][1][0][3], 80.0, 4)
    # Paired ratios: 1.7/1.2, 1.6/1.1, 3.0/1.0, 4.0/2.0.
    assert cells == ["80-420", "1.73× (4)", "1.44× (2)", "2.00× (1)"]


def test_the_quantised_bench_without_probes_gives_the_paired_ratio_of_all_rounds_only():
    quant = quant_bench()
    times = {"quant": [1.0, 2.0, 1.0], "f16": [1.5, 3.0, 1.2]}
    per_rank = [(0, [(1 << 20, times, {}, [None, None, None, None])])]
    assert quant._paired(per_rank, 0, [None] * 4, None, 3) == ["—", "1.50× (3)", "—", "—"]
