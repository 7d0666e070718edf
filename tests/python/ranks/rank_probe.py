"""One rank of a cross-host check, started inside a simulated host by tests/python/hosts/.

  rank_probe.py gloo <rank> <world> <master_addr> <port>
      torch.distributed gloo (TCP store at master_addr:port, GLOO_SOCKET_IFNAME from the
      environment): all_reduce of [rank + 1] * 4 and an all_gather of every rank's network
      namespace inode.
  rank_probe.py collops <rank> <world> <master_addr> <port>
      the "collops" torch.distributed backend (TCP store at master_addr:port): every collective
      of tests/python/distributed/test_c10d_backend.py's golden job and the isend/irecv rings
      of test_c10d_p2p.py, a random schedule of calls (tests/python/harness/dist_schedule.py, 40
      steps), then the engine the group ran on (collops._c10d_backend.communicator_name()).
  rank_probe.py lccl <rank> <world> <domain>
      collops AllReduce through OperationTorch, backend "lccl", commMode 0 (processes), on
      [rank + 1] * 4 (COLLOPS_JOB_ID and COLLOPS_TIMEOUT from the environment).

Prints one JSON line: rank, netns (inode of /proc/self/ns/net), hostname, and either "result"
(a list) or "error" (the exception's message); exits 1 on error.
"""

import json
import os
import socket
import sys

# The collops probe reuses the harness and the distributed tests' rank bodies, by module name.
_TESTS_PYTHON = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _dir in (os.path.join(_TESTS_PYTHON, "harness"), os.path.join(_TESTS_PYTHON, "distributed")):
    if _dir not in sys.path:
        sys.path.insert(0, _dir)


def netns_inode():
    return os.stat("/proc/self/ns/net").st_ino


def gloo(rank, world, master_addr, port):
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://{master_addr}:{port}", rank=rank, world_size=world
    )
    try:
        x = torch.full((4,), float(rank + 1))
        dist.all_reduce(x)
        inodes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(inodes, torch.tensor([netns_inode()], dtype=torch.int64))
        return {"result": x.tolist(), "netns_of_rank": [int(t.item()) for t in inodes]}
    finally:
        dist.destroy_process_group()


def collops_backend(rank, world, master_addr, port):
    import torch.distributed as dist

    import collops  # noqa: F401  (registers the "collops" backend)
    import dist_schedule
    import test_c10d_backend
    import test_c10d_p2p
    from collops import _c10d_backend
    from rank_harness import RankContext

    dist.init_process_group(
        "collops", init_method=f"tcp://{master_addr}:{port}", rank=rank, world_size=world
    )
    try:
        test_c10d_backend._collectives(RankContext(rank, world, 0, ""))
        test_c10d_p2p._rings(RankContext(rank, world, 0, ""))
        steps = dist_schedule.Schedule(seed=11, steps=40, max_elems=100_000).run()
        return {
            "result": "collectives passed",
            "schedule_steps": steps,
            "engine": _c10d_backend.communicator_name(),
        }
    finally:
        dist.destroy_process_group()


def lccl(rank, world, domain):
    import torch

    import collops  # noqa: F401  (registers torch.classes.OperationTorch)

    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    status = json.loads(
        op.set_param(
            json.dumps(
                {
                    "rank": rank,
                    "rankSize": world,
                    "backend": "lccl",
                    "commMode": 0,
                    "commDomain": domain,
                    "allReduceType": "sum",
                }
            )
        )
    )
    if status["result"] != 0:
        raise RuntimeError(f"set_param: {status}")
    (y,) = op.execute([torch.full((4,), float(rank + 1))])
    return {"result": y.tolist()}


def main(argv):
    kind, rank, world = argv[1], int(argv[2]), int(argv[3])
    out = {"rank": rank, "netns": netns_inode(), "hostname": socket.gethostname()}
    try:
        if kind == "gloo":
            out.update(gloo(rank, world, argv[4], int(argv[5])))
        elif kind == "collops":
            out.update(collops_backend(rank, world, argv[4], int(argv[5])))
        elif kind == "lccl":
            out.update(lccl(rank, world, argv[4]))
        else:
            raise ValueError(f"unknown probe {kind!r}")
    except Exception as e:  # reported to the test, which decides what was expected
        out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out), flush=True)
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
