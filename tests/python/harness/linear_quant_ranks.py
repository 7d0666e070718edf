"""Rank functions of the quantised LinearParallel tests (test_linear_parallel_quant.py): W8A8
per-channel LINEAR_ALL_REDUCE and W8A16 per-group PURE_LINEAR, each through torch_atb
(LinearParallelParam's quant_type / quant_group_size / out_data_type) and through
OperationTorch with the op's JSON params, against a float64 golden each rank computes itself
from every rank's seeded inputs."""

import json

import torch

from torch_atb_ranks import _torch_atb, check_precision


def _w8a8_inputs(R, m, k, n, seed):
    """Every rank's x int8 [m, k], weight int8 [n, k], bias int32 [n], scale float32 [n]."""
    gen = torch.Generator().manual_seed(seed)
    ranks = []
    for _ in range(R):
        x = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
        w = torch.randint(-128, 128, (n, k), generator=gen, dtype=torch.int8)
        bias = torch.randint(-20000, 20000, (n,), generator=gen, dtype=torch.int32)
        scale = (torch.rand(n, generator=gen) + 0.5) * 1e-4
        ranks.append((x, w, bias, scale))
    return ranks


def _w8a8_golden(ranks):
    """sum over ranks of (x . W^T + bias) * scale, in float64."""
    return sum(
        (x.double() @ w.double().t() + bias.double()) * scale.double()
        for x, w, bias, scale in ranks
    )


def w8a8_per_channel_all_reduce(ctx, seed):
    torch_atb, comm = _torch_atb(ctx)
    R, rank = ctx.world_size, ctx.rank
    ranks = _w8a8_inputs(R, 6, 64, 24, seed)
    golden = _w8a8_golden(ranks)
    inputs = list(ranks[rank])

    QuantType = torch_atb.LinearParallelParam.QuantType
    param = torch_atb.LinearParallelParam(
        type=torch_atb.LinearParallelParam.ParallelType.LINEAR_ALL_REDUCE,
        quant_type=QuantType.QUANT_TYPE_PER_CHANNEL,
        out_data_type=torch_atb.ACL_FLOAT16,
        **comm,
    )
    op = torch_atb.Operation(param)
    assert (op.input_num, op.output_num) == (4, 1)
    (y,) = op.forward(inputs)
    assert y.dtype == torch.float16 and y.shape == golden.shape, (y.dtype, y.shape)
    check_precision(y, golden, torch.float16)

    op = torch.classes.OperationTorch.OperationTorch("LinearParallelOperation")
    result = json.loads(op.set_param(ctx.param(type=0, quantType=1, outDataType=27)))
    assert result["result"] == 0, result
    (y,) = op.execute(inputs)
    assert y.dtype == torch.bfloat16 and y.shape == golden.shape, (y.dtype, y.shape)
    check_precision(y, golden, torch.bfloat16)


def w8a16_per_group_pure_linear(ctx, seed):
    """x bfloat16 [m, k], weight int8 [k, n] (trans_weight False), antiquant offset and scale
    bfloat16 [k / G, n]: y = x . ((W + offset) * scale as bfloat16)."""
    torch_atb, comm = _torch_atb(ctx)
    m, k, n, G = 5, 64, 24, 16
    gen = torch.Generator().manual_seed(seed + ctx.rank)
    dtype = torch.bfloat16
    x = (torch.rand(m, k, generator=gen) * 2 - 1).to(dtype)
    w = torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)
    offset = ((torch.rand(k // G, n, generator=gen) * 8) - 4).to(dtype)
    scale = (torch.rand(k // G, n, generator=gen) * 0.016 + 0.004).to(dtype)
    dequantised = (
        (w.double() + offset.double().repeat_interleave(G, 0))
        * scale.double().repeat_interleave(G, 0)
    ).to(dtype)
    golden = x.double() @ dequantised.double()
    inputs = [x, w, offset, scale]

    QuantType = torch_atb.LinearParallelParam.QuantType
    param = torch_atb.LinearParallelParam(
        type=torch_atb.LinearParallelParam.ParallelType.PURE_LINEAR,
        trans_weight=False,
        quant_type=QuantType.QUANT_TYPE_PER_GROUP,
        quant_group_size=G,
        **comm,
    )
    (y,) = torch_atb.Operation(param).forward(inputs)
    assert y.dtype == dtype and y.shape == golden.shape, (y.dtype, y.shape)
    check_precision(y, golden, dtype)

    op = torch.classes.OperationTorch.OperationTorch("LinearParallelOperation")
    params = ctx.param(type=3, transWeight=False, quantType=2, quantGroupSize=G)
    assert json.loads(op.set_param(params))["result"] == 0
    (y,) = op.execute(inputs)
    check_precision(y, golden, dtype)
    # A scale of another group count is refused at execute, naming the input and its shape.
    try:
        op.execute([x, w, offset, scale[:2]])
    except RuntimeError as error:
        assert "inTensors[3] (scale)" in str(error) and "[4, 24]" in str(error), str(error)
    else:
        raise AssertionError("a [2, 24] scale for 4 groups was accepted")
