"""OperationTorch's execute, execute_out and set_varaintpack_param from Python without torch's
custom-class call (torch_bindings/operation_torch_methods.cpp): the builtin methods answer for OperationTorch
objects alone, give what torch's own methods give, fail as they fail, and hand every call they
do not take as it is to torch's method."""

import json
import types

import pytest
import torch

import collops  # noqa: F401  (installs the methods)
import golden_harness as golden
from rank_harness import run_thread_ranks
from solo_operation import make
from solo_operation import solo as solo_params

SEED = 20261130


def torch_method(op, name):
    """torch's own method `name` of `op`: what ScriptObject.__getattr__ gives without collops."""
    return torch.ScriptObject.__getattr__(op, name)


def solo(name="AllReduceOperation", **param):
    """`name` with its params set, in a one-rank job (solo_operation's)."""
    return make(name, solo_params(**param))


def outcome(call):
    """("returned", value) or (exception type, message) of call()."""
    try:
        return "returned", call()
    except Exception as e:  # noqa: BLE001  (any outcome is compared)
        return type(e), str(e)


def raised(call):
    """outcome(call) of a call that must raise; fails the test when it returns."""
    result = outcome(call)
    assert result[0] != "returned", f"returned {result[1]!r} instead of raising"
    return result


def test_an_operation_torch_object_has_the_builtin_methods():
    op = solo()
    for name in ("execute", "execute_out", "set_varaintpack_param"):
        method = getattr(op, name)
        assert isinstance(method, types.BuiltinMethodType), (name, method)
        assert method.__self__ is op
        assert isinstance(torch_method(op, name), torch._C.ScriptMethod)
    # The other methods are still torch's.
    assert isinstance(op.set_param, torch._C.ScriptMethod)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_objects_of_other_classes_are_answered_as_before():
    """A custom class of torch's own: no execute attribute, torch's error, its methods work."""
    weight = torch.quantize_per_tensor(torch.randn(4, 4), 0.1, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(weight, None)
    assert not hasattr(packed, "execute") and not hasattr(packed, "execute_out")
    kind, message = raised(lambda: packed.execute)
    assert kind is AttributeError and "LinearPackedParamsBase" in message, message
    assert torch.equal(packed.unpack()[0].int_repr(), weight.int_repr())


def case_both_methods_agree(ctx, seed):
    """Every rank: the builtin execute and execute_out give torch's methods' outputs, bit for
    bit, and the golden sum."""
    op = golden.make_op("AllReduceOperation", ctx.param())
    for dtype in (torch.float32, torch.bfloat16, torch.int8):
        xs = [golden.rank_tensor(seed, r, (4, 33), dtype) for r in range(ctx.world_size)]
        x = xs[ctx.rank]
        want = golden.reduce_golden(xs, "sum", dtype)
        (fast,) = op.execute([x])
        (slow,) = torch_method(op, "execute")([x])
        golden.assert_reduced(fast, want, f"{ctx} execute {dtype}")
        assert torch.equal(fast, slow), f"{ctx} {dtype}: builtin and torch's execute differ"
        fast_out, slow_out = torch.empty_like(x), torch.empty_like(x)
        assert op.execute_out([x], [fast_out]) is None
        torch_method(op, "execute_out")([x], [slow_out])
        assert torch.equal(fast_out, slow), f"{ctx} {dtype}: builtin execute_out"
        assert torch.equal(slow_out, slow), f"{ctx} {dtype}: torch's execute_out"


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_builtin_and_torch_methods_agree_on_every_rank(world_size):
    run_thread_ranks(world_size, case_both_methods_agree, SEED)


def test_an_operation_error_is_the_one_torch_raises():
    op = solo()
    x = torch.ones(4)
    for call in (
        lambda m: m([x, x]),  # AllReduce takes one input
        lambda m: m([torch.ones(4, dtype=torch.complex64)]),  # a dtype collops refuses
    ):
        fast = raised(lambda c=call: c(op.execute))
        assert fast == raised(lambda c=call: c(torch_method(op, "execute"))), fast
        assert fast[0] is RuntimeError and "OperationTorch(AllReduceOperation).execute" in fast[1]
    out = torch.empty(5)  # not InferShape's shape
    fast = raised(lambda: op.execute_out([x], [out]))
    assert fast == raised(lambda: torch_method(op, "execute_out")([x], [out])), fast
    assert fast[0] is RuntimeError and "execute_out" in fast[1], fast


def test_an_object_without_an_operation_fails_the_same_way():
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    fast = raised(lambda: op.execute([torch.ones(2)]))
    assert fast == raised(lambda: torch_method(op, "execute")([torch.ones(2)]))
    assert "called before a successful set_param" in fast[1], fast


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((torch.ones(4),), {}),  # a tensor, not a list
        (([1.0],), {}),  # a list of numbers
        (([torch.ones(4)], [torch.ones(4)]), {}),  # one argument too many
        ((), {}),  # none
        ((), {"inputs": [torch.ones(4)]}),  # a keyword
        ((None,), {}),
    ],
    ids=["tensor", "numbers", "two-lists", "nothing", "keyword", "none"],
)
def test_calls_the_builtin_does_not_take_get_torchs_answer(args, kwargs):
    op = solo()
    fast = raised(lambda: op.execute(*args, **kwargs))
    assert fast == raised(lambda: torch_method(op, "execute")(*args, **kwargs)), fast


