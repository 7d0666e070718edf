"""OperationTorch's set_varaintpack_param in one process: bound counts against the tensors run,
bad or oversized bindings give result 1 naming the field, and what set_param does to a binding.

Anything that executes uses rankSize 1 in commMode 1 (a one-thread job, solo_operation.py), so
these tests need no peers; the collective behaviour itself is in test_operation_torch_threads.py /
_procs.py.
"""

import json

import pytest
import torch

from solo_operation import OperationTorch, counts, make, solo, vv2_solo_golden, vv2_solo_inputs


def test_bound_counts_equal_to_the_tensors_run():
    op = make("AllToAllVV2Operation", solo())
    x = torch.arange(10, dtype=torch.int32)
    assert json.loads(
        op.set_varaintpack_param(
            json.dumps({"sendCounts": [4], "sdispls": [3], "recvCounts": [4], "rdispls": [0]})
        )
    ) == {"result": 0, "message": ""}
    ins = [x, counts(4), counts(3), counts(4), counts(0), torch.zeros(4, dtype=torch.int8)]
    (y,) = op.execute(ins)
    assert torch.equal(y, vv2_solo_golden(x, 4, 3))


def test_bound_counts_differing_from_the_tensors_raise_naming_both():
    # Neither may win silently: a stale binding (or stale tensors) would give a wrong result.
    op = make("AllToAllVV2Operation", solo())
    op.set_varaintpack_param(
        json.dumps({"sendCounts": [4], "sdispls": [3], "recvCounts": [4], "rdispls": [0]})
    )
    ins = [
        torch.arange(10.0),
        counts(4),
        counts(5),
        counts(4),
        counts(0),
        torch.zeros(4, dtype=torch.int8),
    ]
    with pytest.raises(
        RuntimeError,
        match=r"ERROR_INVALID_PARAM.*inTensors\[2\] \(sdispls\) "
        r"holds \[5\] but set_varaintpack_param bound "
        r"sdispls = \[3\]",
    ):
        op.execute(ins)


@pytest.mark.parametrize(
    "op_name,key",
    [
        ("AllToAllVV2Operation", "sendCounts"),
        ("AllGatherVOperation", "sendCount"),
        ("AllToAllVV2Operation", "unknown"),
    ],
)
def test_deeply_nested_or_huge_bound_values_give_a_short_error(op_name, key):
    # dump() of the offending value recursed once per level (a segfault at 100000 levels) and
    # copied a 10 MB string whole into the message.
    op = make(op_name, solo())
    depth = 200000
    for value_text in (
        "[" * depth + "1" + "]" * depth,
        '{"a":' * depth + "1" + "}" * depth,
        json.dumps("x" * 10_000_000),
    ):
        result = json.loads(op.set_varaintpack_param('{"' + key + '": ' + value_text + "}"))
        assert result["result"] == 1, result["message"][:200]
        assert len(result["message"]) < 400, len(result["message"])


def test_integral_float_counts_bind_as_atb_reads_them():
    # ATB's binder reads run params with get<int64_t>(), so 3.0 is 3; 1.5 stays refused
    # (VARIANT_ERRORS) rather than truncated.
    op = make("AllToAllVV2Operation", solo())
    result = json.loads(
        op.set_varaintpack_param(
            json.dumps({"sendCounts": [2.0], "sdispls": [3.0], "recvCounts": [2], "rdispls": [0.0]})
        )
    )
    assert result == {"result": 0, "message": ""}, result
    x = torch.arange(6.0)
    ins = [x, counts(2), counts(3), counts(2), counts(0), torch.zeros(2, dtype=torch.int8)]
    (y,) = op.execute(ins)
    assert torch.equal(y, vv2_solo_golden(x, 2, 3))


def test_set_param_drops_the_binding():
    # As ATB's SetParam makes a new binder: counts given afterwards only in the tensors are used,
    # not the binding made under the previous params.
    op = make("AllToAllVV2Operation", solo())
    x = torch.arange(6.0)
    op.set_varaintpack_param(
        json.dumps({"sendCounts": [2], "sdispls": [0], "recvCounts": [2], "rdispls": [0]})
    )
    (y,) = op.execute(
        [x, counts(2), counts(0), counts(2), counts(0), torch.zeros(2, dtype=torch.int8)]
    )
    assert torch.equal(y, vv2_solo_golden(x, 2, 0))
    assert json.loads(op.set_param(solo())) == {"result": 0, "message": ""}
    (y,) = op.execute(
        [x, counts(2), counts(3), counts(2), counts(0), torch.zeros(2, dtype=torch.int8)]
    )
    assert torch.equal(y, vv2_solo_golden(x, 2, 3))
    # A failed set_param drops it too (and a later good one starts with none).
    op.set_varaintpack_param(json.dumps({"sdispls": [1]}))
    assert json.loads(op.set_param(solo(quantType=3)))["result"] == 1
    assert json.loads(op.set_param(solo()))["result"] == 0
    (y,) = op.execute(
        [x, counts(2), counts(4), counts(2), counts(0), torch.zeros(2, dtype=torch.int8)]
    )
    assert torch.equal(y, vv2_solo_golden(x, 2, 4))


