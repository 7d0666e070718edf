"""Simulated hosts (network namespaces on a bridge, netns_harness.py) behave as separate hosts.

The harness itself (addresses, isolation, teardown on failure, stale clean-up, two runs at once),
then the engines the cross-host tests rely on: mpirun launching into the namespaces through
tests/netns/rsh_agent.sh (2 ranks per host, shared memory inside a host, TCP between hosts), and
torch.distributed gloo across them. Skips, saying why, when not root or without `ip netns`.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import netns_harness as nh
from repo_paths import HARNESS_DIR, RANKS_DIR

REASON = nh.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"simulated hosts: {REASON}")
PROBE = os.path.join(RANKS_DIR, "rank_probe.py")


@pytest.fixture
def hosts():
    with nh.SimulatedHosts(2) as h:
        yield h


def in_host(hosts, i, code):
    """Runs Python `code` in host i; returns its stdout (asserting success)."""
    done = hosts.run(
        i, [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_each_host_has_its_own_namespace_address_and_hostname(hosts):
    seen = []
    for i in range(2):
        out = in_host(
            hosts,
            i,
            """
            import os, socket, subprocess
            print(os.stat("/proc/self/ns/net").st_ino, socket.gethostname())
            print(subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout)
            print("ROUTES", subprocess.run(["ip", "route"], capture_output=True, text=True).stdout)
        """,
        )
        inode, hostname = out.split()[:2]
        seen.append(inode)
        assert hostname == hosts.names[i]
        assert f"inet {hosts.addr(i)}/24" in out and "lo " in out
        routes = out.split("ROUTES", 1)[1]
        assert "default" not in routes, "a simulated host must not reach beyond the bridge"
    assert seen[0] != seen[1]
    assert str(os.stat("/proc/self/ns/net").st_ino) not in seen


def test_hosts_reach_each_other_over_the_bridge(hosts):
    server = hosts.popen(
        1,
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import socket
        s = socket.create_server(("{hosts.addr(1)}", 29400))
        print("listening", flush=True)
        c, peer = s.accept()
        c.sendall(peer[0].encode())
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == "listening"
        out = in_host(
            hosts,
            0,
            f"""
            import socket
            c = socket.create_connection(("{hosts.addr(1)}", 29400), timeout=10)
            print(c.recv(100).decode())
        """,
        )
        assert out.strip() == hosts.addr(0)
    finally:
        server.kill()
        server.wait()


def test_abstract_unix_sockets_are_per_host(hosts):
    """lccl's rendezvous is an abstract unix socket: bound in h0, invisible from h1."""
    name = f"collops-netns-test-{os.getpid()}"
    server = hosts.popen(
        0,
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import socket, time
        s = socket.socket(socket.AF_UNIX)
        s.bind("\\0{name}")
        s.listen()
        print("bound", flush=True)
        time.sleep(30)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == "bound"
        probe = f"""
            import socket
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect("\\0{name}")
                print("connected")
            except OSError as e:
                print("refused", e.errno)
        """
        assert in_host(hosts, 0, probe).startswith("connected")
        assert in_host(hosts, 1, probe).startswith("refused")
    finally:
        server.kill()
        server.wait()


def test_teardown_runs_on_failure_and_removes_everything():
    with pytest.raises(KeyError):
        with nh.SimulatedHosts(2) as h:
            names, bridge = list(h.names), h.bridge
            sleeper = h.popen(0, ["sleep", "300"])
            raise KeyError("boom")
    assert not set(names) & set(nh.list_namespaces())
    assert not os.path.exists(f"/sys/class/net/{bridge}")
    assert sleeper.wait(timeout=10) == -9  # what still ran in a host was killed


def test_stale_namespaces_of_a_dead_run_are_cleaned_up():
    dead = subprocess.Popen(["true"])
    dead.wait()
    ns, bridge = f"collops-{dead.pid}-h0", f"colbr{dead.pid}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    nh.cleanup_stale()
    # (A concurrent run's own clean-up may have been first: then they are gone all the same.)
    assert ns not in nh.list_namespaces()
    assert not os.path.exists(f"/sys/class/net/{bridge}")


def test_two_runs_at_once_get_distinct_names_and_subnets(hosts):
    """As two pytest workers would: a second process brings up its own hosts while ours are up."""
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {HARNESS_DIR!r})
        import netns_harness as nh
        with nh.SimulatedHosts(2) as h:
            r = h.run(0, [sys.executable, "-c",
                          "import socket; socket.create_connection(('{hosts.addr(1)}', 1), 3)"],
                      capture_output=True, text=True)
            print(json.dumps({{"names": h.names, "subnet": h.subnet, "bridge": h.bridge,
                              "reach_other_run": r.returncode == 0, "err": r.stderr[-200:]}}))
    """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode == 0, other.stderr
    got = json.loads(other.stdout)
    assert got["subnet"] != hosts.subnet and got["bridge"] != hosts.bridge
    assert not set(got["names"]) & set(hosts.names)
    assert not got["reach_other_run"]
    assert "unreachable" in got["err"].lower(), got["err"]
    assert not set(got["names"]) & set(nh.list_namespaces())  # and it cleaned up after itself


# --- OpenMPI across the hosts ---------------------------------------------------------------

WHERE_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  struct stat st;
  stat("/proc/self/ns/net", &st);
  char host[256];
  gethostname(host, sizeof host);
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  const char* local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  printf("rank %d size %d netns %lu host %s sum %ld local_size %s\n", rank, size,
         (unsigned long)st.st_ino, host, sum, local_size ? local_size : "unset");
  MPI_Finalize();
  return 0;
}
"""


