#!/usr/bin/env python3
"""torch.distributed gloo over loopback, measured like collops-bench.

A long-lived server, so the comparison runner pays torch's start-up once per rank count, not once
per row: the parent spawns R ranks (MASTER_ADDR=127.0.0.1) and then reads one JSON request per
line on stdin ({"op", "bytes", "warmup", "iters"}, optionally "settle_ms", default 300 as
collops-bench's --settle-ms), hands it to every rank, and prints one JSON result line in
collops-bench's format. The warm-up is bench_common.h's WarmUp: the calls, then more until
settle_ms have passed, rank 0 deciding for all. Times: a dist.barrier() (not timed) before every
iteration, per iteration the max over ranks, median and min over iterations. float32 only; the
layouts are those of bench_layout.h (uneven V ops included) and every result is checked.

gloo has no reduce_scatter: reducescatter(v) run as all_reduce + keeping this rank's slice, which
is what a gloo user would do; and its all_gather needs equal blocks: allgatherv runs as
all_to_all_single, each rank sending its own block to every rank. The result line says so in
"note".

Across simulated hosts (bench/compare --layout 2x2, as root):
  gloo_worker.py -r 4 --netns collops-1-h0,collops-1-h1 --master-addr 10.231.0.1 --ifname eth0
puts ranks 0,1 in the first network namespace and 2,3 in the second (each rank joins its
namespace with setns(2) before torch.distributed starts; the parent and its pipes stay where they
are), with the TCP store on --master-addr and GLOO_SOCKET_IFNAME=--ifname.
"""

