"""lccl stays inside one simulated host: ranks in different network namespaces never meet.

lccl's rendezvous is an abstract unix socket, which belongs to a network namespace, so two
processes with the same COLLOPS_JOB_ID and commDomain in two namespaces must not find each other
(they time out naming the missing rank), while the same job inside one namespace succeeds. This
is what makes a namespace "its own host" for backend "hccl" (HostIdentity includes the netns).
"""

import json
import os
import sys
import time

import pytest

import netns_harness as nh
from repo_paths import RANKS_DIR

REASON = nh.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"simulated hosts: {REASON}")
PROBE = os.path.join(RANKS_DIR, "rank_probe.py")


@pytest.fixture(scope="module")
def hosts():
    with nh.SimulatedHosts(2) as h:
        yield h


def run_lccl(hosts, host_of_rank, timeout_s):
    job = f"netns-lccl-{os.getpid()}-{time.time_ns()}"
    env = dict(
        os.environ,
        COLLOPS_JOB_ID=job,
        COLLOPS_TIMEOUT=str(timeout_s),
        PYTHONPATH=os.pathsep.join(
            filter(None, [os.path.join(nh.REPO, "python"), os.environ.get("PYTHONPATH")])
        ),
    )
    jobs = [
        (h, [sys.executable, PROBE, "lccl", str(r), str(len(host_of_rank)), "netns-domain"])
        for r, h in enumerate(host_of_rank)
    ]
    rows = []
    for rank, (code, out, err) in enumerate(hosts.run_all(jobs, env=env, timeout=120)):
        lines = out.strip().splitlines()
        assert code is not None and lines, f"rank {rank} (exit {code}): {out}{err[-2000:]}"
        rows.append((code, json.loads(lines[-1])))
    return rows


def test_lccl_ranks_in_two_hosts_time_out_naming_the_missing_rank(hosts):
    t0 = time.monotonic()
    rows = run_lccl(hosts, [0, 1], timeout_s=3)
    for rank, (code, row) in enumerate(rows):
        assert code == 1 and "error" in row, row
        assert "ERROR_TIMEOUT" in row["error"], row["error"]
        assert f"rank {1 - rank} " in row["error"] or f"rank {1 - rank}," in row["error"], (
            f"rank {rank} must name rank {1 - rank}: {row['error']}"
        )
    assert rows[0][1]["netns"] != rows[1][1]["netns"]
    assert time.monotonic() - t0 < 60


def test_lccl_ranks_in_one_host_succeed(hosts):
    for host in (0, 1):
        rows = run_lccl(hosts, [host, host], timeout_s=30)
        for code, row in rows:
            assert code == 0 and row["result"] == [3.0] * 4, row
            assert row["hostname"] == hosts.names[host]
