"""bench/quant_allreduce.py runs end to end on two ranks and refuses a bad command line.

A tiny run (one size, two rounds, one timed call) checks what a timing change could break: every
rank makes the same untimed warm-up calls (rank 0's counts, broadcast), gloo_deq's rounds follow
the lccl paths' rounds, a forced algorithm has its column, and the table has a number in every
path's cell. Its timings mean nothing at that size and are not checked.
"""

import os
import re
import subprocess
import sys

import pytest

from repo_paths import REPO

BENCH = os.path.join(REPO, "bench", "quant_allreduce.py")
BUILD = os.environ.get("COLLOPS_BUILD_DIR", os.path.join(REPO, "build"))
USAGE_EXIT = 2


def bench(*argv, timeout=120):
    pytest.importorskip("torch")
    env = dict(os.environ, COLLOPS_BUILD_DIR=BUILD)
    return subprocess.run(
        [sys.executable, BENCH, *argv], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_a_tiny_run_fills_every_path_of_its_row():
    done = bench(
        "--ranks",
        "2",
        "--sizes",
        "2K",
        "--rounds",
        "2",
        "--calls",
        "1",
        "--algos",
        "oneshot",
        "--warm-ms",
        "0.2",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    header = next(line for line in done.stdout.splitlines() if line.startswith("| R |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 2 | 2 KiB |"))
    cells = dict(zip(columns, [c.strip() for c in row.strip("|").split("|")]))
    for path in ("quant", "f16", "gloo_deq", "quant:oneshot"):
        assert re.fullmatch(r"[0-9]+\.[0-9]{3}", cells[path]), (path, row)
    assert "after about 0.2 ms of untimed calls" in done.stdout


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_negative_warm_up_is_refused_naming_the_option(value):
    done = bench("--warm-ms", value, timeout=60)
    assert done.returncode == USAGE_EXIT
    assert "--warm-ms must be >= 0" in done.stderr
