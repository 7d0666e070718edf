"""bench/compare builds what it runs: on a build tree it brings the benchmarks up to date and
measures, with nothing to configure by hand; a tree built with sanitizers is refused, naming it.
"""

import os
import subprocess
import sys

import pytest

from repo_paths import REPO

BUILD = os.environ.get("COLLOPS_BUILD_DIR", os.path.join(REPO, "build"))
COMPARE = os.path.join(REPO, "bench", "compare")


def test_compare_refuses_a_tree_built_with_sanitizers(tmp_path):
    tree = tmp_path / "build-asan"
    tree.mkdir()
    (tree / "CMakeCache.txt").write_text("COLLOPS_SANITIZE:STRING=address,undefined\n")
    done = subprocess.run(
        [
            sys.executable,
            COMPARE,
            "--quick",
            "--layout",
            "1",
            "--build",
            str(tree),
            "--docs",
            str(tmp_path / "docs"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "built with sanitizers (address,undefined)" in done.stderr, done.stderr
    assert not (tmp_path / "docs").exists()


def test_compare_runs_on_the_build_tree_without_a_step_by_hand(tmp_path):
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        pytest.skip(f"{BUILD} is not a CMake build tree")
    docs = tmp_path / "docs"
    done = subprocess.run(
        [
            sys.executable,
            COMPARE,
            "--quick",
            "--ops",
            "allreduce",
            "--sizes",
            "4K",
            "--layout",
            "1",
            "--build",
            BUILD,
            "--docs",
            str(docs),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert (
        f"compare: building collops-bench collops-mpi-bench collops-memlimit in {BUILD}"
        in done.stdout
    ), done.stdout
    table = (docs / "performance.md").read_text()
    assert "| allreduce |" in table or "allreduce" in table, table[:2000]
