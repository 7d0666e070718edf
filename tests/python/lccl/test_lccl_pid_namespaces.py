"""lccl ranks in different pid namespaces of one host: containers that share the host's network
(Kubernetes hostNetwork pods, `docker run --network host`) but not its process ids. The ranks
meet through abstract unix sockets as usual, but a pid number names a rank only in its own
namespace; liveness goes by pidfds that rank 0 hands every rank. Needs root and `unshare`; CI
runs as root.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from rank_harness import communicate_with_ranks
from repo_paths import PYTHON_DIR, RANKS_DIR

RANK_SCRIPT = os.path.join(RANKS_DIR, "pid_namespace_rank.py")
IN_OWN_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc"]


def _namespaces_available():
    if os.geteuid() != 0:
        return "needs root to create pid namespaces"
    try:
        subprocess.run(IN_OWN_NAMESPACE + ["true"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot create a pid namespace here: {error}"
    return None


_UNAVAILABLE = _namespaces_available()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=str(_UNAVAILABLE))


def _run(own_namespace, scenario, victim=-1):
    """Starts one interpreter per rank (own_namespace[r]: in a pid namespace of its own) and
    returns their reports by rank."""
    world = len(own_namespace)
    env = dict(
        os.environ,
        PYTHONPATH=PYTHON_DIR,
        WORLD_SIZE=str(world),
        SCENARIO=scenario,
        VICTIM=str(victim),
        COLLOPS_TIMEOUT="60",
        COLLOPS_JOB_ID=f"pidns-{os.getpid()}-{time.monotonic_ns()}",
    )
    procs = []
    for rank, isolated in enumerate(own_namespace):
        cmd = (IN_OWN_NAMESPACE if isolated else []) + [sys.executable, RANK_SCRIPT]
        procs.append(
            subprocess.Popen(
                cmd,
                env=dict(env, RANK=str(rank)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    reports = []
    for rank, (code, out, err) in enumerate(communicate_with_ranks(procs)):
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert lines, f"rank {rank} (exit {code}) reported nothing:\n{err[-3000:]}"
        # The victim exits 17 on purpose; every other rank must end cleanly after its report.
        expected = 17 if rank == victim else 0
        assert code == expected, f"rank {rank} exited {code}:\n{err[-3000:]}"
        reports.append(json.loads(lines[-1]))
    return reports


LAYOUTS = {
    "rank 1 contained": [False, True],
    "rank 0 contained": [True, False],
    "each rank contained": [True, True],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_slow_rank_in_another_pid_namespace_is_waited_for(layout):
    """A rank waits for a slow peer it cannot see by pid: it watches the pidfd rank 0 handed out,
    since the peer's pid names nobody in this namespace and would make it look dead."""
    reports = _run(LAYOUTS[layout], "slow")
    for report in reports:
        assert report["first"] is True, report
        assert report["second"] is True, report
    assert reports[1]["seconds"] >= 2.5, reports  # it really waited for rank 0


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_rank_dying_in_another_pid_namespace_is_reported_as_lost(layout):
    victim = 0 if LAYOUTS[layout][0] else 1  # the contained one (rank 0 when both are)
    reports = _run(LAYOUTS[layout], "dies", victim)
    survivor = reports[1 - victim]
    assert survivor["first"] is True, survivor
    assert "ERROR_PEER_LOST" in survivor["second"], survivor
    assert f"rank {victim} " in survivor["second"], survivor
    assert survivor["seconds"] < 15, survivor  # detected, not the 60 s timeout
    assert "pid 0" not in survivor["second"], survivor  # a rank it cannot see has no number
