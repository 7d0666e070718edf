"""Rank bodies for quantised AllReduce (AllReduceOperation with quantType 1 or 2) through
OperationTorch, the Python twin of tests/cpp/quant_suite.cpp for the engines only Python reaches
(backend "c10d" over gloo) and for OperationTorch itself. Each rank rebuilds every rank's int8 x
from the seed and computes the golden with torch, independently of collops:

* ATB's golden (Σ_r x_r + R·offset)·scale in float64, compared with ATB's tolerance;
* the documented float32 steps (exact int8 sum, one float32 addition, one float32 multiplication,
  one rounding to outDataType), which y must equal bit for bit on every rank.
"""

import json

import torch

import golden_harness as golden

OUT_DTYPES = {1: torch.float16, 27: torch.bfloat16, 0: torch.float32}
SHAPES = [(0, 32), (16,), (3, 48), (2, 5, 64), (67, 1024)]


def quant_inputs(seed, world_size, quant_type, shape, scale_as_row, tag=""):
    """Every rank's int8 x (the whole int8 range), the shared float16 scale and offset."""
    n = shape[-1]
    xs = [
        torch.randint(
            -128,
            128,
            shape,
            generator=golden.generator(seed, "qx", tag, r, *shape),
            dtype=torch.int64,
        ).to(torch.int8)
        for r in range(world_size)
    ]
    g = golden.generator(seed, "qs", tag, quant_type, *shape)
    scale_shape = (1,) if quant_type == 1 else ((1, n) if scale_as_row else (n,))
    # k/256 and halves: exact in float16.
    scale = (torch.randint(1, 65, scale_shape, generator=g).double() / 256).to(torch.float16)
    offset = ((torch.randint(-4, 5, (1,), generator=g).double()) / 2).to(torch.float16)
    return xs, scale, offset


def quant_goldens(xs, scale, offset, quant_type, out_dtype):
    """(ATB's float64 golden, the float32-steps golden), both of out_dtype."""
    world_size = len(xs)
    total = torch.stack([x.to(torch.int32) for x in xs]).sum(0)
    per_element = scale.reshape(-1) if quant_type == 2 else scale.reshape(())
    wide = (total.double() + world_size * offset.double()) * per_element.double()
    steps = (total.float() + world_size * offset.float()) * per_element.float()
    return wide.to(out_dtype), steps.to(out_dtype)


def quant_param(ctx, quant_type, out_type, **extra):
    return ctx.param(quantType=quant_type, outDataType=out_type, **extra)


def case_all_reduce_quant(ctx, seed):
    """quantType {1, 2} x outDataType {float16, bfloat16, float32} x shapes up to 68 KiB of int8;
    per-channel scales alternate between [n] and [1, n]."""
    count = 0
    for quant_type in (1, 2):
        for out_type, out_dtype in OUT_DTYPES.items():
            op = golden.make_op("AllReduceOperation", quant_param(ctx, quant_type, out_type))
            for shape in SHAPES:
                count += 1
                xs, scale, offset = quant_inputs(
                    seed, ctx.world_size, quant_type, shape, count % 2 == 0
                )
                (y,) = op.execute([xs[ctx.rank], scale, offset])
                wide, steps = quant_goldens(xs, scale, offset, quant_type, out_dtype)
                what = f"{ctx} quantType {quant_type} -> {out_dtype} x {shape}"
                golden.assert_reduced(y, wide, what + " vs ATB's golden")
                golden.assert_equal(y, steps, what + " vs the float32 steps")


def _expect_failure(fn, status, needle, what):
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        assert status in text and needle in text, (
            f"{what}: expected {status} naming {needle}:\n{text}"
        )
        return
    raise AssertionError(f"{what}: expected {status}, but the call succeeded")


def case_all_reduce_quant_errors(ctx, seed=None):
    """Every rule with ATB's Status: at set_param (1), at execute for the inputs (8, 16, 6, 5),
    and across ranks (one rank's scale differs: ERROR_RANK_MISMATCH on every rank)."""
    for extra, field in [
        ({"quantType": 1, "outDataType": 1, "allReduceType": "max"}, "allReduceType"),
        ({"quantType": 3, "outDataType": 1}, "quantType"),
        ({"quantType": 1}, "outDataType"),
        ({"quantType": 2, "outDataType": 2}, "outDataType"),
        ({"outDataType": 27}, "outDataType"),
    ]:
        op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
        result = json.loads(op.set_param(ctx.param(**extra)))
        assert result["result"] == 1 and field in result["message"], f"{ctx} {extra}: {result}"

    f16, i8 = torch.float16, torch.int8
    rules = [  # quantType, x, scale, offset, status, needle
        (
            1,
            torch.zeros(2, 24, dtype=i8),
            torch.ones(1, dtype=f16),
            torch.zeros(1, dtype=f16),
            "ERROR_INVALID_TENSOR_DIM (8)",
            "multiple of 16",
        ),
        (
            1,
            torch.zeros(2, 16, dtype=i8),
            torch.ones(1, dtype=f16),
            torch.zeros(2, dtype=f16),
            "ERROR_INVALID_TENSOR_DIM (8)",
            "offset",
        ),
        (
            2,
            torch.zeros(2, 16, dtype=i8),
            torch.ones(1, 1, 16, dtype=f16),
            torch.zeros(1, dtype=f16),
            "ERROR_INVALID_TENSOR_DIM_NUM (16)",
            "scale",
        ),
        (
            1,
            torch.zeros(2, 16, dtype=i8),
            torch.ones(16, dtype=f16),
            torch.zeros(1, dtype=f16),
            "ERROR_INVALID_TENSOR_DIM (8)",
            "scale",
        ),
        (
            2,
            torch.zeros(2, 16, dtype=i8),
            torch.ones(2, 16, dtype=f16),
            torch.zeros(1, dtype=f16),
            "ERROR_INVALID_TENSOR_DIM (8)",
            "scale",
        ),
        (
            2,
            torch.zeros(2, 16, dtype=f16),
            torch.ones(16, dtype=f16),
            torch.zeros(1, dtype=f16),
            "ERROR_INVALID_TENSOR_DTYPE (6)",
            "(x)",
        ),
        (
            1,
            torch.zeros(2, 16, dtype=i8),
            torch.ones(1),
            torch.zeros(1, dtype=f16),
            "ERROR_INVALID_TENSOR_DTYPE (6)",
            "(scale)",
        ),
    ]
    for quant_type, x, scale, offset, status, needle in rules:
        op = golden.make_op("AllReduceOperation", quant_param(ctx, quant_type, 1))
        _expect_failure(
            lambda op=op, inputs=[x, scale, offset]: op.execute(inputs),
            status,
            needle,
            f"{ctx} quantType {quant_type} x {tuple(x.shape)} scale "
            f"{tuple(scale.shape)} offset {tuple(offset.shape)}",
        )
    op = golden.make_op("AllReduceOperation", quant_param(ctx, 1, 1))
    _expect_failure(
        lambda: op.execute([torch.zeros(2, 16, dtype=i8)]),
        "ERROR_INVALID_IN_TENSOR_NUM (5)",
        "scale",
        f"{ctx} x alone",
    )
    if ctx.world_size < 2:
        return
    last = ctx.world_size - 1
    scale = torch.tensor([0.25 if ctx.rank == last else 0.5], dtype=f16)
    _expect_failure(
        lambda: op.execute([torch.zeros(2, 16, dtype=i8), scale, torch.zeros(1, dtype=f16)]),
        "ERROR_RANK_MISMATCH",
        "scale and offset",
        f"{ctx} scale differs on rank {last}",
    )
