#!/usr/bin/env python3
"""The AllToAllVV2 test script of ATB's documentation, completed and run on CPU.

Two processes (multiprocessing, spawn) are the two ranks of a multi-process job
(commMode 0, backend "hccl" as ATB's script writes it, which collops resolves to its
shared-memory "lccl" backend). Each rank runs the documented example for the 7 dtypes the script
tests and compares with the golden output. The script's own lines are kept; what was added is
marked "collops:": the imports, the data the script refers to without defining it (sendcount,
senddisp, recvout, recvdis), the helper functions it calls, per-dtype reporting, and a join that
checks every rank's exit code under a deadline (the documented script joins only the last
process and never reads an exit code).

Run (after building the library, see python/collops/README.md):
    python3 examples/python/all_to_allvv2.py
Prints one PASS line per rank and dtype, and exits nonzero if any rank fails or hangs.
"""

import json
import os
import sys
import time
import unittest
from multiprocessing import Process, set_start_method

import numpy as np
import torch

# collops: use the source tree's package when collops is not pip-installed.
try:
    import collops
except ImportError as first_error:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(_HERE, "..", "..", "python"))
    try:
        import collops
    except ImportError:
        raise first_error
# collops: the only change the script needs -- `import torch_npu` becomes the CPU shim.
torch_npu = collops.compat.install_torch_npu()

# collops: the example's counts from the ATB documentation, by rank.
sendcount = [[2, 4], [2, 1]]
senddisp = [[0, 2], [0, 2]]
recvout = [[2, 2], [4, 1]]
recvdis = [[0, 2], [0, 4]]

DEADLINE_SECONDS = 180  # collops: on the whole job; each rank gives up after COLLOPS_TIMEOUT


def compute_out_tensor_dim1(recv_counts):
    """collops: ATB's tensorForInferShape, one element per received element (ATB's
    documentation shows it filled with 3s)."""
    return torch.full((int(sum(recv_counts)),), 3, dtype=torch.int8).npu()


def golden_compare(out_tensor, golden_tensor):
    """collops: data movement must be exact. ATB's script writes rank 1's golden as a flat
    [2, 3, 4, 5, 2] while the output is [1, 5], so values are compared flat."""
    return (
        out_tensor.dtype == golden_tensor.dtype
        and out_tensor.numel() == golden_tensor.numel()
        and torch.equal(out_tensor.flatten(), golden_tensor.flatten())
    )


