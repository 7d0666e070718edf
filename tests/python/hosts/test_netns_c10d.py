"""The c10d engine across 2 simulated hosts x 2 ranks: tests/python/ranks/c10d_engine_rank.py
(every operation through OperationTorch, golden values, on the default gloo group and a
subgroup) as 4 processes, 2 in each network namespace, torch.distributed's TCP store on host 0 and gloo on the
namespaces' eth0.

  - backend "c10d": every op over the gloo group, flat across the hosts;
  - backend "hccl": the auto backend finds torch.distributed usable, exchanges host identities
    over it and runs hierarchically (lccl inside a host, gloo between). Plain lccl cannot cross
    namespaces (test_netns_lccl.py), so a passing job could not have run on lccl alone.

And the "collops" torch.distributed backend itself across the hosts: test_c10d_backend.py's
golden collectives and a random schedule of calls (dist_schedule.py) on a default group of 4
ranks, which must report the hierarchical engine.
"""

import json
import os
import sys

import pytest

import netns_harness as nh
from repo_paths import RANKS_DIR

REASON = nh.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"simulated hosts: {REASON}")
RANK_SCRIPT = os.path.join(RANKS_DIR, "c10d_engine_rank.py")


@pytest.fixture(scope="module")
def hosts():
    with nh.SimulatedHosts(2) as h:
        yield h


def job_env(hosts):
    env = {k: v for k, v in os.environ.items() if k != "COLLOPS_JOB_ID"}
    env.update(
        GLOO_SOCKET_IFNAME=nh.IFNAME,
        COLLOPS_TIMEOUT=env.get("COLLOPS_TIMEOUT", "60"),
        PYTHONPATH=os.pathsep.join(
            filter(None, [os.path.join(nh.REPO, "python"), env.get("PYTHONPATH")])
        ),
    )
    return env


def run_job(hosts, backend, port):
    env = job_env(hosts)
    env.update(
        MASTER_ADDR=hosts.addr(0),
        MASTER_PORT=str(port),
        WORLD_SIZE="4",
        COLLOPS_TEST_BACKEND=backend,
    )
    # Each rank gets RANK through `env` (the namespaces inherit the environment).
    jobs = [(r // 2, ["env", f"RANK={r}", sys.executable, RANK_SCRIPT]) for r in range(4)]
    results = hosts.run_all(jobs, env=env, timeout=300)
    failures = [
        f"--- rank {r} (exit {code}):\n{out[-3000:]}{err[-3000:]}"
        for r, (code, out, err) in enumerate(results)
        if code != 0 or f"rank {r}: ALL PASS" not in out
    ]
    assert not failures, "\n".join(failures)
    return [out for _, out, _ in results]


def test_c10d_engine_every_op_across_hosts(hosts):
    outs = run_job(hosts, "c10d", 29510)
    assert all("all_to_allv domain '': PASS" in out for out in outs)


def test_hccl_over_torch_distributed_across_hosts(hosts):
    outs = run_job(hosts, "hccl", 29520)
    assert all("all_reduce domain '': PASS" in out for out in outs)
    assert all("large_all_reduce: PASS" in out for out in outs)
    assert all("large_all_to_allv: PASS" in out for out in outs)


def test_collops_torch_backend_runs_hierarchically_across_hosts(hosts):
    probe = os.path.join(RANKS_DIR, "rank_probe.py")
    jobs = [
        (r // 2, [sys.executable, probe, "collops", str(r), "4", hosts.addr(0), "29530"])
        for r in range(4)
    ]
    rows = []
    for r, (code, out, err) in enumerate(hosts.run_all(jobs, env=job_env(hosts), timeout=300)):
        lines = out.strip().splitlines()
        assert code == 0 and lines, f"rank {r} (exit {code}): {out[-3000:]}{err[-3000:]}"
        rows.append(json.loads(lines[-1]))
    assert [row.get("engine") for row in rows] == ["hccl(lccl+c10d)"] * 4, rows
    assert [row.get("schedule_steps") for row in rows] == [40] * 4, rows


def test_torchrun_across_hosts_restarts_a_job_whose_rank_died(hosts, tmp_path):
    # One torchrun agent per host (static rendezvous on host 0's address, as multi-node jobs
    # start), both with one restart: rank 1 dies in the first attempt, every rank's agent restarts
    # its ranks, and the new attempt's group must not take the dead one's token from the Store.
    job = os.path.join(RANKS_DIR, "restarted_job.py")
    jobs = [
        (
            i,
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "2",
                "--node-rank",
                str(i),
                "--master-addr",
                hosts.addr(0),
                "--master-port",
                "29540",
                "--max-restarts",
                "1",
                # else each agent leaves a torchelastic_* directory in /tmp
                "--log-dir",
                str(tmp_path / f"host{i}"),
                job,
            ],
        )
        for i in range(2)
    ]
    env = dict(job_env(hosts), COLLOPS_TIMEOUT="30")
    results = hosts.run_all(jobs, env=env, timeout=300)
    for i, (code, out, err) in enumerate(results):
        assert code == 0, f"host {i} (exit {code}): {out[-3000:]}{err[-3000:]}"
    out = "".join(out for _, out, _ in results)
    for rank in range(4):
        assert f"rank {rank} attempt 1 done on hccl(lccl+c10d)" in out, out
