"""Rank functions of the torch_atb tests (test_torch_atb.py), written as ATB's torch_atb tests
are: build a param with snake_case fields, torch_atb.Operation(param), op.forward([...]), then
compare with a golden each rank computes itself (here in float64, with ATB's per-dtype rule)."""

import torch

# The tolerances of ATB's COMPUTE_FLOAT rule: |a - g| <= thr * max(1, |g|).
THRESHOLD = {torch.float16: 2**-8, torch.bfloat16: 2**-7, torch.float32: 2**-11}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def check_precision(out, golden, dtype, partials=None):
    """ATB's rule, or with `partials` (every rank's exact partial product summed into golden, for
    a float16/bfloat16 y) thr * max(1, |g| + sum_r |P_r|): the ranks sum partials rounded to y's
    dtype, whose rounding errors scale with the partials, not with their sum (linear_golden.h in
    tests/cpp derives it)."""
    magnitude = golden.abs()
    if partials is not None and dtype in (torch.float16, torch.bfloat16):
        magnitude = magnitude + sum(p.abs() for p in partials)
    err = THRESHOLD[dtype] * torch.clamp(magnitude, min=1.0)
    failures = int(((out.double() - golden).abs() > err).sum())
    assert failures == 0, f"{failures} of {golden.numel()} elements beyond the {dtype} threshold"


def _torch_atb(ctx):
    import torch_atb

    mode = (
        torch_atb.CommMode.COMM_MULTI_THREAD
        if ctx.comm_mode == 1
        else torch_atb.CommMode.COMM_MULTI_PROCESS
    )
    return torch_atb, dict(
        rank=ctx.rank,
        rank_size=ctx.world_size,
        backend=ctx.backend,
        comm_mode=mode,
        comm_domain=ctx.domain,
    )


def _inputs(world_size, m, k, n, dtype, trans_weight, seed):
    """Every rank's x [m, k] and weight, and a residual [n], from one seed (as ATB's scripts
    build all ranks' inputs on every rank)."""
    gen = torch.Generator().manual_seed(seed)
    xs = [(torch.rand(m, k, generator=gen) * 2 - 1).to(dtype) for _ in range(world_size)]
    shape = (n, k) if trans_weight else (k, n)
    ws = [(torch.rand(*shape, generator=gen) * 2 - 1).to(dtype) for _ in range(world_size)]
    residual = (torch.rand(n, generator=gen) * 2 - 1).to(dtype)
    return xs, ws, residual


def _product(x, w, trans_weight):
    return x.double() @ (w.double().t() if trans_weight else w.double())


def linear_parallel(ctx, type_name, dtype_name, trans_weight, has_residual, seed):
    """LinearParallelParam of one type; every rank checks its y (and the gathered x) in float64."""
    torch_atb, comm = _torch_atb(ctx)
    dtype = DTYPES[dtype_name]
    R, rank = ctx.world_size, ctx.rank
    ptype = getattr(torch_atb.LinearParallelParam.ParallelType, type_name)
    keep = type_name == "ALL_GATHER_LINEAR"
    m, k, n = 4 * R, 48, 40
    xs, ws, residual = _inputs(R, m, k, n, dtype, trans_weight, seed)
    param = torch_atb.LinearParallelParam(
        trans_weight=trans_weight,
        has_residual=has_residual,
        type=ptype,
        keep_intermediate=keep,
        **comm,
    )
    op = torch_atb.Operation(param)
    assert (op.input_num, op.output_num) == (3 if has_residual else 2, 2 if keep else 1)
    inputs = [xs[rank], ws[rank]] + ([residual] if has_residual else [])
    outputs = op.forward(inputs)
    partials = None  # the exact partial products the ranks sum, in this rank's rows of y
    if type_name == "LINEAR_ALL_REDUCE":
        partials = [_product(xs[r], ws[r], trans_weight) for r in range(R)]
        golden = sum(partials)
    elif type_name == "LINEAR_REDUCE_SCATTER":
        partials = [_product(xs[r], ws[r], trans_weight).chunk(R)[rank] for r in range(R)]
        golden = sum(partials)
    elif type_name == "ALL_GATHER_LINEAR":
        golden = _product(torch.cat(xs), ws[rank], trans_weight)
        assert torch.equal(outputs[1], torch.cat(xs)), "the gathered x differs"
    else:
        golden = _product(xs[rank], ws[rank], trans_weight)
    if has_residual:
        golden = golden + residual.double()
    assert outputs[0].dtype == dtype and outputs[0].shape == golden.shape, (
        outputs[0].dtype,
        outputs[0].shape,
        golden.shape,
    )
    check_precision(outputs[0], golden, dtype, partials)