def report(line):
    """collops: one write per line, so the two ranks' result lines never interleave."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def main_worker(rank, world_size, inTensorDtypes, sizes, random_seed):
    failures = []  # collops: every dtype is tried and reported; the exit code says if any failed
    # init process group
    torch_npu.npu.set_device(int(rank))
    print(f"========== Process {rank} started, using device npu:{rank}.==========")
    # init all_to_allvv2_operation
    op_name = "AllToAllVV2Operation"
    all_to_allvv2_operation = torch.classes.OperationTorch.OperationTorch("AllToAllVV2Operation")
    torch.manual_seed(random_seed)
    low = -100
    high = 100
    for inTensorDtype in inTensorDtypes:
        inTensors = [
            torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]], dtype=inTensorDtype),
            torch.tensor([[0, 1, 2], [3, 4, 6]], dtype=inTensorDtype),
        ]
        GoldenTensors = [
            torch.tensor([[0, 1, 0, 1]], dtype=inTensorDtype),
            torch.tensor([2, 3, 4, 5, 2], dtype=inTensorDtype),
        ]
        acl_param = json.dumps(
            {"rank": rank, "rankSize": world_size, "rankRoot": 0, "backend": "hccl"}
        )
        run_param = json.dumps(
            {
                "sendCounts": sendcount[rank],
                "sdispls": senddisp[rank],
                "recvCounts": recvout[rank],
                "rdispls": recvdis[rank],
            }
        )
        host_list = [sendcount[rank], senddisp[rank], recvout[rank], recvdis[rank]]
        host_tensors = [np.array(tensor) for tensor in host_list]
        host_tensors = [torch.from_numpy(tensor).to(torch.int64) for tensor in host_tensors]
        host_tensors = [tensor.npu() for tensor in host_tensors]
        # collops: ATB ignores these results; a rejected param must not pass silently.
        for what, result in (
            ("set_param", all_to_allvv2_operation.set_param(acl_param)),
            ("set_varaintpack_param", all_to_allvv2_operation.set_varaintpack_param(run_param)),
        ):
            if json.loads(result)["result"] != 0:
                raise RuntimeError(f"rank {rank}: {op_name}.{what} failed: {result}")
        print(f"host_tensors={host_tensors}")
        print(f"inTensors[rank].npu()={inTensors[rank].npu()}")
        print(f"host_tensors[0]={host_tensors[0]}")
        print(f"host_tensors[1]={host_tensors[1]}")
        print(f"host_tensors[2]={host_tensors[2]}")
        print(f"host_tensors[3]={host_tensors[3]}")
        atb_input5 = compute_out_tensor_dim1(recvout[rank])
        print(f"atb_input5 = {atb_input5}")
        try:  # collops: a failing execute raises RuntimeError with the status and message
            result1 = all_to_allvv2_operation.execute(
                [
                    inTensors[rank].npu(),
                    host_tensors[0],
                    host_tensors[1],
                    host_tensors[2],
                    host_tensors[3],
                    atb_input5,
                ]
            )
        except RuntimeError as error:
            report(f"rank {rank}: {op_name} {inTensorDtype}: FAIL: {error}")
            failures.append(inTensorDtype)
            continue
        print(f"\n ==========\nresult1={result1}\n ==========\n")
        acl_out_tensor = result1[0]
        print(f"\n ==========\nacl_out_tensor={acl_out_tensor}\n ==========\n")
        torch.npu.synchronize()
        # assert result
        if golden_compare(acl_out_tensor.cpu(), GoldenTensors[rank]):
            report(f"rank {rank}: {op_name} {inTensorDtype}: PASS {acl_out_tensor.tolist()}")
        else:
            report(
                f"rank {rank}: {op_name} {inTensorDtype}: FAIL: got {acl_out_tensor}, "
                f"expected {GoldenTensors[rank]}"
            )
            failures.append(inTensorDtype)
    if failures:
        sys.exit(1)


class TestAllToAllVV2(unittest.TestCase):
    def test_all_to_allvv2_operation(self):
        world_size = 2
        random_seed = 123
        sizes = [[3, 4]]
        set_start_method("spawn", force=True)
        # collops: one job key per run, so two runs on one host never meet in a rendezvous,
        # and a lost rank ends in a minute rather than the 300 s default.
        os.environ.setdefault("COLLOPS_JOB_ID", f"all_to_allvv2-{os.getpid()}-{time.time_ns()}")
        os.environ.setdefault("COLLOPS_TIMEOUT", "60")
        process_list = []
        inTensorDtypes = [
            torch.int8,
            torch.int16,
            torch.int32,
            torch.int64,
            torch.float32,
            torch.float16,
            torch.bfloat16,
        ]
        for i in range(world_size):
            p = Process(
                target=main_worker, args=(i, world_size, inTensorDtypes, sizes, random_seed)
            )
            p.start()
            process_list.append(p)
        # collops: join every rank under one deadline and check every exit code.
        deadline = time.monotonic() + DEADLINE_SECONDS
        failed = []
        for rank, p in enumerate(process_list):
            p.join(max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
                failed.append(f"rank {rank} still running after {DEADLINE_SECONDS} s (killed)")
            elif p.exitcode != 0:
                failed.append(f"rank {rank} exit code {p.exitcode}")
        self.assertEqual(failed, [], "; ".join(failed))
        print(
            f"AllToAllVV2Operation: all {world_size} ranks passed {len(inTensorDtypes)} dtypes",
            flush=True,
        )


if __name__ == "__main__":
    unittest.main()
