"""The benchmarks refuse a bad command line at once, naming the option, with exit code 2.

Covers the options that can go wrong in a way other than a message: sizes (-b 0, a negative or
non-numeric -b, an -e past int64) that would be allocated until std::bad_alloc or overflow a
conversion, -b > -e (an empty table), -w -1, and bench/compare's options (a job of 0 ranks, a
performance.md full of errors). Every run here has an address-space limit and a deadline, so a
regression fails in seconds instead of eating the machine's memory. Also run by ctest (BenchOptions) against the build it belongs to.
"""

import importlib.machinery
import importlib.util
import os
import resource
import shutil
import subprocess
import sys

import pytest

from repo_paths import REPO

BUILD = os.environ.get("COLLOPS_BUILD_DIR", os.path.join(REPO, "build"))
COMPARE = os.path.join(REPO, "bench", "compare")
GLOO_WORKER = os.path.join(REPO, "bench", "gloo_worker.py")
BENCH_TOOLS = ("collops-bench", "collops-mpi-bench", "collops-memlimit")
USAGE_EXIT = 2
DEADLINE = 20  # seconds: every refusal takes milliseconds, an mpirun start about 2 s


def limit_memory(gib=2):
    """preexec_fn: an address-space cap, so a runaway allocation fails fast instead."""

    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))

    return apply


def tool(name):
    path = os.path.join(BUILD, "bench", name)
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built (ninja -C {BUILD} {name})")
    return path


def run(argv, gib=2, env=None):
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        preexec_fn=limit_memory(gib),
        env=dict(os.environ, **(env or {})),
    )


# (argv after the tool, words the first line of stderr must contain): every tool reads these.
EVERY_TOOL = [
    (["-b", "0", "-e", "64"], ["-b 0", "not a size"]),
    (["-b", "-5"], ["-b -5", "not a size"]),
    (["-b", "abc", "-e", "64"], ["-b abc", "not a size"]),
    (["-b", "1e30", "-e", "1e30"], ["-b 1e30", "not a size"]),
    (["-b", "1G", "-e", "9e18"], ["-e 9e18", "not a size"]),
    (["-e", "-1"], ["-e -1", "not a size"]),
    (["-e", "9999999999G"], ["-e 9999999999G", "too large"]),
    (["-e", "99999999999999999999"], ["-e 99999999999999999999", "too large"]),
    (["-e", "1000000G"], ["-e 1000000G", "machine's memory"]),
    (["-b", "1M", "-e", "1K"], ["-b 1M", "-e 1K"]),
    (["-f", "1"], ["-f 1", ">= 2"]),
    (["-f", "x"], ["-f x", ">= 2"]),
    (["-w", "-1", "-n", "1"], ["-w -1", ">= 0"]),
    (["-n", "0"], ["-n 0", ">= 1"]),
    (["-n", "many"], ["-n many", ">= 1"]),
    (["-b"], ["-b", "needs a value"]),
    (["--bogus"], ["unknown option '--bogus'"]),
]
# Options of the ones that run collectives.
OP_TOOLS = [
    (["-o", "nosuchop"], ["-o nosuchop", "not an op"]),
    (["-d", "float128"], ["-d float128", "not a dtype"]),
    (["-c", "2"], ["-c 2", "0 (off) or 1 (on)"]),
    (["--settle-ms", "soon"], ["--settle-ms soon", "milliseconds"]),
    (["--settle-ms", "-1"], ["--settle-ms -1", "milliseconds"]),
]
BENCH_ONLY = [
    (["-r", "0"], ["-r 0", ">= 1"]),
    (["-r", "two"], ["-r two", ">= 1"]),
    (["-r", "1", "-o", "sendrecv"], ["-r 1", "sendrecv needs at least 2 ranks"]),
    (["--shared", "--mode", "mpirun"], ["--shared", "--mode process only"]),
    (["--shared", "--mode", "thread"], ["--shared", "--mode process only"]),
    (["--mode", "mpirun", "-r", "4"], ["-r", "--mode mpirun"]),
    (["--mode", "fork"], ["--mode fork", "process, thread or mpirun"]),
    (["--timing", "fast"], ["--timing fast", "barrier, spin or loop"]),
    (["--timing", "spin", "--mode", "mpirun"], ["--timing spin", "process and thread"]),
]
NOT_FOR_MEMLIMIT = [
    (["-o", "allreduce"], ["-o", "does not apply to collops-memlimit"]),
    (["-c"], ["-c", "does not apply to collops-memlimit"]),
    (["--settle-ms", "0"], ["--settle-ms", "does not apply to collops-memlimit"]),
    (["-r", "2"], ["-r", "does not apply to collops-memlimit"]),
]

