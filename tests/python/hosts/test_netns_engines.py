"""The golden op suite across 2 simulated hosts x 2 ranks, on the engines that cross hosts.

collops_mpi_tests' Engine.* tests (tests/mpi: every operation, every suite dtype, golden values;
Send/Recv/SendRecv with one rank refusing its tensors, tests/cpp/p2p_refusal_suite.h; a rank
refusing a domain's first call, tests/cpp/first_call_failure_suite.h; then a random schedule of
calls, tests/cpp/random_schedule.h) are started by mpirun into two
network namespaces (netns_harness.py, tests/netns/rsh_agent.sh):
  - backend "mpi": flat OpenMPI (vader inside a host, TCP between);
  - backend "hccl": hierarchical, hosts found by exchanging HostIdentity over MPI;
  - backend "hccl" with a rank table describing the layout;
and every rank table rule once more across hosts (each rank reports ERROR_INVALID_PARAM naming
the problem), including a table whose servers contradict the real hosts.

That "hccl" really ran hierarchically: plain lccl cannot cross namespaces (test_netns_lccl.py),
so a passing suite already rules it out; and collops-bench --mode mpirun, started the same way,
reports its communicator's BackendName(), which must be hccl(lccl+mpi).
"""

import json
import os
import re
import subprocess

import pytest

import netns_harness as nh

REASON = nh.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"simulated hosts: {REASON}")
BUILD = os.environ.get("COLLOPS_BUILD_DIR", os.path.join(nh.REPO, "build"))
SUITE = os.path.join(BUILD, "tests", "mpi", "collops_mpi_tests")
BENCH = os.path.join(BUILD, "bench", "collops-bench")


def built(path, target):
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built (ninja -C {BUILD} {target})")
    return path


@pytest.fixture(scope="module")
def hosts():
    with nh.SimulatedHosts(2) as h:
        yield h


def mpirun(hosts, argv, env=(), timeout=240, collops_timeout=20):
    """argv on 2 ranks in each host; returns (returncode, output with [job,rank] line tags).
    A job still running at the deadline is killed and returns None with what it printed."""
    cmd = ["mpirun", "-np", "4", "--tag-output"] + nh.mpirun_args(hosts, 2)
    # A lost peer fails an op in COLLOPS_TIMEOUT seconds, so a broken run reports itself well
    # before the deadline.
    for kv in [f"COLLOPS_TIMEOUT={collops_timeout}", *env]:
        cmd += ["-x", kv]
    try:
        done = subprocess.run(
            cmd + argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, **hosts.env()),
        )
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(
            errors="replace"
        )
        return None, text + f"\n(mpirun killed after the {timeout} s deadline)"
    return done.returncode, done.stdout + done.stderr


def run_suite(hosts, backend, table=None, collops_timeout=20):
    env = [f"COLLOPS_TEST_BACKEND={backend}"]
    if table is not None:
        env.append(f"COLLOPS_TEST_RANK_TABLE={table}")
    return mpirun(
        hosts,
        [built(SUITE, "collops_mpi_tests"), "--gtest_filter=Engine.*", "--gtest_color=no"],
        env,
        collops_timeout=collops_timeout,
    )


def assert_suite_passed(code, out):
    assert code == 0, out[-6000:]
    # One "[  PASSED  ] 4 tests." per rank: every rank ran the suite, the point-to-point refusals,
    # the first-call refusals and the schedule.
    passed = {int(r) for r in re.findall(r"\[\d+,(\d)\]<stdout>:\[  PASSED  \] 4 tests\.", out)}
    assert passed == {0, 1, 2, 3}, out[-6000:]


def rank_table(hosts, servers):
    """An HCCL rank table: servers = [(server_id, [rank, ...]), ...]."""
    return {
        "version": "1.0",
        "server_count": str(len(servers)),
        "status": "completed",
        "server_list": [
            {
                "server_id": sid,
                "device": [{"device_id": str(d), "rank_id": str(r)} for d, r in enumerate(ranks)],
            }
            for sid, ranks in servers
        ],
    }


def test_op_suite_on_mpi_across_hosts(hosts):
    assert_suite_passed(*run_suite(hosts, "mpi"))


def test_op_suite_on_hierarchical_hccl_across_hosts(hosts):
    assert_suite_passed(*run_suite(hosts, "hccl"))