VARIANT_ERRORS = [
    ("AllToAllVV2Operation", {"sendCount": [1]}, "sendCount"),
    ("AllToAllVV2Operation", {"sendCounts": "1"}, "sendCounts"),
    ("AllToAllVV2Operation", {"sendCounts": [1, 2]}, "sendCounts"),
    ("AllToAllVV2Operation", {"rdispls": [-1]}, "rdispls"),
    ("AllToAllVV2Operation", {"recvCounts": [1.5]}, "recvCounts"),
    ("AllToAllVV2Operation", {"sdispls": [-2.0]}, "sdispls"),
    ("AllToAllVV2Operation", {"sdispls": [1e19]}, "sdispls"),
    ("AllToAllVV2Operation", {"sdispls": [True]}, "sdispls"),
    ("AllGatherVOperation", {"sendCount": 2.5}, "sendCount"),
    ("AllGatherVOperation", {"sendCount": -3}, "sendCount"),
    ("AllGatherVOperation", {"recvCounts": [1, 2]}, "recvCounts"),
    ("ReduceScatterVOperation", {"recvCount": [1, 2]}, "recvCount"),
    ("ReduceScatterVOperation", {"recvCounts": [1]}, "recvCounts"),
    ("AllReduceOperation", {"sendCounts": [1]}, "sendCounts"),
]


@pytest.mark.parametrize(
    "name,run_param,field",
    VARIANT_ERRORS,
    ids=[f"{n}-{f}-{i}" for i, (n, _, f) in enumerate(VARIANT_ERRORS)],
)
def test_bad_varaintpack_param_gives_result_1_naming_the_field(name, run_param, field):
    op = make(name, solo())
    result = json.loads(op.set_varaintpack_param(json.dumps(run_param)))
    assert result["result"] == 1, result
    assert field in result["message"], result


@pytest.mark.parametrize(
    "bad",
    [
        '{"sendCounts": [2], "sdispls": [0.5], "recvCounts": [2]}',
        '{"sendCounts": [-2]}',
        "not json",
        '{"sendCount": [2]}',
    ],
)
def test_failed_binding_leaves_no_binding(bad):
    # The failed call's counts differ from the previous binding's; keeping that one would make
    # it override the correct tensors. With no binding, the tensors' counts are used.
    op = make("AllToAllVV2Operation", solo())
    op.set_varaintpack_param(
        json.dumps({"sendCounts": [2], "sdispls": [1], "recvCounts": [2], "rdispls": [0]})
    )
    assert json.loads(op.set_varaintpack_param(bad))["result"] == 1
    x = torch.arange(5.0)
    (y,) = op.execute(vv2_solo_inputs(x, 2))
    assert torch.equal(y, vv2_solo_golden(x, 2, 0))


def test_empty_binding_reads_counts_from_the_tensors():
    op = make("AllToAllVV2Operation", solo())
    op.set_varaintpack_param(
        json.dumps({"sendCounts": [2], "sdispls": [1], "recvCounts": [2], "rdispls": [0]})
    )
    assert json.loads(op.set_varaintpack_param("{}")) == {"result": 0, "message": ""}
    (y,) = op.execute(vv2_solo_inputs(torch.arange(5.0), 5))
    assert torch.equal(y, torch.arange(5.0).reshape(1, 5))


def test_bound_length_must_match_the_tensor():
    op = make("AllToAllVV2Operation", solo())
    op.set_varaintpack_param(json.dumps({"sendCounts": [2]}))
    ins = vv2_solo_inputs(torch.arange(4.0), 2)
    ins[1] = counts(2, 0)
    with pytest.raises(
        RuntimeError,
        match=r"inTensors\[1\] has 2 elements but "
        r"set_varaintpack_param bound 1",
    ):
        op.execute(ins)


def test_binding_without_an_operation_fails_and_binds_nothing():
    # The keys are the held operation's host-count inputs: before a successful set_param there is
    # none to bind to, and a binding accepted then would be dropped by the next set_param anyway.
    op = OperationTorch("AllToAllVV2Operation")
    result = json.loads(op.set_varaintpack_param(json.dumps({"sendCounts": [2]})))
    assert result["result"] == 1 and "before a successful set_param" in result["message"], result
    assert json.loads(op.set_param(solo(quantType=0)))["result"] == 1
    result = json.loads(op.set_varaintpack_param(json.dumps({"sendCounts": [2]})))
    assert result["result"] == 1 and "the last set_param failed" in result["message"], result
