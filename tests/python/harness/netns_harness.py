"""Simulated hosts on one machine: network namespaces joined by a bridge.

Each simulated host is a network namespace with loopback up and one interface, ``eth0``, whose
other end (a veth) is enslaved to a bridge in the root namespace::

    collops-<pid>-h0  eth0 10.231.K.1/24 --veth-- colv<pid>h0 --+
    collops-<pid>-h1  eth0 10.231.K.2/24 --veth-- colv<pid>h1 --+-- bridge colbr<pid>
    ...                                                           10.231.K.254/24 (root namespace)

A namespace is "a host" as collops and OpenMPI see it: its own loopback, its own abstract unix
sockets (so lccl's rendezvous cannot reach a rank in another namespace), its own addresses.
Processes in it still share the file system, /dev/shm and the kernel with everything else. The
bridge address is what lets mpirun (root namespace) talk to the orteds it starts in the hosts.
No namespace gets a default route: nothing in them can reach any address outside 10.231.K.0/24.

Names carry the creating process' pid, so a crashed earlier run cannot collide with this one;
:func:`cleanup_stale` (called by every :class:`SimulatedHosts` start) removes namespaces and
bridges whose creator is dead. K is 0 unless another live run holds it (an exclusive lock on
/run/collops-netns/subnet-K.lock for as long as the hosts exist), then the next free one: two
pytest workers at once get 10.231.0.x and 10.231.1.x and never share a bridge or an address.

Use it as a context manager (teardown also runs on failures and KeyboardInterrupt; SIGTERM is
turned into SystemExit while it is up), or from the shell::

    python3 tests/python/harness/netns_harness.py check    # prints why it cannot run, exit 1
    python3 tests/python/harness/netns_harness.py cleanup  # removes stale collops-* namespaces
    python3 tests/python/harness/netns_harness.py shell 2  # 2 hosts, a shell with the env

Every command started in host i goes through :meth:`SimulatedHosts.prefix`: ``ip netns exec
<ns>`` plus ``unshare --uts`` with the hostname ``<ns>``, so each host also has its own hostname
(OpenMPI names nodes and its session directories by hostname). tests/netns/rsh_agent.sh does the
same for mpirun, finding the namespace of an address through COLLOPS_NETNS_HOSTS (:meth:`env`).
"""

import contextlib
import fcntl
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from repo_paths import REPO

RSH_AGENT = os.path.join(REPO, "tests", "netns", "rsh_agent.sh")
NS_PREFIX = "collops-"
BRIDGE_PREFIX = "colbr"
VETH_PREFIX = "colv"
IFNAME = "eth0"
LOCK_DIR = "/run/collops-netns"
MAX_SUBNETS = 16
_NS_RE = re.compile(r"^collops-(\d+)-h(\d+)$")
_BRIDGE_RE = re.compile(r"^colbr(\d+)$")


class NetnsError(RuntimeError):
    """An `ip` command failed; the message has the command and its stderr."""


def _ip(*args, check=True):
    p = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.lru_cache(maxsize=None)