def _grid_rank(inner_dim_is_ag, ag_dim, rs_dim, ag_idx, rs_idx):
    """The rank at (ag_idx, rs_idx) of the ag_dim x rs_dim grid."""
    return rs_idx * ag_dim + ag_idx if inner_dim_is_ag else ag_idx * rs_dim + rs_idx


def two_dim_linear(ctx, dtype_name, seed):
    """ALL_GATHER_LINEAR_REDUCE_SCATTER (type 4) on every grid of the world size: rank r gathers
    x over its AllGather group, multiplies by its own weight, and keeps block rs_idx of the sum
    over its ReduceScatter group, plus the residual; checked in float64 on every rank."""
    torch_atb, comm = _torch_atb(ctx)
    dtype = DTYPES[dtype_name]
    R, rank = ctx.world_size, ctx.rank
    grids = [(a, R // a) for a in range(1, R + 1) if R % a == 0]
    for ag_dim, rs_dim in grids:
        for inner in (1, 0):
            m, k, n = 2 * rs_dim, 24, 20
            xs, ws, residual = _inputs(R, m, k, n, dtype, True, seed + 10 * ag_dim + inner)
            info = torch_atb.LinearParallelParam.TwoDimTPInfo(
                ag_dim=ag_dim, rs_dim=rs_dim, inner_dim_is_ag=inner
            )
            param = torch_atb.LinearParallelParam(
                has_residual=True,
                type=torch_atb.LinearParallelParam.ParallelType.ALL_GATHER_LINEAR_REDUCE_SCATTER,
                two_dim_TP_info=info,
                **comm,
            )
            (y,) = torch_atb.Operation(param).forward([xs[rank], ws[rank], residual])
            ag_idx = rank % ag_dim if inner else rank // rs_dim
            rs_idx = rank // ag_dim if inner else rank % rs_dim
            partials = []
            for s in range(rs_dim):
                member = _grid_rank(inner, ag_dim, rs_dim, ag_idx, s)
                gathered = torch.cat(
                    [xs[_grid_rank(inner, ag_dim, rs_dim, a, s)] for a in range(ag_dim)]
                )
                partials.append(_product(gathered, ws[member], True).chunk(rs_dim)[rs_idx])
            golden = sum(partials) + residual.double()
            assert y.dtype == dtype and y.shape == golden.shape, (ag_dim, rs_dim, inner, y.shape)
            check_precision(y, golden, dtype, partials)


def linear_parallel_layouts(ctx, type_name, dtype_name, seed):
    """linear_parallel with the weight as [n, k] and no residual, then [k, n] with one."""
    linear_parallel(ctx, type_name, dtype_name, True, False, seed)
    linear_parallel(ctx, type_name, dtype_name, False, True, seed + 1)


def collectives(ctx, seed):
    """AllReduceParam, AllGatherParam, BroadcastParam, ReduceScatterParam, AllToAllParam: each
    through torch_atb.Operation, against goldens built from every rank's seeded input."""
    torch_atb, comm = _torch_atb(ctx)
    R, rank = ctx.world_size, ctx.rank
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randint(-100, 100, (2 * R, 3), generator=gen).float() for _ in range(R)]

    (y,) = torch_atb.Operation(torch_atb.AllReduceParam(all_reduce_type="max", **comm)).forward(
        [xs[rank]]
    )
    assert torch.equal(y, torch.stack(xs).amax(0))
    (y,) = torch_atb.Operation(torch_atb.AllGatherParam(**comm)).forward([xs[rank]])
    assert torch.equal(y, torch.stack(xs))
    x = xs[rank].clone()
    bcast = torch_atb.Operation(torch_atb.BroadcastParam(rank_root=R - 1, **comm))
    assert bcast.forward([x]) == [] and bcast.output_num == 0
    assert torch.equal(x, xs[R - 1])
    reduce_comm = dict(comm)
    reduce_comm["backend"] = comm["backend"]  # ReduceScatterParam's own default is "lccl"
    (y,) = torch_atb.Operation(torch_atb.ReduceScatterParam(**reduce_comm)).forward([xs[rank]])
    assert torch.equal(y, sum(xs).chunk(R)[rank])
    (y,) = torch_atb.Operation(torch_atb.AllToAllParam(**comm)).forward([xs[rank]])
    assert torch.equal(y, torch.cat([x.flatten().chunk(R)[rank] for x in xs]).view_as(y))
    quant_all_reduce(ctx, seed)


def quant_all_reduce(ctx, seed):
    """AllReduceParam with quant_type and out_data_type: int8 x, float16 scale and offset in,
    (sum_r x_r + R*offset)*scale out, equal bit for bit to the float32 steps on every rank."""
    import quant_cases

    torch_atb, comm = _torch_atb(ctx)
    QuantType = torch_atb.AllReduceParam.QuantType
    for quant_type, out_type, out_dtype in (
        (QuantType.QUANT_TYPE_PER_TENSOR, torch_atb.ACL_FLOAT16, torch.float16),
        (QuantType.QUANT_TYPE_PER_CHANNEL, torch_atb.ACL_BF16, torch.bfloat16),
    ):
        xs, scale, offset = quant_cases.quant_inputs(
            seed, ctx.world_size, int(quant_type), (4, 64), True, "torch_atb"
        )
        op = torch_atb.Operation(
            torch_atb.AllReduceParam(quant_type=quant_type, out_data_type=out_type, **comm)
        )
        (y,) = op.forward([xs[ctx.rank], scale, offset])
        wide, steps = quant_cases.quant_goldens(xs, scale, offset, int(quant_type), out_dtype)
        assert y.dtype == out_dtype and torch.equal(y, steps), (quant_type, y, steps)
        check_precision(y, wide.double(), out_dtype)


def forward_error(ctx):
    """A weight of the wrong k raises OperationError with status 8 naming the weight, on every
    rank before any communication."""
    torch_atb, comm = _torch_atb(ctx)
    op = torch_atb.Operation(torch_atb.LinearParallelParam(**comm))
    try:
        op.forward([torch.ones(2, 8, dtype=torch.bfloat16), torch.ones(4, 6, dtype=torch.bfloat16)])
    except torch_atb.OperationError as e:
        assert (e.status, e.status_name) == (8, "ERROR_INVALID_TENSOR_DIM"), e
        assert "weight has shape [4, 6]" in str(e), e
        return
    raise AssertionError("forward accepted a weight of the wrong k")


def linear_over_c10d(ctx, seed):
    """backend "c10d": LinearParallel on the default torch.distributed group (gloo)."""
    ctx.backend, ctx.domain = "c10d", ""
    for type_name in ("LINEAR_ALL_REDUCE", "LINEAR_REDUCE_SCATTER", "ALL_GATHER_LINEAR"):
        linear_parallel(ctx, type_name, "bfloat16", False, True, seed)


def two_dim_over_c10d(ctx, seed):
    """backend "c10d": ALL_GATHER_LINEAR_REDUCE_SCATTER on the default group (gloo)."""
    ctx.backend, ctx.domain = "c10d", ""
    two_dim_linear(ctx, "float32", seed)
