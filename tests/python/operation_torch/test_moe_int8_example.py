"""examples/python/moe_int8_dispatch.py, as a user runs it: ATB's int8 pipeline (per-token
int8 quantisation, AllToAllV of the int8 rows and their scales, sum, dequantise to float16,
AllGather) in an MoE layer's combine step on 2 process ranks, against the same pipeline in float16
and float32 and the exact float64 output. The script fails itself when any pipeline's error
exceeds its rounding bound or the ranks' outputs differ; here with small sizes and one timed run,
so it costs seconds."""

import os
import subprocess
import sys

from repo_paths import REPO

SCRIPT = os.path.join(REPO, "examples", "python", "moe_int8_dispatch.py")


def run(*extra):
    return subprocess.run(
        [sys.executable, SCRIPT, "--tokens", "128", "--hidden", "128", "--repeat", "1", *extra],
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_two_ranks_every_pipeline_within_its_bound():
    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("int8", "float16", "float32"):
        assert f"  {name} " in proc.stdout, proc.stdout
    assert "within its bound, the same output on every rank" in proc.stdout, proc.stdout


def test_three_ranks_top_one():
    proc = run("--ranks", "3", "--top-k", "1", "--tokens", "96")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bad_arguments_are_refused():
    proc = run("--ranks", "3", "--tokens", "100")
    assert proc.returncode == 2 and "must divide" in proc.stderr, proc.stderr