import ctypes
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def uneven_split(total, parts, key):
    """bench_layout.h UnevenSplit: block j gets weight 1 + (key + j) % 2, remainder to the last."""
    weights = sum(1 + (key + j) % 2 for j in range(parts))
    counts = [total * (1 + (key + j) % 2) // weights for j in range(parts)]
    counts[-1] += total - sum(counts)
    return counts


def values(rank, n):
    """bench_layout.h Value(rank, i) = rank + 1 + i % 7."""
    return (torch.arange(n, dtype=torch.int64) % 7 + rank + 1).to(torch.float32)


class Case:
    """One rank's buffers and callable for one (op, bytes) request."""

    def __init__(self, op, nbytes, rank, world):
        self.op, self.rank, self.world, self.note = op, rank, world, ""
        n = max(1, nbytes // 4)
        if op not in ("allreduce", "broadcast", "sendrecv"):
            n = max(world, n // world * world)
        self.n, self.bytes = n, n * 4
        chunk = n // world
        x = values(rank, n)
        if op == "allreduce":
            self.src, self.x = x, x.clone()
            self.golden = sum(values(r, n) for r in range(world))
            self.run = lambda: dist.all_reduce(self.x)
            self.result = lambda: self.x
        elif op == "broadcast":
            self.x = x if rank == 0 else torch.zeros(n)
            self.golden = values(0, n)
            self.run = lambda: dist.broadcast(self.x, 0)
            self.result = lambda: self.x
        elif op == "sendrecv":
            self.x, self.y = x, torch.zeros(n)
            self.golden = values((rank - 1) % world, n)
            self.run = self._sendrecv
            self.result = lambda: self.y
        elif op == "allgather":
            self.x = values(rank, chunk)
            self.y = [torch.zeros(chunk) for _ in range(world)]
            self.golden = torch.cat([values(r, chunk) for r in range(world)])
            self.run = lambda: dist.all_gather(self.y, self.x)
            self.result = lambda: torch.cat(self.y)
        elif op == "allgatherv":
            # bench_layout.h: rank j contributes uneven_split(n, R, 0)[j] elements. gloo's
            # all_gather refuses blocks of different sizes, so every rank sends its block to each
            # rank with all_to_all_single (send list prepared once, outside the timed calls).
            counts = uneven_split(n, world, 0)
            self.x = values(rank, counts[rank]).repeat(world)
            self.y = torch.zeros(n)
            self.golden = torch.cat([values(r, counts[r]) for r in range(world)])
            self.run = lambda: dist.all_to_all_single(
                self.y, self.x, counts, [counts[rank]] * world
            )
            self.result = lambda: self.y
            self.note = "gloo all_gather needs equal blocks: all_to_all_single of the own block"
        elif op in ("reducescatter", "reducescatterv"):
            counts = [chunk] * world if op == "reducescatter" else uneven_split(n, world, 0)
            start = sum(counts[:rank])
            self.src, self.x = x, x.clone()
            self.lo, self.hi = start, start + counts[rank]
            self.golden = sum(values(r, n) for r in range(world))[self.lo : self.hi]
            self.y = None
            self.run = self._reducescatter
            self.result = lambda: self.y
            self.note = "gloo has no reduce_scatter: all_reduce + own slice"
        elif op in ("alltoall", "alltoallv"):
            if op == "alltoall":
                send = [chunk] * world
                recv = [chunk] * world
                peer_off = [rank * chunk] * world
            else:
                send = uneven_split(n, world, rank)
                recv = [uneven_split(n, world, j)[rank] for j in range(world)]
                peer_off = [sum(uneven_split(n, world, j)[:rank]) for j in range(world)]
            self.x, self.y = x, torch.zeros(sum(recv))
            self.golden = torch.cat(
                [values(j, peer_off[j] + recv[j])[peer_off[j] :] for j in range(world)]
            )
            self.run = lambda: dist.all_to_all_single(self.y, self.x, recv, send)
            self.result = lambda: self.y
        else:
            raise ValueError(f"unknown op {op}")

    def reset(self):
        """Fresh inputs and poisoned outputs for the checked run (timed runs reduce in place)."""
        if hasattr(self, "src"):
            self.x.copy_(self.src)
        y = getattr(self, "y", None)
        for t in y if isinstance(y, list) else [y]:
            if t is not None:
                t.fill_(-1)
        if self.op == "broadcast" and self.rank != 0:
            self.x.fill_(-1)

    def _reducescatter(self):
        dist.all_reduce(self.x)
        self.y = self.x[self.lo : self.hi].clone()

    def _sendrecv(self):
        # Both directions at once, as MPI_Sendrecv: post both, then wait for both.
        reqs = [
            dist.isend(self.x, (self.rank + 1) % self.world),
            dist.irecv(self.y, (self.rank - 1) % self.world),
        ]
        for r in reqs:
            r.wait()

    def wrong(self):
        return int((self.result() != self.golden).sum().item())


CLONE_NEWNET = 0x40000000


def enter_netns(name):
    """Moves this process into network namespace `name` (/run/netns/<name>, made by `ip netns`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def warm_up(case, calls, settle_seconds):
    """bench_common.h WarmUp: `calls` calls, then batches of as many until `settle_seconds` have
    passed; whether to go on is rank 0's word, so every rank makes the same calls."""
    start = time.perf_counter()
    for _ in range(calls):
        case.run()
    flag = torch.zeros(1, dtype=torch.int32)
    while settle_seconds > 0:
        flag.fill_(int(time.perf_counter() - start < settle_seconds))
        dist.broadcast(flag, 0)
        if not flag.item():
            return
        for _ in range(max(calls, 1)):
            case.run()


def rank_main(rank, world, port, requests, results, place=None):
    """One rank: serve requests until None; put (rank, times, wrong, bytes, note) per request.
    `place`: (netns name, master address, interface) across simulated hosts, else loopback."""
    if place:
        netns, master, ifname = place
        enter_netns(netns)
        os.environ["MASTER_ADDR"] = master
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
    else:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    while True:
        req = requests[rank].get()
        if req is None:
            break
        try:
            case = Case(req["op"], req["bytes"], rank, world)
            warm_up(case, req["warmup"], req.get("settle_ms", 300) / 1000)
            times = []
            for _ in range(req["iters"]):
                dist.barrier()
                t0 = time.perf_counter()
                case.run()
                times.append(time.perf_counter() - t0)
            case.reset()
            dist.barrier()
            case.run()
            wrong = case.wrong()
            results.put((rank, times, wrong, case.bytes, case.note, ""))
        except Exception as e:  # reported in the row, the server keeps serving
            results.put((rank, [], -1, req["bytes"], "", repr(e)))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def factor(op, world):
    """nccl-tests bus-bandwidth factors (bench_layout.h BusFactor)."""
    if op == "allreduce":
        return 2 * (world - 1) / world
    if op in ("broadcast", "sendrecv"):
        return 1.0
    return (world - 1) / world


def usage_error(message):
    """A bad command line: says which option, exits 2 (before any rank starts)."""
    print(f"gloo_worker: {message}", file=sys.stderr)
    sys.exit(2)


def option(name, default=None):
    if name not in sys.argv:
        return default
    at = sys.argv.index(name) + 1
    if at >= len(sys.argv):
        usage_error(f"{name} needs a value")
    return sys.argv[at]


def main():
    text = option("-r", "2")
    if not text.isdigit() or int(text) < 1:
        usage_error(f"-r {text}: give a rank count, an integer >= 1")
    world = int(text)
    netns = option("--netns")
    places = [None] * world
    port = free_port()
    if netns:
        hosts = netns.split(",")
        if not all(hosts) or world % len(hosts):
            usage_error(
                f"--netns {netns}: give one namespace per host, and -r {world} ranks "
                "must split evenly over them"
            )
        per_host = world // len(hosts)
        places = [
            (hosts[r // per_host], option("--master-addr"), option("--ifname", "eth0"))
            for r in range(world)
        ]
        port = 29500  # fresh namespaces: nothing else listens there
    ctx = mp.get_context("spawn")
    requests = [ctx.Queue() for _ in range(world)]
    results = ctx.Queue()
    procs = [
        ctx.Process(target=rank_main, args=(r, world, port, requests, results, places[r]))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        for q in requests:
            q.put(req)
        got = sorted((results.get(timeout=600) for _ in range(world)), key=lambda r: r[0])
        error = "; ".join(f"rank {g[0]}: {g[5]}" for g in got if g[5])
        row = {
            "system": "gloo",
            "op": req["op"],
            "dtype": "float32",
            "ranks": world,
            "bytes": got[0][3],
            "count": got[0][3] // 4,
            "error": error,
            "note": got[0][4],
        }
        if not error:
            worst = sorted(max(g[1][i] for g in got) for i in range(req["iters"]))
            k = len(worst)
            med = worst[k // 2] if k % 2 else (worst[k // 2 - 1] + worst[k // 2]) / 2
            algbw = row["bytes"] / med / 1e9
            row.update(
                time_med_us=med * 1e6,
                time_min_us=worst[0] * 1e6,
                algbw_gbs=algbw,
                busbw_gbs=algbw * factor(req["op"], world),
                wrong=sum(g[2] for g in got),
                iters=k,
            )
        print(json.dumps(row), flush=True)
    for q in requests:
        q.put(None)
    for p in procs:
        p.join(timeout=30)


if __name__ == "__main__":
    main()