def test_op_suite_on_hccl_with_a_rank_table(hosts, tmp_path):
    table = tmp_path / "rank_table.json"
    table.write_text(
        json.dumps(rank_table(hosts, [(hosts.names[0], [0, 1]), (hosts.names[1], [2, 3])]))
    )
    assert_suite_passed(*run_suite(hosts, "hccl", str(table)))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_hccl_across_hosts_is_the_hierarchical_communicator(hosts, dtype):
    """Also the golden check of AllReduce at 16 MiB on the mpi engine: each rail swaps halves of
    its 8 MiB block (float16: float32 blocks of 16 MiB) instead of MPI_Allreduce."""
    code, out = mpirun(
        hosts,
        [
            built(BENCH, "collops-bench"),
            "--mode",
            "mpirun",
            "-o",
            "allreduce",
            "-d",
            dtype,
            "-b",
            "64K",
            "-e",
            "16M",
            "-f",
            "256",
            "-w",
            "1",
            "-n",
            "2",
            "-c",
            "--json",
        ],
    )
    assert code == 0, out[-4000:]
    rows = [json.loads(m) for m in re.findall(r"\[\d+,0\]<stdout>:(\{.*\})", out)]
    assert [row["bytes"] for row in rows] == [64 << 10, 16 << 20], out[-4000:]
    for row in rows:
        assert row["backend"] == "hccl(lccl+mpi)" and row["wrong"] == 0 and not row["error"], row


def test_hierarchical_alltoallv_across_hosts_on_both_paths(hosts):
    """Golden AllToAllV on the mpi engine: 4 KiB per rank is aggregated at the leaders; 128 KiB
    and 4 MiB go straight from rank to rank, the cross-host pieces started before the host's part
    and finished after it."""
    code, out = mpirun(
        hosts,
        [
            built(BENCH, "collops-bench"),
            "--mode",
            "mpirun",
            "-o",
            "alltoallv",
            "-b",
            "4K",
            "-e",
            "4M",
            "-f",
            "32",
            "-w",
            "1",
            "-n",
            "2",
            "-c",
            "--json",
        ],
    )
    assert code == 0, out[-4000:]
    rows = [json.loads(m) for m in re.findall(r"\[\d+,0\]<stdout>:(\{.*\})", out)]
    assert [row["bytes"] for row in rows] == [4 << 10, 128 << 10, 4 << 20], out[-4000:]
    for row in rows:
        assert row["backend"] == "hccl(lccl+mpi)" and row["wrong"] == 0 and not row["error"], row


BAD_TABLES = {
    # name: (servers or raw text, words the error must contain)
    "servers_contradict_hosts": (
        [("a", [0, 2]), ("b", [1, 3])],
        ["ranks 0 and 2", "different hosts"],
    ),
    "missing_rank": ([("a", [0, 1]), ("b", [2])], ["describes 3 ranks", "rankSize = 4"]),
    "duplicate_rank_id": ([("a", [0, 1]), ("b", [1, 3])], ["rank_id 1 appears twice"]),
    "rank_outside_rank_size": ([("a", [0, 1]), ("b", [2, 7])], ["rank_id 7", "outside"]),
    "too_many_ranks": ([("a", [0, 1, 2]), ("b", [3, 4])], ["describes 5 ranks"]),
    "malformed_json": ('{"version": "1.0", "server_list": [', ["malformed JSON"]),
    "unreadable_file": (None, ["cannot be read"]),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_bad_rank_table_fails_on_every_rank_across_hosts(hosts, tmp_path, case):
    content, needles = BAD_TABLES[case]
    path = tmp_path / f"{case}.json"
    if isinstance(content, list):
        path.write_text(json.dumps(rank_table(hosts, content)))
    elif content is not None:
        path.write_text(content)
    # Every rank refuses the table as it creates each op, once the ranks have told each other their
    # hosts (a quick exchange); servers that contradict the hosts leave some ranks blocked in a
    # later creation, which a short COLLOPS_TIMEOUT ends sooner without changing what is checked.
    code, out = run_suite(hosts, "hccl", str(path), collops_timeout=5)
    assert code != 0, out[-4000:]
    for rank in range(4):
        lines = [
            line
            for line in out.splitlines()
            if line.startswith("[") and re.match(rf"\[\d+,{rank}\]", line)
        ]
        text = "\n".join(lines)
        assert "ERROR_INVALID_PARAM" in text and all(n in text for n in needles), (
            f"rank {rank} does not report {needles}:\n{text[-3000:]}"
        )
