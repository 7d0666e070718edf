"""One lccl rank for test_lccl_pid_namespaces.py, run as its own interpreter (perhaps under
`unshare --pid --fork --mount-proc`). Prints one JSON line: what each call returned.

SCENARIO=slow: rank 0 sleeps 3 s between its first and second call, so the others wait for it
that long; every call must succeed with the golden value.
SCENARIO=dies: rank VICTIM exits after the first call (SIGKILL cannot stop the first process of
a pid namespace from inside it, so it exits as a crash would, without cleaning up); the others'
second call must fail with ERROR_PEER_LOST naming it.
"""

import json
import os
import time

import torch

import collops  # noqa: F401

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
scenario = os.environ["SCENARIO"]
victim = int(os.environ.get("VICTIM", "-1"))

reduce_op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
gather_op = torch.classes.OperationTorch.OperationTorch("AllGatherOperation")
for op, extra in ((reduce_op, {"allReduceType": "sum"}), (gather_op, {})):
    answer = json.loads(
        op.set_param(
            json.dumps(dict(rank=rank, rankSize=world, rankRoot=0, backend="lccl", **extra))
        )
    )
    assert answer["result"] == 0, answer


def call(n):
    """An all-reduce and an all-gather of n floats (4 MiB: large enough for process_vm_readv)."""
    total = reduce_op.execute([torch.full((n,), float(rank + 1))])[0]
    gathered = gather_op.execute([torch.full((n,), float(rank))])[0]
    want = torch.arange(world, dtype=torch.float32).repeat_interleave(n).view(world, n)
    return bool(torch.all(total == world * (world + 1) / 2)) and torch.equal(gathered, want)


report = {"rank": rank, "pid": os.getpid()}
report["first"] = call(1 << 20)
if scenario == "slow" and rank == 0:
    time.sleep(3)
if scenario == "dies" and rank == victim:
    print(json.dumps(report), flush=True)
    os._exit(17)
started = time.monotonic()
try:
    report["second"] = call(1 << 20)
except RuntimeError as error:
    report["second"] = str(error)
report["seconds"] = round(time.monotonic() - started, 2)
print(json.dumps(report), flush=True)
