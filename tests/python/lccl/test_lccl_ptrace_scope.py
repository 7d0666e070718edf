"""lccl's single copy under Yama's ptrace_scope. At scope 1 (Ubuntu's default, inherited by every
container on such a host) the kernel lets a process read another's memory only when it is the
other's ancestor or was named by it, so sibling ranks (torchrun's, mpirun's) are refused
process_vm_readv unless each names its readers, as OpenMPI's vader BTL does. This kernel has no
Yama, so each rank runs with a faked /proc/sys/kernel/yama/ptrace_scope (tmpfs over
/proc/sys/kernel in a mount namespace of its own) and fake_yama.c, preloaded, enforcing what it
says. Needs root, `unshare` and a C compiler; CI has all three.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from rank_harness import communicate_with_ranks
from repo_paths import PRELOAD_DIR, PYTHON_DIR, RANKS_DIR

RANK_SCRIPT = os.path.join(RANKS_DIR, "cross_memory_rank.py")
# Runs "$@" with /proc/sys/kernel replaced by a tmpfs holding only yama/ptrace_scope = $SCOPE
# ("none": no yama directory, as on a kernel without Yama).
FAKE_SCOPE = (
    "mount -t tmpfs fake-sysctl /proc/sys/kernel && "
    'if [ "$SCOPE" != none ]; then mkdir /proc/sys/kernel/yama && '
    'echo "$SCOPE" > /proc/sys/kernel/yama/ptrace_scope; fi && exec "$@"'
)


def _unavailable():
    if os.geteuid() != 0:
        return "needs root to mount in a mount namespace"
    if shutil.which("cc") is None:
        return "needs a C compiler for the fake_yama.c shim"
    try:
        subprocess.run(
            ["unshare", "--mount", "sh", "-c", FAKE_SCOPE, "sh", "true"],
            check=True,
            capture_output=True,
            timeout=30,
            env=dict(os.environ, SCOPE="1"),
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot fake ptrace_scope in a mount namespace here: {error}"
    return None


_UNAVAILABLE = _unavailable()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=str(_UNAVAILABLE))


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    library = tmp_path_factory.mktemp("fake_yama") / "libfake_yama.so"
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            str(library),
            os.path.join(PRELOAD_DIR, "fake_yama.c"),
            "-ldl",
        ],
        check=True,
    )
    return str(library)


def _run(shim, state, scope, world=2, **env_extra):
    """Starts `world` sibling ranks under the faked scope; returns (reports, logs) by rank, each
    log the shim's lines for that rank (see fake_yama.c)."""
    # The default threshold, set: left unset, 3 ranks on 2 CPUs of a machine whose kernel copy
    # is slow would stage everything (cross_memory_policy.h) and never read across processes.
    env = dict(
        os.environ,
        PYTHONPATH=PYTHON_DIR,
        WORLD_SIZE=str(world),
        SCOPE=scope,
        LD_PRELOAD=shim,
        FAKE_YAMA_DIR=str(state),
        COLLOPS_TIMEOUT="60",
        COLLOPS_SHM_CMA_BYTES="16384",
        COLLOPS_JOB_ID=f"yama-{os.getpid()}-{time.monotonic_ns()}",
    )
    env.update(env_extra)
    cmd = ["unshare", "--mount", "sh", "-c", FAKE_SCOPE, "sh", sys.executable, RANK_SCRIPT]
    procs = [
        subprocess.Popen(
            cmd,
            env=dict(env, RANK=str(rank)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    reports = []
    for rank, (code, out, err) in enumerate(communicate_with_ranks(procs)):
        assert code == 0, f"rank {rank} exited {code}:\n{err[-3000:]}"
        reports.append(json.loads(out.splitlines()[-1]))
    logs = []
    for report in reports:
        assert report["all_reduce"] is True and report["all_to_allv"] is True, report
        path = state / f"{report['pid']}.log"
        logs.append(path.read_text().splitlines() if path.exists() else [])
    return reports, logs


def _copied_bytes(log):
    return sum(int(line.split()[2]) for line in log if line.split()[0] in ("read", "write"))


@pytest.mark.parametrize("world", [2, 3])
def test_at_scope_1_every_rank_names_any_ptracer_before_its_peers_read_it(shim, tmp_path, world):
    """Every rank names any process as its ptracer before a peer reads it: otherwise the peers'
    creation probe is refused and all data goes through the shared slots, copied twice."""
    _, logs = _run(shim, tmp_path, "1", world)
    for rank, log in enumerate(logs):
        assert log and log[0] == "ptracer -1", (rank, log[:5])
        assert not [line for line in log if line.startswith("refused")], (rank, log)
        # Beyond the probe's 8-byte words: the 4 MiB AllReduce and the AllToAllV moved by it.
        assert _copied_bytes(log) >= 1 << 20, (rank, log)


@pytest.mark.parametrize("scope", ["none", "0"])
def test_where_peers_may_read_already_no_rank_relaxes_its_scope(shim, tmp_path, scope):
    _, logs = _run(shim, tmp_path, scope)
    for rank, log in enumerate(logs):
        assert not [line for line in log if line.startswith("ptracer")], (rank, log)
        assert _copied_bytes(log) >= 1 << 20, (rank, log)


def test_with_the_single_copy_off_no_rank_relaxes_its_scope(shim, tmp_path):
    """COLLOPS_SHM_CMA_BYTES=0 is the way to keep Yama's rule for the ranks: nothing is read
    across processes, so nobody needs to be named."""
    _, logs = _run(shim, tmp_path, "1", COLLOPS_SHM_CMA_BYTES="0")
    assert logs == [[], []], logs


def test_at_scope_2_no_rank_names_a_ptracer_and_all_is_staged(shim, tmp_path):
    """Scope 2 wants CAP_SYS_PTRACE whatever the tracee says: naming a ptracer would only loosen
    the process for nothing. The probe is refused and every call is staged, still golden."""
    _, logs = _run(shim, tmp_path, "2")
    for rank, log in enumerate(logs):
        assert not [line for line in log if line.startswith("ptracer")], (rank, log)
        assert [line for line in log if line.startswith("refused")], (rank, log)
        assert _copied_bytes(log) == 0, (rank, log)
