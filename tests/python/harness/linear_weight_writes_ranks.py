"""Rank function of test_linear_parallel_weight_writes.py: one W8A8 LINEAR_ALL_REDUCE OperationTorch
called with the same weight tensor again and again, written in place between calls in ways torch
counts (add_, copy_, through a view's base) and ways it does not (through `.data`, a numpy view,
a raw pointer, inference mode), passed as views and slices, as a new tensor over rewritten bytes
at a freed one's address, and in turn with another weight. Each call is checked against a float64
golden each rank computes from every rank's weights, which it rebuilds by replaying the same
steps on tensors of its own (never passed to the op). Anything the op kept of a weight between
calls would compute with old bytes at one of these steps."""

import ctypes
import json

import torch

import collops  # noqa: F401  (loads the library: torch.classes.OperationTorch)

from torch_atb_ranks import check_precision

M, K, N = 6, 64, 24


def _ints(shape, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-128, 128, shape, generator=gen, dtype=torch.int8)


class _Weights:
    """One rank's weights and the steps that change them; each step returns the weight to pass."""

    def __init__(self, rank, seed):
        base = seed * 100 + rank * 10
        self.w = _ints((N, K), base)
        self.other = _ints((N, K), base + 1)
        self.wt = _ints((K, N), base + 2)  # passed as wt.t(): a view with other strides
        self.big = _ints((N + 1, K), base + 3)  # passed as big[1:]: a view at an offset
        self.buffer = bytearray(_ints((N, K), base + 4).numpy().tobytes())
        self.next_bytes = _ints((N, K), base + 5).numpy().tobytes()
        self.loaded = _ints((N, K), base + 6)  # what w.data.copy_ loads
        self.framed = None
        self.inference = None

    def _framed(self):
        return torch.frombuffer(self.buffer, dtype=torch.int8).view(N, K)

    def steps(self):
        def add_one():
            self.w.add_(1)
            return self.w

        def copy_other():
            self.w.copy_(self.other)
            return self.w

        def data_copy():
            # The weight-loading idiom: `.data` has a version counter of its own, so w's does
            # not move.
            version = self.w._version
            self.w.data.copy_(self.loaded)
            assert self.w._version == version
            return self.w

        def numpy_write():
            self.w.numpy()[2:5] += 7
            return self.w

        def pointer_write():
            row = bytes(range(K))
            ctypes.memmove(self.w.data_ptr() + 3 * K, row, K)
            return self.w

        def write_view_base():
            self.wt.sub_(3)
            return self.wt.t()

        def frame():
            self.framed = self._framed()
            return self.framed

        def reframe_after_free():
            # The old tensor is freed, the bytes under it rewritten where torch does not see it,
            # and a new tensor made over them: the same address, sizes, strides, dtype and
            # version, another storage.
            address = self.framed.data_ptr()
            self.framed = None
            self.buffer[:] = self.next_bytes
            self.framed = self._framed()
            assert self.framed.data_ptr() == address
            return self.framed

        def make_inference():
            with torch.inference_mode():
                self.inference = self.w.clone()
            return self.inference

        def write_inference():
            with torch.inference_mode():
                self.inference.add_(5)
            return self.inference

        return [
            ("first call", lambda: self.w),
            ("same tensor", lambda: self.w),
            ("same tensor again", lambda: self.w),
            ("add_(1)", add_one),
            ("same after add_", lambda: self.w),
            ("copy_", copy_other),
            ("same after copy_", lambda: self.w),
            ("w.data.copy_", data_copy),
            ("same after w.data.copy_", lambda: self.w),
            ("numpy view written", numpy_write),
            ("raw pointer written", pointer_write),
            ("other tensor", lambda: self.other),
            ("back to the first tensor", lambda: self.w),
            ("other tensor again", lambda: self.other),
            ("first tensor, w.data.copy_ while the other was in use", data_copy),
            ("transposed view", lambda: self.wt.t()),
            ("transposed view again", lambda: self.wt.t()),
            ("view's base written", write_view_base),
            ("slice at an offset", lambda: self.big[1:]),
            ("slice again", lambda: self.big[1:]),
            ("frombuffer", frame),
            ("frombuffer again", lambda: self.framed),
            ("new tensor at the freed one's address", reframe_after_free),
            ("inference tensor", make_inference),
            ("inference tensor again", lambda: self.inference),
            ("inference tensor written", write_inference),
            ("back to the first tensor at last", lambda: self.w),
        ]


def _rank_call(rank, seed, step):
    """Rank `rank`'s x, bias and scale of one step."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank * 100 + step)
    x = torch.randint(-128, 128, (M, K), generator=gen, dtype=torch.int8)
    bias = torch.randint(-20000, 20000, (N,), generator=gen, dtype=torch.int32)
    scale = (torch.rand(N, generator=gen) + 0.5) * 1e-4
    return x, bias, scale


def _golden(world, seed, step):
    """sum over ranks of (x . W^T + bias) * scale in float64, every rank's W at `step` rebuilt by
    replaying the steps on its own tensors."""
    total = 0
    for r in range(world):
        replay = _Weights(r, seed).steps()
        for _, run in replay[:step]:
            run()
        w = replay[step][1]()
        x, bias, scale = _rank_call(r, seed, step)
        total = total + (x.double() @ w.double().t() + bias.double()) * scale.double()
    return total


def step_names():
    """The steps' names, in order."""
    return [name for name, _ in _Weights(0, 0).steps()]


def written_weight_steps(ctx, seed):
    """Runs every step, checking each y against its golden; returns the steps' names."""
    op = torch.classes.OperationTorch.OperationTorch("LinearParallelOperation")
    result = json.loads(op.set_param(ctx.param(type=0, quantType=1, outDataType=27)))
    assert result["result"] == 0, result
    names = []
    for step, (name, run) in enumerate(_Weights(ctx.rank, seed).steps()):
        w = run()
        x, bias, scale = _rank_call(ctx.rank, seed, step)
        (y,) = op.execute([x, w, bias, scale])
        try:
            check_precision(y, _golden(ctx.world_size, seed, step), torch.bfloat16)
        except AssertionError as error:
            raise AssertionError(f"rank {ctx.rank}, step {step} ({name}): {error}") from None
        names.append(name)
    return names
