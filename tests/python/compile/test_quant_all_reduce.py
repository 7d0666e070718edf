"""torch.ops.collops.quant_all_reduce (collops.functional.quant_all_reduce): AllReduceOperation
with quantType as a functional op, eager and under torch.compile(fullgraph=True), on 2 process
ranks.

Every rank rebuilds every rank's int8 x from the seed (harness/quant_cases.py), so the goldens are
computed with torch, independently of collops: ATB's float64 golden within the dtype's tolerance,
and the documented float32 steps bit for bit. Every rank's result is returned to the test, which
checks that all ranks got the same bits. A gloo group runs the op's Python kernel (ops.py), which
must give the same bits as the collops group's C++ kernel.
"""

import re

import pytest
import torch
import torch.distributed as dist

import golden_harness as golden
from c10d_ranks import run_group_job
from quant_cases import quant_goldens, quant_inputs

WORLD = 2
SEED = 33
OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
SHAPES = [(16,), (3, 48), (2, 5, 64), (0, 32)]


def _cases(world):
    """(quant_type, out_dtype, shape, scale as [1, n]) of every eager case."""
    cases = []
    for quant_type in (1, 2):
        for out_dtype in OUT_DTYPES:
            for i, shape in enumerate(SHAPES):
                cases.append((quant_type, out_dtype, shape, i % 2 == 1))
    return cases


def _bits(y):
    """y's dtype, shape and bytes: what a rank returns to the test (a tensor would be shared
    through a file descriptor that dies with the rank)."""
    return str(y.dtype), tuple(y.shape), y.contiguous().view(torch.uint8).numpy().tobytes()


def _check(y, quant_type, out_dtype, shape, row, world, what):
    xs, scale, offset = quant_inputs(SEED, world, quant_type, shape, row)
    wide, steps = quant_goldens(xs, scale, offset, quant_type, out_dtype)
    golden.assert_reduced(y, wide, what + " vs ATB's float64 golden")
    golden.assert_equal(y, steps, what + " vs the float32 steps")


def _eager_job(ctx):
    import collops.functional as F

    from collops import _c10d_backend, ops

    gloo = dist.new_group(backend="gloo")
    python_calls = []

    def refuse(*args):
        python_calls.append(args)
        raise RuntimeError("the Python eager kernel was called")

    results = []
    for quant_type, out_dtype, shape, row in _cases(ctx.world_size):
        xs, scale, offset = quant_inputs(SEED, ctx.world_size, quant_type, shape, row)
        what = f"rank {ctx.rank} quant_type {quant_type} -> {out_dtype} x {shape}"
        # On the collops group the C++ kernel runs the operation: the Python kernel is never called.
        _c10d_backend.factory().set_python_kernel("quant_all_reduce", "eager", refuse)
        try:
            y = F.quant_all_reduce(xs[ctx.rank], scale, offset, quant_type, out_dtype)
        finally:
            _c10d_backend.factory().set_python_kernel(
                "quant_all_reduce", "eager", ops._KERNELS["quant_all_reduce"]
            )
        assert not python_calls
        _check(y, quant_type, out_dtype, shape, row, ctx.world_size, what)
        # Over gloo the Python kernel runs: the same bits.
        on_gloo = F.quant_all_reduce(xs[ctx.rank], scale, offset, quant_type, out_dtype, gloo)
        golden.assert_equal(on_gloo, y, what + " over gloo")
        results.append(_bits(y))
    # A strided x is read as its values.
    xs, scale, offset = quant_inputs(SEED, ctx.world_size, 2, (32, 48), True, "t")
    y = F.quant_all_reduce(xs[ctx.rank].t(), scale[:, :32], offset, 2, torch.float16)
    want = quant_goldens([x.t() for x in xs], scale[:, :32], offset, 2, torch.float16)[1]
    golden.assert_equal(y, want, f"rank {ctx.rank} transposed x")
    return results


def test_eager_equals_the_goldens_and_every_rank_gets_the_same_bits():
    per_rank = run_group_job(WORLD, _eager_job)
    assert len(per_rank[0]) == len(_cases(WORLD)) == 24
    for r in range(1, WORLD):
        assert per_rank[r] == per_rank[0]