@pytest.fixture(scope="module")
def where_binary(tmp_path_factory):
    if shutil.which("mpicc") is None or shutil.which("mpirun") is None:
        pytest.skip("needs OpenMPI's mpicc and mpirun")
    d = tmp_path_factory.mktemp("mpi")
    (d / "where.c").write_text(WHERE_C)
    subprocess.run(["mpicc", "-O1", "-o", str(d / "where"), str(d / "where.c")], check=True)
    return str(d / "where")


def mpirun(hosts, binary, btl="self,vader,tcp", extra=()):
    cmd = ["mpirun", "-np", "4"] + nh.mpirun_args(hosts, 2, btl) + list(extra) + [binary]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, **hosts.env())
    )


def test_mpirun_puts_two_ranks_in_each_host(hosts, where_binary):
    done = mpirun(hosts, where_binary)
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = {}
    for m in re.finditer(
        r"rank (\d) size 4 netns (\d+) host (\S+) sum (\d+) local_size (\S+)", done.stdout
    ):
        ranks[int(m.group(1))] = (m.group(2), m.group(3), int(m.group(4)), m.group(5))
    assert sorted(ranks) == [0, 1, 2, 3], done.stdout
    assert all(r[2] == 10 for r in ranks.values())
    # What backend "hccl" reads to know the job spans hosts (WORLD_SIZE 4 != LOCAL_SIZE 2).
    assert all(r[3] == "2" for r in ranks.values()), ranks
    # --host A:2,B:2 fills A first: ranks 0,1 in host 0, ranks 2,3 in host 1.
    assert [ranks[r][1] for r in range(4)] == [hosts.names[0]] * 2 + [hosts.names[1]] * 2
    assert ranks[0][0] == ranks[1][0] != ranks[2][0] == ranks[3][0]


def test_openmpi_uses_shared_memory_inside_a_host_and_tcp_between(hosts, where_binary):
    done = mpirun(hosts, where_binary, extra=["--mca", "btl_base_verbose", "100"])
    assert done.returncode == 0, done.stdout + done.stderr
    # OpenMPI names a node by its --host entry or by the hostname its orted reported.
    host_of_node = {name: i for i in range(2) for name in (hosts.addr(i), hosts.names[i])}
    used = re.findall(
        r"\[([\w.-]+):\d+\] mca: bml: Using (\w+) btl for send to "
        r"\[\[\d+,\d+\],(\d)\] on node (\S+)",
        done.stdout + done.stderr,
    )
    assert used, done.stderr[-3000:]
    for sender, btl, peer, node in used:
        assert host_of_node[node] == int(peer) // 2, (sender, peer, node)
        same_host = host_of_node[sender] == host_of_node[node]
        # ("self" is a rank's path to itself.)
        assert btl in (("vader", "self") if same_host else ("tcp",)), (sender, btl, peer, node)
    assert {u[1] for u in used} >= {"vader", "tcp"}


def test_without_tcp_the_hosts_cannot_reach_each_other(hosts, where_binary):
    """Shared memory alone cannot cross hosts: the namespaces really are separate to OpenMPI."""
    done = mpirun(hosts, where_binary, btl="self,vader")
    assert done.returncode != 0
    assert "unreachable" in (done.stdout + done.stderr).lower()


# --- torch gloo across the hosts -------------------------------------------------------------


def test_gloo_all_reduce_across_hosts(hosts):
    env = dict(os.environ, GLOO_SOCKET_IFNAME=nh.IFNAME)
    jobs = [
        (r // 2, [sys.executable, PROBE, "gloo", str(r), "4", hosts.addr(0), "29500"])
        for r in range(4)
    ]
    results = hosts.run_all(jobs, env=env, timeout=120)
    rows = []
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"rank {rank}: {out}{err[-2000:]}"
        rows.append(json.loads(out.strip().splitlines()[-1]))
    for rank, row in enumerate(rows):
        assert row["result"] == [10.0] * 4
        assert row["hostname"] == hosts.names[rank // 2]
        assert row["netns_of_rank"] == [rows[r]["netns"] for r in range(4)]
    assert rows[0]["netns"] == rows[1]["netns"] != rows[2]["netns"] == rows[3]["netns"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_tears_down(sig):
    """Ctrl-C (KeyboardInterrupt) or SIGTERM while the hosts are up still removes them."""
    # A suite started in the background (`cmd &`, nohup, some CI runners) inherits SIGINT ignored,
    # and Python then installs no KeyboardInterrupt handler: the child sets it, as a terminal would.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import signal, sys, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {HARNESS_DIR!r})
        import netns_harness as nh
        with nh.SimulatedHosts(2) as h:
            print(",".join(h.names + [h.bridge]), flush=True)
            time.sleep(60)
    """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    names = child.stdout.readline().strip().split(",")
    assert len(names) == 3, child.stderr.read()
    assert set(names[:2]) <= set(nh.list_namespaces())
    child.send_signal(sig)
    child.wait(timeout=30)
    assert not set(names[:2]) & set(nh.list_namespaces())
    assert not os.path.exists(f"/sys/class/net/{names[2]}")


def test_rsh_agent_finds_the_namespace_of_an_address(hosts):
    """Without COLLOPS_NETNS_HOSTS the agent looks the address up among collops-* namespaces;
    an address no namespace owns is an error, never a command run outside the hosts."""
    env = {k: v for k, v in os.environ.items() if k != "COLLOPS_NETNS_HOSTS"}
    done = subprocess.run(
        [nh.RSH_AGENT, hosts.addr(1), "hostname;", "readlink", "/proc/self/ns/net"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == hosts.names[1]
    done = subprocess.run(
        [nh.RSH_AGENT, "10.231.250.250", "true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 255 and "no network namespace" in done.stderr