def unavailable_reason():
    """None when namespaces can be made here, else why not (for pytest.skip). Probed once per
    process (each test module asks at import)."""
    if os.geteuid() != 0:
        return "needs root: creates network namespaces, a bridge and veth pairs"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` (not found on PATH)"
    if shutil.which("unshare") is None:
        return "needs util-linux's `unshare` (not found on PATH)"
    probe = f"{NS_PREFIX}{os.getpid()}-probe"
    p = _ip("netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"`ip netns add` does not work here: {p.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def list_namespaces():
    p = _ip("netns", "list", check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def _kill_namespace_processes(ns):
    """SIGKILLs what still runs in `ns` (only our own namespaces get here)."""
    p = _ip("netns", "pids", ns, check=False)
    for pid in p.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def cleanup_stale():
    """Removes collops-<pid>-h<i> namespaces and colbr<pid> bridges whose <pid> is dead.

    Returns the names removed. A namespace whose creator is alive belongs to a concurrent run
    and is left alone. (The probe namespace of unavailable_reason matches collops-<pid>-probe.)
    """
    removed = []
    for ns in list_namespaces():
        m = _NS_RE.match(ns) or re.match(r"^collops-(\d+)-probe$", ns)
        if m and not _pid_alive(int(m.group(1))):
            _kill_namespace_processes(ns)
            _ip("netns", "del", ns, check=False)
            removed.append(ns)
    links = _ip("-o", "link", "show", "type", "bridge", check=False).stdout
    for name in re.findall(r"^\d+: ([^:@]+)", links, re.M):
        m = _BRIDGE_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("link", "del", name, check=False)
            removed.append(name)
    return removed


class SimulatedHosts:
    """`hosts` network namespaces on one bridge; a context manager that always tears down."""

    def __init__(self, hosts=2):
        if hosts < 1 or hosts > 200:
            raise ValueError(f"hosts must be in 1..200, got {hosts}")
        self.count = hosts
        pid = os.getpid()
        self.tag = pid
        self.names = [f"{NS_PREFIX}{pid}-h{i}" for i in range(hosts)]
        self.bridge = f"{BRIDGE_PREFIX}{pid}"
        self.subnet = None  # K of 10.231.K.0/24, chosen under the lock in up()
        self._lock = None
        self._up = False
        self._old_sigterm = None

    # --- addresses and commands -------------------------------------------------------------
    def addr(self, i):
        """Address of host i (10.231.K.i+1)."""
        return f"10.231.{self.subnet}.{i + 1}"

    @property
    def bridge_addr(self):
        return f"10.231.{self.subnet}.254"

    @property
    def cidr(self):
        """The hosts' network, for btl_tcp_if_include / oob_tcp_if_include."""
        return f"10.231.{self.subnet}.0/24"

    def prefix(self, i):
        """argv prefix that runs a command in host i (its namespace and its own hostname)."""
        return [
            "ip",
            "netns",
            "exec",
            self.names[i],
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.names[i],
        ]

    def env(self):
        """Environment for tests/netns/rsh_agent.sh: which namespace each address is."""
        hosts = ",".join(f"{self.addr(i)}={self.names[i]}" for i in range(self.count))
        return {"COLLOPS_NETNS_HOSTS": hosts}

    def popen(self, i, argv, **kwargs):
        return subprocess.Popen(self.prefix(i) + list(argv), **kwargs)

    def run(self, i, argv, **kwargs):
        return subprocess.run(self.prefix(i) + list(argv), **kwargs)

    def run_all(self, jobs, env=None, timeout=120):
        """Runs every (host index, argv) of `jobs` at once; returns their (returncode, stdout,
        stderr) in order. A job still running at the deadline is killed and gets returncode None,
        so a hang fails the caller's assertions instead of the whole session."""
        procs = [
            self.popen(i, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i, argv in jobs
        ]
        deadline = time.monotonic() + timeout
        out = []
        for p in procs:
            try:
                stdout, stderr = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
                out.append((p.returncode, stdout, stderr))
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, stderr = p.communicate()
                out.append((None, stdout, stderr + f"\n(killed after the {timeout} s deadline)"))
        return out

    # --- life cycle -------------------------------------------------------------------------
    def _take_subnet(self):
        os.makedirs(LOCK_DIR, exist_ok=True)
        for k in range(MAX_SUBNETS):
            f = open(os.path.join(LOCK_DIR, f"subnet-{k}.lock"), "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            self.subnet, self._lock = k, f
            return
        raise NetnsError(
            f"all {MAX_SUBNETS} subnets 10.231.0-{MAX_SUBNETS - 1}.0/24 are in use "
            f"(locks in {LOCK_DIR})"
        )

    def up(self):
        cleanup_stale()
        self._take_subnet()
        self._up = True  # from here on, down() has something to undo
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            _ip("addr", "add", f"{self.bridge_addr}/24", "dev", self.bridge)
            for i, ns in enumerate(self.names):
                _ip("netns", "add", ns)
                veth = self._veth(i)
                # The peer is created directly inside the namespace, so every host's interface
                # can be called eth0 without clashing in the root namespace.
                _ip("link", "add", veth, "type", "veth", "peer", "name", IFNAME, "netns", ns)
                _ip("link", "set", veth, "master", self.bridge, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", IFNAME)
                _ip("-n", ns, "link", "set", IFNAME, "up")
        except BaseException:
            self.down()
            raise
        return self

    def _veth(self, i):
        """Root-namespace end of host i's veth pair."""
        return f"{VETH_PREFIX}{self.tag}h{i}"

    def down(self):
        """Kills what runs in the hosts, deletes the veths, namespaces and the bridge, releases
        the subnet. Safe to call twice; never raises for what is already gone."""
        if not self._up:
            return
        self._up = False
        present = set(list_namespaces())
        for i, ns in enumerate(self.names):
            if ns in present:
                _kill_namespace_processes(ns)
            # Deleting a veth end removes the pair at once; a namespace's own veths go only when
            # the kernel gets round to destroying it, which may be after this process brings up
            # its next hosts under the same names.
            _ip("link", "del", self._veth(i), check=False)
            if ns in present:
                _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.bridge, check=False)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old_sigterm = signal.signal(signal.SIGTERM, _sigterm_to_exit)
        try:
            return self.up()
        except BaseException:
            self._restore_sigterm()
            raise

    def __exit__(self, *exc):
        try:
            self.down()
        finally:
            self._restore_sigterm()
        return False

    def _restore_sigterm(self):
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None


def _sigterm_to_exit(signum, frame):
    raise SystemExit(128 + signum)


def mpirun_args(hosts, ranks_per_host, btl="self,vader,tcp"):
    """mpirun options that start `ranks_per_host` ranks in each simulated host.

    --allow-run-as-root          the tests create namespaces, so they run as root
    --host A:n,B:n               one entry per namespace address; n slots each
    --mca plm_rsh_agent          tests/netns/rsh_agent.sh: "ssh" into a host = ip netns exec
    --mca plm_rsh_no_tree_spawn  mpirun starts every orted itself, so the agent only ever runs
                                 in the root namespace (with more hosts OpenMPI would otherwise
                                 have orteds launch orteds from inside a namespace)
    --mca oob_tcp_if_include     mpirun <-> orted control traffic only on the hosts' network
                                 (the bridge address is mpirun's side of it); without it mpirun
                                 also advertises the machine's real interfaces, which the
                                 namespaces cannot route to (it works, after failed attempts)
    --mca btl self,vader,tcp     shared memory inside a host, TCP between hosts, nothing else
    --mca btl_tcp_if_include     MPI data between hosts only over the namespaces' eth0 (not lo)
    --mca pml ob1                the BTL-based PML (this OpenMPI also has ucx and cm/ofi), so the
                                 btl list above is what carries the data
    Not needed: orte_keep_fqdn_hostnames (OpenMPI keeps numeric --host entries whole), and
    OMPI_MCA_* environment (orteds get the options on their command line from mpirun).
    OpenMPI sees 2 nodes: OMPI_COMM_WORLD_LOCAL_SIZE is ranks_per_host in every rank.
    """
    spec = ",".join(f"{hosts.addr(i)}:{ranks_per_host}" for i in range(hosts.count))
    return [
        "--allow-run-as-root",
        "--host",
        spec,
        "--mca",
        "plm_rsh_agent",
        RSH_AGENT,
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
        "--mca",
        "oob_tcp_if_include",
        hosts.cidr,
        "--mca",
        "btl",
        btl,
        "--mca",
        "btl_tcp_if_include",
        hosts.cidr,
        "--mca",
        "pml",
        "ob1",
    ]


def _main(argv):
    cmd = argv[1] if len(argv) > 1 else "check"
    if cmd == "check":
        reason = unavailable_reason()
        print(reason or "ok")
        return 1 if reason else 0
    if cmd == "cleanup":
        for name in cleanup_stale():
            print("removed", name)
        return 0
    if cmd == "shell":
        n = int(argv[2]) if len(argv) > 2 else 2
        with SimulatedHosts(n) as hosts:
            for i in range(n):
                print(f"host {i}: {hosts.names[i]} {hosts.addr(i)}")
            print("mpirun", " ".join(mpirun_args(hosts, 2)), "...")
            env = dict(os.environ, **hosts.env())
            return subprocess.call([os.environ.get("SHELL", "sh")], env=env)
    print(f"usage: {argv[0]} check|cleanup|shell [hosts]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