def test_a_tuple_or_a_tensor_subclass_goes_through_torchs_method():
    """Inputs the builtin does not convert itself still give the right result, torch's."""
    op = solo()
    x = torch.arange(6.0)
    for inputs in ((x,), [torch.nn.Parameter(x.clone(), requires_grad=False)]):
        (y,) = op.execute(inputs)
        (want,) = torch_method(op, "execute")(inputs)
        assert torch.equal(y, want) and torch.equal(y, x), (inputs, y)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
def test_traced_calls_go_to_torchs_method():
    """While torch.jit.trace records, a call is torch's method's: here torch refuses an object
    that is not part of the trace, and the builtin, which would run the call unrecorded, must
    not."""
    op = solo()
    refusals = [
        raised(lambda m=m: torch.jit.trace(lambda x: m([x])[0], torch.ones(3), check_trace=False))
        for m in (op.execute, torch_method(op, "execute"))
    ]
    assert refusals[0] == refusals[1], refusals
    assert "not part of the active trace" in refusals[0][1], refusals


def test_the_method_called_on_the_class_takes_the_object_first():
    op = solo()
    x = torch.arange(4.0)
    (y,) = torch.ScriptObject.execute(op, [x])
    assert torch.equal(y, x)
    out = torch.empty(4)
    torch.ScriptObject.execute_out(op, [x], [out])
    assert torch.equal(out, x)
    kind, message = raised(lambda: torch.ScriptObject.execute())
    assert kind is TypeError and "needs the object" in message, message


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace the builtin")
def test_a_compiled_function_that_calls_execute_runs_it():
    """torch.compile reads the attribute through the object (the descriptor is a data descriptor),
    breaks the graph at the builtin call and runs it as Python would; without that it called the
    descriptor itself. OperationTorch is not capturable in one graph (torch.ops.collops is)."""
    op = solo()

    def f(x):
        return op.execute([x * 2])[0] + 1

    x = torch.arange(3.0)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(f)(x), x * 2 + 1)


COUNTS = {"sendCounts": [2, 4], "sdispls": [0, 2], "recvCounts": [2, 2], "rdispls": [0, 2]}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(COUNTS),
        json.dumps({**COUNTS, "bad": 1}),  # an unknown key
        json.dumps({**COUNTS, "sendCounts": [2, -4]}),  # a negative count
        "{not json",
        "",
    ],
    ids=["counts", "unknown-key", "negative", "malformed", "empty"],
)
def test_set_varaintpack_param_answers_as_torchs_method(text):
    op = solo("AllToAllVV2Operation", rankSize=2)
    fast = op.set_varaintpack_param(text)
    assert fast == torch_method(op, "set_varaintpack_param")(text), fast
    assert json.loads(fast)["result"] == (0 if text == json.dumps(COUNTS) else 1), fast


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((b"{}",), {}),  # bytes, not str
        ((COUNTS,), {}),  # a dict, not its JSON
        ((None,), {}),
        (("\ud800",), {}),  # a str UTF-8 cannot hold
        ((), {"json": "{}"}),  # a keyword
        (("{}", "{}"), {}),
    ],
    ids=["bytes", "dict", "none", "surrogate", "keyword", "two"],
)
def test_set_varaintpack_param_calls_the_builtin_does_not_take_get_torchs_answer(args, kwargs):
    op = solo("AllToAllVV2Operation", rankSize=2)
    fast = outcome(lambda: op.set_varaintpack_param(*args, **kwargs))
    want = outcome(lambda: torch_method(op, "set_varaintpack_param")(*args, **kwargs))
    assert fast == want, fast