def _compile_job(ctx):
    import collops.functional as F
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    results = []
    for quant_type, out_dtype, shape in ((1, torch.float16, (3, 48)), (2, torch.bfloat16, (4, 64))):

        def fn(x, scale, offset, quant_type=quant_type, out_dtype=out_dtype):
            # Work around the op on both sides, so the graph is more than the op alone.
            return F.quant_all_reduce(x + 1, scale, offset, quant_type, out_dtype) * 2

        xs, scale, offset = quant_inputs(SEED, ctx.world_size, quant_type, shape, True, "c")
        x = xs[ctx.rank]
        eager = fn(x, scale, offset)
        compiled = torch.compile(fn, fullgraph=True)(x, scale, offset)
        recorded = torch.compile(fn, fullgraph=True, backend=recording)(x, scale, offset)
        golden.assert_equal(compiled, eager, f"rank {ctx.rank} compiled quant_type {quant_type}")
        golden.assert_equal(recorded, eager, f"rank {ctx.rank} recorded quant_type {quant_type}")
        want = quant_goldens([t + 1 for t in xs], scale, offset, quant_type, out_dtype)[1] * 2
        golden.assert_equal(eager, want, f"rank {ctx.rank} eager quant_type {quant_type}")
        results.append(_bits(compiled))
    assert not counters["graph_break"], dict(counters["graph_break"])
    targets = [str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert sum("collops.quant_all_reduce" in t for t in targets) == 2, targets
    # The schema, the fake kernel and the op under AOT autograd agree with eager.
    xs, scale, offset = quant_inputs(SEED, ctx.world_size, 2, (2, 32), False, "o")
    torch.library.opcheck(
        torch.ops.collops.quant_all_reduce.default,
        (xs[ctx.rank], scale, offset, 2, torch.float32, F.group_name()),
    )
    return results


def test_compiled_fullgraph_holds_the_op_and_equals_eager():
    per_rank = run_group_job(WORLD, _compile_job)
    assert len(per_rank[0]) == 2 and per_rank[1] == per_rank[0]


def _rule_cases(q):
    """(call, the ValueError's message) of every argument rule; `q` calls the op with defaults
    for the arguments it is not given."""
    x = torch.ones(2, 32, dtype=torch.int8)
    half = torch.float16
    return [
        (lambda: q(x=x.half()), r"inTensors\[0\] \(x\) has dtype float16; accepted: int8"),
        (lambda: q(scale=torch.ones(1)), r"inTensors\[1\] \(scale\) has dtype float32"),
        (lambda: q(offset=torch.zeros(1)), r"inTensors\[2\] \(offset\) has dtype float32"),
        (
            lambda: q(x=torch.ones(2, 24, dtype=torch.int8)),
            r"\(x\) has shape \[2, 24\]; a quantised AllReduce needs its last dim n = 24 to be a "
            r"multiple of 16",
        ),
        (
            lambda: q(scale=torch.ones(2, dtype=half)),
            r"\(scale\) has shape \[2\]; quantType 1 \(per tensor\) takes scale of shape \[1\]",
        ),
        (
            lambda: q(quant_type=2, scale=torch.ones(16, dtype=half)),
            r"\(scale\) has shape \[16\]; quantType 2 \(per channel\) takes scale of shape "
            r"\[32\] or \[1, 32\]",
        ),
        (
            lambda: q(quant_type=2, scale=torch.ones(1, 1, 32, dtype=half)),
            r"\(scale\) has 3 dims",
        ),
        (lambda: q(offset=torch.zeros(2, dtype=half)), r"\(offset\) has shape \[2\]"),
        (
            lambda: q(
                quant_type=2,
                x=torch.zeros(1, 4194320, dtype=torch.int8),
                scale=torch.ones(4194320, dtype=half),
            ),
            r"\(x\) has shape \[1, 4194320\]; quantType 2 \(per channel\) takes at most "
            r"4194304 channels",
        ),
        (lambda: q(quant_type=0), r"quant_type = 0 is not 1 \(per tensor\) or 2 \(per channel\)"),
        (lambda: q(out_dtype=torch.int8), r"out_dtype = torch.int8 is not one of torch.float16"),
    ]


def _rules_job(ctx):
    import collops.functional as F

    gloo = dist.new_group(backend="gloo")

    def call(group):
        def q(**given):
            args = {
                "x": torch.ones(2, 32, dtype=torch.int8),
                "scale": torch.ones(1, dtype=torch.float16),
                "offset": torch.zeros(1, dtype=torch.float16),
                "quant_type": 1,
                "out_dtype": torch.float16,
            }
            args.update(given)
            return F.quant_all_reduce(**args, group=group)

        return q

    # Every case is tried, and every one that did not raise its ValueError is reported.
    wrong = []
    for group in (None, gloo):
        for i, (fn, message) in enumerate(_rule_cases(call(group))):
            try:
                fn()
                wrong.append((i, "gloo" if group else "collops", "no error"))
            except ValueError as e:
                if not re.search("collops.quant_all_reduce: .*" + message, str(e)):
                    wrong.append((i, "gloo" if group else "collops", str(e)))
            except Exception as e:  # noqa: BLE001  (reported, with its type)
                wrong.append((i, "gloo" if group else "collops", repr(e)))
        # Refused before any data moved: the group is still in step.
        y = call(group)()
        assert torch.equal(y, torch.full((2, 32), 2.0, dtype=torch.float16))
    return wrong


def test_every_argument_rule_raises_a_value_error_naming_the_argument():
    assert run_group_job(WORLD, _rules_job) == [[], []]


def _one_rank_refused_job(ctx):
    import collops.functional as F

    x = torch.ones(64, dtype=torch.int8)
    scale = torch.ones(2 if ctx.rank == 0 else 1, dtype=torch.float16)
    offset = torch.zeros(1, dtype=torch.float16)
    if ctx.rank == 0:
        with pytest.raises(ValueError, match=r"\(scale\) has shape \[2\]"):
            F.quant_all_reduce(x, scale, offset)
    else:
        # The refusing rank tells its peer, which fails at once instead of at the timeout.
        with pytest.raises(RuntimeError, match="ERROR_RANK_MISMATCH"):
            F.quant_all_reduce(x, scale, offset)
    return True


def test_a_rank_that_refuses_its_arguments_fails_its_peers_at_once():
    assert all(run_group_job(WORLD, _one_rank_refused_job, group_timeout=30, timeout=90))