CASES = (
    [(t, argv, words) for t in BENCH_TOOLS for argv, words in EVERY_TOOL]
    + [(t, argv, words) for t in BENCH_TOOLS[:2] for argv, words in OP_TOOLS]
    + [("collops-bench", argv, words) for argv, words in BENCH_ONLY]
    + [
        ("collops-mpi-bench", ["-r", "2"], ["-r", "does not apply to collops-mpi-bench"]),
        ("collops-mpi-bench", ["--shared"], ["--shared", "does not apply"]),
        ("collops-mpi-bench", ["--timing", "loop"], ["--timing", "does not apply"]),
        ("collops-mpi-bench", ["-d", "int8", "-e", "4G"], ["-e 4G", "MPI count"]),
    ]
    + [("collops-memlimit", argv, words) for argv, words in NOT_FOR_MEMLIMIT]
)


@pytest.mark.parametrize("name,argv,words", CASES, ids=[f"{t}:{' '.join(a)}" for t, a, _ in CASES])
def test_a_bad_option_exits_2_naming_it(name, argv, words):
    done = run([tool(name)] + argv)
    first = (done.stderr.splitlines() or [""])[0]
    assert done.returncode == USAGE_EXIT, (done.returncode, done.stderr[-2000:])
    assert first.startswith(f"{name}: "), done.stderr
    for w in words:
        assert w in first, (w, first)
    assert done.stdout == "", "nothing may run (no table header) after a bad option"


@pytest.mark.parametrize("name", BENCH_TOOLS)
def test_help_prints_the_usage_on_stdout_and_exits_0(name):
    done = run([tool(name), "--help"])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"usage: {name}"), done.stdout
    for option in ("-b SIZE", "-e SIZE", "-f N", "-w N", "-n N", "--json"):
        assert option in done.stdout
    applies = {
        "-o OP": name != "collops-memlimit",
        "-c [0|1]": name != "collops-memlimit",
        "--settle-ms": name != "collops-memlimit",
        "--mode": name == "collops-bench",
        "--shared": name == "collops-bench",
        "--algorithms": name == "collops-bench",
        "--timing": name == "collops-bench",
    }
    for option, listed in applies.items():
        assert (option in done.stdout) == listed, (option, done.stdout)


def test_algorithms_lists_every_knob_and_runs_nothing():
    done = run([tool("collops-bench"), "--algorithms"])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    for knob in (
        "ALLREDUCE",
        "ALLGATHER",
        "BROADCAST",
        "REDUCESCATTER",
        "ALLTOALL",
        "SENDRECV",
        "BARRIER",
    ):
        assert f"`COLLOPS_ALGO_{knob}`" in done.stdout, (knob, done.stdout)
    assert "| `rsag` |" in done.stdout and "collops-process" not in done.stdout, done.stdout


def test_c_takes_nccl_tests_0_or_1_and_a_bare_c_still_checks():
    bench = tool("collops-bench")
    base = [
        "-r",
        "2",
        "--mode",
        "thread",
        "-b",
        "64",
        "-e",
        "64",
        "-w",
        "0",
        "-n",
        "1",
        "--settle-ms",
        "0",
        "--json",
    ]
    for argv, checked in ((["-c"], True), (["-c", "1"], True), (["-c", "0"], False), ([], False)):
        done = run([bench] + argv + base, env={"COLLOPS_TIMEOUT": "15"})
        assert done.returncode == 0, done.stderr
        assert ('"wrong": 0' in done.stdout) == checked, (argv, done.stdout)
        assert ('"wrong": -1' in done.stdout) == (not checked), (argv, done.stdout)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_every_timing_runs_and_says_which_it_was(mode):
    bench = tool("collops-bench")
    for timing in ("barrier", "spin", "loop"):
        done = run(
            [
                bench,
                "-r",
                "2",
                "--mode",
                mode,
                "-b",
                "4K",
                "-e",
                "4K",
                "-w",
                "1",
                "-n",
                "3",
                "--settle-ms",
                "0",
                "--timing",
                timing,
                "-c",
                "--json",
            ],
            gib=64,
            env={"COLLOPS_TIMEOUT": "15"},
        )  # lccl reserves its shared heaps
        assert done.returncode == 0, done.stderr
        row = done.stdout.strip().splitlines()[-1]
        assert f'"timing": "{timing}"' in row and '"wrong": 0' in row, row


def test_memlimit_reports_a_size_it_cannot_allocate_as_a_failed_row():
    # 512 MiB needs about 2.5 GiB of buffers: under a 1 GiB address-space cap that fails.
    done = run(
        [tool("collops-memlimit"), "-b", "512M", "-e", "512M", "-w", "0", "-n", "1", "--json"],
        gib=1,
    )
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "out of memory" in done.stderr
    rows = done.stdout.splitlines()
    assert len(rows) == 3 and all('"error": "out of memory' in r for r in rows), rows


def mpirun(np, argv):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    env = {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "COLLOPS_JOB_ID": f"bench-options-{os.getpid()}",
        "COLLOPS_TIMEOUT": "15",
    }
    # mpirun's own start-up maps more than a small cap allows: the limit applies to the ranks
    # through the tools' refusal alone, which allocates nothing.
    return subprocess.run(
        ["mpirun", "-np", str(np)] + argv,
        capture_output=True,
        text=True,
        timeout=DEADLINE * 3,
        env=dict(os.environ, **env),
    )


