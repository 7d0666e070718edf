#!/usr/bin/env python3
"""A LinearParallel test written as ATB's own torch_atb tests are, run on CPU unchanged.

ATB's tests/apitest/torch_atb_test scripts spawn one process per NPU with mp.spawn, call
torch_npu.npu.set_device(rank), build every rank's inputs from one seed, move them with .npu(),
run torch_atb.Operation(param).forward([...]), torch.npu.synchronize(), and compare with a golden
under the threshold 2^-8 * max(1, |golden|). Here each rank's product is rounded to float16 before
the ranks sum it (ATB's graph: Linear, AllReduce, Add), so the rounding errors scale with the
products, not with their sum: the threshold is 2^-8 * max(1, |golden| + sum over ranks of
|x_r @ w_r|). The torch_npu and torch_atb shims absorb the device calls, so nothing below knows it
runs on CPU. Run with the shim path:

    PYTHONPATH=python/torch_npu_shim:python python3 examples/python/torch_atb_linear_parallel.py

mp.spawn joins every rank and raises when any fails, so the exit code tells.
"""

import logging
import unittest

import torch
import torch.multiprocessing as mp
import torch_atb
import torch_npu

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-8s %(message)s")

rank_size = 2
rank_root = 0
backend = "lccl"
random_seed = 123


def check_precision(out_tensor, golden_out_tensor, partials_magnitude, rank, err=2**-8):
    magnitude = torch.abs(golden_out_tensor) + partials_magnitude
    max_err = err * torch.max(torch.ones_like(golden_out_tensor), magnitude)
    error = torch.abs(out_tensor - golden_out_tensor)
    num_failures = torch.sum(error > max_err).item()
    if rank == 0:
        logging.info(f"num_failures: {num_failures}")
    return num_failures == 0


def compute_golden(in_tensors, residual):
    """The float64 golden and the sum over ranks of |x_r @ w_r|, what the error scales with."""
    partials = [torch.matmul(inp.double(), wgh.double()) for inp, wgh in in_tensors]
    return sum(partials) + residual.double(), sum(p.abs() for p in partials)


def create_op_run(rank, tensors):
    linear_parallel_param = torch_atb.LinearParallelParam(
        trans_weight=False,
        rank=rank,
        rank_size=rank_size,
        rank_root=rank_root,
        backend=backend,
        has_residual=True,
        type=torch_atb.LinearParallelParam.ParallelType.LINEAR_ALL_REDUCE,
    )
    linear_parallel = torch_atb.Operation(linear_parallel_param)
    return linear_parallel.forward(tensors)


def run_test(rank, size):
    torch_npu.npu.set_device(rank)
    logging.info(f"Process {rank} started, using device npu:{rank}.")
    torch.manual_seed(random_seed)

    m, k, n = 64, 256, 128
    in_tensors, in_tensors_npu = [], []
    for _ in range(rank_size):
        input_tensor = torch.randn(m, k, dtype=torch.float16)
        weight_tensor = torch.randn(k, n, dtype=torch.float16)
        in_tensors.append([input_tensor, weight_tensor])
        in_tensors_npu.append([input_tensor.npu(), weight_tensor.npu()])
    residual = torch.randn(n, dtype=torch.float16)

    golden, partials_magnitude = compute_golden(in_tensors, residual)
    npu_outputs = create_op_run(rank, in_tensors_npu[rank] + [residual.npu()])
    torch.npu.synchronize()
    result = npu_outputs[0].cpu()
    logging.info(f"rank {rank}: output {tuple(result.shape)} {result.dtype}")
    assert check_precision(result.double(), golden, partials_magnitude, rank), "Test failed"


class TestLinearParallel(unittest.TestCase):
    def test(self):
        print("----------- linear_parallel test begin ------------")
        mp.spawn(run_test, nprocs=rank_size, args=(rank_size,))
        print("----------- linear_parallel test success ------------")


if __name__ == "__main__":
    unittest.main()