SENDRECV_ALONE = (
    "mpirun -np 1: sendrecv needs at least 2 ranks (each rank sends to the next "
    "one and receives from the previous one, never from itself)"
)


@pytest.mark.parametrize(
    "name,argv", [("collops-mpi-bench", []), ("collops-bench", ["--mode", "mpirun"])]
)
def test_sendrecv_on_one_rank_is_refused_by_both_benchmarks_in_the_same_words(name, argv):
    done = mpirun(1, [tool(name)] + argv + ["-o", "sendrecv", "-b", "64", "-e", "64", "-n", "1"])
    assert done.returncode != 0, done.stdout
    assert f"{name}: {SENDRECV_ALONE}" in done.stderr, done.stderr[-2000:]
    assert "64" not in done.stdout, "no row may be measured"
    # collops-bench -r 1 says the same after naming its own option.
    if name == "collops-bench":
        alone = run([tool(name), "-r", "1", "-o", "sendrecv"])
        assert alone.returncode == USAGE_EXIT
        assert SENDRECV_ALONE.replace("mpirun -np 1", "-r 1") in alone.stderr, alone.stderr


def test_a_bad_option_under_mpirun_is_reported_once():
    done = mpirun(2, [tool("collops-mpi-bench"), "-b", "abc"])
    assert done.returncode != 0
    assert done.stderr.count("collops-mpi-bench: -b abc: not a size") == 1, done.stderr


# bench/compare: (argv, words of the error). None may set up namespaces or write a document.
COMPARE_CASES = [
    (["--ranks", "abc"], ["argument --ranks", "'abc'"]),
    (["--ranks", "0"], ["argument --ranks", "'0'"]),
    (["--ranks", "2,,4"], ["argument --ranks", "empty item"]),
    (["--sizes", "4X"], ["argument --sizes", "'4X'", "not a size"]),
    (["--sizes", "1.5K"], ["argument --sizes", "'1.5K'", "not a size"]),
    (["--sizes", "0"], ["argument --sizes", "'0'"]),
    (["--sizes=-4K"], ["argument --sizes", "'-4K'"]),
    (["--sizes", "1000000G"], ["argument --sizes", "machine's memory"]),
    (["--ops", "nosuchop"], ["argument --ops", "'nosuchop'", "not an op"]),
    (["--ops", "allreduce,"], ["argument --ops", "empty item"]),
    (["--layout", "1x0"], ["argument --layout", "'1x0'"]),
    (["--layout", "2x0"], ["argument --layout", "'2x0'"]),
    (["--layout", "0x2"], ["argument --layout", "'0x2'"]),
    (["--layout", "2by2"], ["argument --layout", "'2by2'"]),
    (["--python", "maybe"], ["argument --python", "'maybe'"]),
]


@pytest.mark.parametrize("argv,words", COMPARE_CASES, ids=[" ".join(a) for a, _ in COMPARE_CASES])
def test_compare_refuses_a_bad_option_before_doing_anything(argv, words, tmp_path):
    docs = tmp_path / "docs"
    # --layout 1 wherever the case is not about --layout: a bug could never reach namespaces.
    extra = [] if "--layout" in argv else ["--layout", "1"]
    done = run(
        [sys.executable, COMPARE]
        + argv
        + extra
        + ["--docs", str(docs), "--build", str(tmp_path / "no-build")]
    )
    assert done.returncode == USAGE_EXIT, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    for w in words:
        assert w in last, (w, last)
    assert not docs.exists(), "nothing may be written after a bad option"


def load_compare():
    loader = importlib.machinery.SourceFileLoader("bench_compare", COMPARE)
    spec = importlib.util.spec_from_loader("bench_compare", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_compare_reads_sizes_as_the_benchmarks_do():
    compare = load_compare()
    assert compare.parse_sizes("256,1k,4K,2m,3M,1g,1G") == [
        256,
        1 << 10,
        4 << 10,
        2 << 20,
        3 << 20,
        1 << 30,
        1 << 30,
    ]
    assert compare.parse_ranks("1,2,4") == [1, 2, 4]
    assert compare.parse_ops("allreduce,sendrecv") == ["allreduce", "sendrecv"]
    assert compare.parse_layouts("1,2x2,3x1") == ["1", (2, 2), (3, 1)]


def test_compare_documents_the_layout_the_benchmarks_use():
    text = load_compare().markdown({}, {}, [], {}, "")
    assert "AllGatherV, ReduceScatterV and AllToAllV use uneven blocks" in text
    assert "allgatherv there is all_to_all_single" in text


@pytest.mark.parametrize(
    "argv,words",
    [(["-r", "0"], "-r 0"), (["-r", "x"], "-r x"), (["-r", "1", "--netns", "a,b"], "--netns a,b")],
)
def test_gloo_worker_refuses_a_bad_rank_count(argv, words):
    pytest.importorskip("torch")
    done = run([sys.executable, GLOO_WORKER] + argv, gib=8)
    assert done.returncode == USAGE_EXIT, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and words in done.stderr, done.stderr
