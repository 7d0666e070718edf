"""OperationTorch's Python surface in one process: return conventions, param and binding errors,
infer_shape codes, tensor checks, dtype mapping, the torch_npu shim and the library loader.

Anything that executes uses rankSize 1 in commMode 1 (a one-thread job), so these tests need no
peers; the collective behaviour itself is in test_operation_torch_threads.py / _procs.py.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import collops  # noqa: F401  (registers torch.classes.OperationTorch)
from repo_paths import REPO, SHIM_PYTHONPATH

OperationTorch = torch.classes.OperationTorch.OperationTorch

ALL_OPS = [
    "AllReduceOperation",
    "AllGatherOperation",
    "AllGatherVOperation",
    "ReduceScatterOperation",
    "ReduceScatterVOperation",
    "BroadcastOperation",
    "AllToAllOperation",
    "AllToAllVOperation",
    "AllToAllVV2Operation",
    "SendOperation",
    "RecvOperation",
    "SendRecvOperation",
    "BarrierOperation",
]
# torch dtype -> ACL DataType code (ATB's aclDataType numbering).
ACL_CODES = {
    torch.float32: 0,
    torch.float16: 1,
    torch.int8: 2,
    torch.int32: 3,
    torch.uint8: 4,
    torch.int16: 6,
    torch.int64: 9,
    torch.float64: 11,
    torch.bool: 12,
    torch.bfloat16: 27,
}


def solo(**extra):
    """Params of a one-rank, one-thread job."""
    return json.dumps(
        {"rank": 0, "rankSize": 1, "commMode": 1, "commDomain": "pytest-solo", **extra}
    )


def make(name, param):
    op = OperationTorch(name)
    result = json.loads(op.set_param(param))
    assert result == {"result": 0, "message": ""}, result
    return op


def counts(*values):
    return torch.tensor(values, dtype=torch.int64)


# ---- construction and set_param -----------------------------------------------------------------

# Point-to-point ops need a peer, so they get a 2-rank param; AllToAllV requires its counts;
# the rest run as a one-rank job.
PEER_PARAMS = {
    "SendOperation": {"rank": 0, "rankSize": 2, "destRank": 1},
    "RecvOperation": {"rank": 1, "rankSize": 2, "srcRank": 0},
    "SendRecvOperation": {"rank": 1, "rankSize": 3, "destRank": 2, "srcRank": 0},
    "AllToAllVOperation": {
        "rank": 0,
        "rankSize": 1,
        "sendCounts": [1],
        "sdispls": [0],
        "recvCounts": [1],
        "rdispls": [0],
    },
}


@pytest.mark.parametrize("name", ALL_OPS)
def test_every_operation_constructs_and_accepts_params(name):
    op = OperationTorch(name)
    param = json.dumps(PEER_PARAMS[name]) if name in PEER_PARAMS else solo()
    assert json.loads(op.set_param(param)) == {"result": 0, "message": ""}


def test_unknown_operation_name_raises_listing_known_ones():
    with pytest.raises(RuntimeError, match='unknown operation "AllReduceOp".*AllReduceOperation'):
        OperationTorch("AllReduceOp")


def test_failed_set_param_leaves_no_operation():
    # ATB-style scripts ignore set_param's result: after a rejected set_param (quantType 3, ATB's
    # QUANT_TYPE_MAX, is out of range) the previous "sum" operation must not run in place of the
    # "max" asked for. Every method fails with set_param's own error instead.
    op = make("AllReduceOperation", solo(allReduceType="sum"))
    bad = json.loads(op.set_param(solo(allReduceType="max", quantType=3)))
    assert bad["result"] == 1 and "quantType" in bad["message"], bad
    x = torch.arange(6, dtype=torch.float32)
    with pytest.raises(RuntimeError) as raised:
        op.execute([x])
    assert "the last set_param failed" in str(raised.value)
    assert bad["message"] in str(raised.value)
    for call in (
        lambda: op.execute_out([x], [torch.empty(6)]),
        lambda: op.execute_sync([x], [torch.empty(6)], 0),
        lambda: op.empty_shared([2], torch.float32),
    ):
        with pytest.raises(RuntimeError, match="quantType"):
            call()
    for result in (json.loads(op.infer_shape([x])), json.loads(op.setup([x], [torch.empty(6)]))):
        assert result["result"] == 1 and "quantType" in result["message"], result
    # A later successful set_param makes the object usable again.
    make_ok = json.loads(op.set_param(solo(allReduceType="max")))
    assert make_ok == {"result": 0, "message": ""}
    (y,) = op.execute([x])
    assert torch.equal(y, x)


def test_execute_after_failed_set_param_names_its_error_once():
    op = OperationTorch("AllReduceOperation")
    bad = json.loads(
        op.set_param(json.dumps({"rank": 0, "rankSize": 1, "commMode": 1, "quantType": 3}))
    )
    assert bad["result"] == 1
    with pytest.raises(RuntimeError) as raised:
        op.execute([torch.ones(2)])
    first_line = str(raised.value).splitlines()[0]
    assert first_line.count("OperationTorch(AllReduceOperation).execute") == 1, first_line
    assert first_line.startswith(
        "ERROR_INVALID_PARAM (1): OperationTorch(AllReduceOperation)"
        ".execute: no operation to run: the last set_param failed"
    ), first_line
    assert bad["message"] in first_line and "quantType" in first_line, first_line


def test_update_param_replaces_the_operation():
    op = make("AllGatherOperation", json.dumps({"rank": 0, "rankSize": 2}))
    x = torch.zeros(2, 3, dtype=torch.float16)
    assert json.loads(op.infer_shape([x]))["shape"] == [[2, 2, 3]]
    assert json.loads(op.update_param(json.dumps({"rank": 1, "rankSize": 3}))) == {
        "result": 0,
        "message": "",
    }
    assert json.loads(op.infer_shape([x]))["shape"] == [[3, 2, 3]]
    bad = json.loads(op.update_param(json.dumps({"rank": 3, "rankSize": 3})))
    assert bad["result"] == 1 and "rank" in bad["message"]
    after = json.loads(op.infer_shape([x]))  # no operation until an update succeeds
    assert after["result"] == 1 and bad["message"] in after["message"], after


# Bad params give result 1 with a message naming the field.
PARAM_ERRORS = [
    ("AllReduceOperation", {"rank": 0, "rankSize": 2, "rankRoot": -1}, "rankRoot"),
    ("AllReduceOperation", {"rank": 0, "rankSize": 2, "rankRoot": 2}, "rankRoot"),
    ("BroadcastOperation", {"rank": 0, "rankSize": 2, "rankRoot": 5}, "rankRoot"),
    ("AllReduceOperation", {"rank": 0, "rankSize": 2, "backend": "lccc"}, "backend"),
    ("AllReduceOperation", {"rank": 0, "rankSize": 2, "allReduceType": "proo"}, "allReduceType"),
    ("ReduceScatterOperation", {"rank": 0, "rankSize": 2, "reduceType": "avg"}, "reduceType"),
    ("AllReduceOperation", {"rank": 0, "rankSize": 2, "commMode": 5}, "commMode"),
    ("AllGatherOperation", {"rank": 0, "rankSize": 2, "rsv": [1]}, "rsv"),
    ("AllReduceOperation", {"rank": 2, "rankSize": 2}, "rank"),
    ("AllReduceOperation", {"rank": 0, "rankSize": 0}, "rankSize"),
    ("AllReduceOperation", {"rank": "0", "rankSize": 2}, "rank"),
    ("AllReduceOperation", {"rank": 0, "rankSize": 2, "ranksize": 2}, "ranksize"),
    ("AllReduceOperation", {"rank": 0, "rankSize": 2, "commDomain": "d" * 129}, "commDomain"),
    (
        "AllToAllVOperation",
        {
            "rank": 0,
            "rankSize": 2,
            "sendCounts": [1, 1, 1],
            "sdispls": [0, 1],
            "recvCounts": [1, 1],
            "rdispls": [0, 1],
        },
        "sendCounts",
    ),
    (
        "AllToAllVOperation",
        {
            "rank": 0,
            "rankSize": 2,
            "sendCounts": [1, -1],
            "sdispls": [0, 1],
            "recvCounts": [1, 1],
            "rdispls": [0, 1],
        },
        "sendCounts",
    ),
    (
        "AllToAllVOperation",
        {
            "rank": 0,
            "rankSize": 2,
            "sendCounts": [1, 1],
            "sdispls": [0, 1],
            "recvCounts": [1, 1],
            "rdispls": [0, -4],
        },
        "rdispls",
    ),
    (
        "ReduceScatterVOperation",
        {"rank": 0, "rankSize": 2, "sendCounts": [2], "sdispls": [0, 2], "recvCount": 2},
        "sendCounts",
    ),
    (
        "ReduceScatterVOperation",
        {"rank": 0, "rankSize": 2, "sendCounts": [2, 3], "sdispls": [0, -2], "recvCount": 2},
        "sdispls",
    ),
    ("SendOperation", {"rank": 0, "rankSize": 2, "destRank": 0}, "destRank"),
    ("RecvOperation", {"rank": 1, "rankSize": 2, "srcRank": 2}, "srcRank"),
    ("SendRecvOperation", {"rank": 1, "rankSize": 2, "destRank": 0, "srcRank": 1}, "srcRank"),
]


@pytest.mark.parametrize(
    "name,param,field",
    PARAM_ERRORS,
    ids=[f"{n}-{f}-{i}" for i, (n, _, f) in enumerate(PARAM_ERRORS)],
)
def test_bad_param_gives_result_1_naming_the_field(name, param, field):
    result = json.loads(OperationTorch(name).set_param(json.dumps(param)))
    assert result["result"] == 1, result
    assert field in result["message"], result


def test_malformed_param_json_gives_result_1():
    result = json.loads(OperationTorch("AllReduceOperation").set_param('{"rank": 0,'))
    assert result["result"] == 1 and result["message"], result


def test_execute_before_set_param_raises():
    with pytest.raises(RuntimeError, match="ERROR_INVALID_PARAM.*before a successful set_param"):
        OperationTorch("AllReduceOperation").execute([torch.ones(2)])


# ---- set_varaintpack_param ----------------------------------------------------------------------


def vv2_solo_inputs(x, n):
    return [x, counts(n), counts(0), counts(n), counts(0), torch.zeros(n, dtype=torch.int8)]


def vv2_solo_golden(x, count, displ):
    """What a one-rank AllToAllVV2 gives: `count` elements of x from `displ`, as [1, count]."""
    return x.flatten()[displ : displ + count].reshape(1, count)


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


# ---- infer_shape and setup ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(ACL_CODES), ids=str)
def test_infer_shape_reports_acl_dtype_format_shape(dtype):
    op = make("AllGatherOperation", json.dumps({"rank": 1, "rankSize": 2}))
    result = json.loads(op.infer_shape([torch.zeros(3, 4, dtype=dtype)]))
    assert result == {
        "result": 0,
        "message": "",
        "num": 1,
        "dtype": [ACL_CODES[dtype]],
        "format": [2],
        "shape": [[2, 3, 4]],
    }


def test_infer_shape_8_dim_all_gather_input_gives_8():
    op = make("AllGatherOperation", json.dumps({"rank": 0, "rankSize": 2}))
    result = json.loads(op.infer_shape([torch.zeros([1] * 8)]))
    assert result["result"] == 8 and result["num"] == 0, result


def test_infer_shape_reduce_scatter_indivisible_dim0_gives_8():
    op = make("ReduceScatterOperation", json.dumps({"rank": 0, "rankSize": 2}))
    result = json.loads(op.infer_shape([torch.zeros(3, 2)]))
    assert result["result"] == 8, result
    assert json.loads(op.infer_shape([torch.zeros(4, 2)]))["shape"] == [[2, 2]]


def test_infer_shape_more_than_8_dims_gives_16():
    op = make("AllReduceOperation", json.dumps({"rank": 0, "rankSize": 2}))
    result = json.loads(op.infer_shape([torch.zeros([1] * 9)]))
    assert result["result"] == 16 and "9 dims" in result["message"], result


def test_infer_shape_unsupported_dtype_gives_6():
    op = make("AllReduceOperation", json.dumps({"rank": 0, "rankSize": 2}))
    result = json.loads(op.infer_shape([torch.zeros(2, dtype=torch.complex64)]))
    assert result["result"] == 6 and "complex" in result["message"].lower(), result


def test_setup_reports_workspace_size():
    op = make("AllToAllOperation", solo(transpose=True))
    x = torch.zeros(3, 4)
    result = json.loads(op.setup([x], [torch.empty(3, 4)]))
    assert result["result"] == 0 and "workspace_size" in result, result
    bad = json.loads(op.setup([x], [torch.empty(4, 3)]))
    assert bad["result"] != 0 and bad["message"], bad


def test_a_rank_table_that_is_not_utf8_is_reported_as_text(tmp_path):
    """The table's bytes quoted in the error are escaped: the report stays JSON and names the file
    (a JSON type_error from the binding used to replace it)."""
    table = tmp_path / "table.json"
    table.write_bytes(
        b'{"server_count": "1", "server_list": [{"server_id": "\xff\xfe", "device": []}]}'
    )
    op = make(
        "AllReduceOperation",
        json.dumps(
            {
                "rank": 0,
                "rankSize": 1,
                "backend": "hccl",
                "commDomain": "pytest-utf8",
                "rankTableFile": str(table),
            }
        ),
    )
    result = json.loads(op.setup([torch.ones(2)], [torch.empty(2)]))
    assert result["result"] == 1, result
    assert f"rank table {table}: malformed JSON" in result["message"], result
    assert "\\xFF" in result["message"], result


def test_execute_sync_checks_the_workspace():
    op = make("AllToAllOperation", solo(transpose=True))
    x, out = torch.arange(12.0).reshape(3, 4), torch.empty(3, 4)
    size = json.loads(op.setup([x], [out]))["workspace_size"]
    if size > 0:
        with pytest.raises(RuntimeError, match="ERROR_INVALID_WORKSPACE"):
            op.execute_sync([x], [out], torch.empty(size - 1, dtype=torch.uint8))
    done = json.loads(op.execute_sync([x], [out], torch.empty(size, dtype=torch.uint8)))
    assert done["result"] == 0 and done["workspace_size"] == size
    assert torch.equal(out, x)


def test_execute_sync_takes_atbs_workspace_size_too():
    # ATB's form: execute_sync(inTensors, outTensors, int64 workspaceSize).
    op = make("AllToAllOperation", solo(transpose=True))
    x = torch.arange(12.0).reshape(3, 4)
    out = torch.empty(3, 4)
    size = json.loads(op.setup([x], [out]))["workspace_size"]
    done = json.loads(op.execute_sync([x], [out], size))
    assert done["result"] == 0 and done["workspace_size"] == size
    assert torch.equal(out, x)
    if size > 0:
        with pytest.raises(RuntimeError, match="ERROR_INVALID_WORKSPACE"):
            op.execute_sync([x], [out], size - 1)
    with pytest.raises(RuntimeError, match="ERROR_INVALID_WORKSPACE.*negative"):
        op.execute_sync([x], [out], -1)
    with pytest.raises(RuntimeError, match="tensor or a byte count"):
        op.execute_sync([x], [out], "8")
    reduced = make("AllReduceOperation", solo())
    y = torch.empty(4)
    assert json.loads(reduced.execute_sync([torch.ones(4)], [y], 0))["result"] == 0
    assert torch.equal(y, torch.ones(4))


# ---- tensors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(ACL_CODES), ids=str)
def test_every_dtype_round_trips_through_execute(dtype):
    op = make("AllGatherOperation", solo())
    x = (torch.arange(6) % 2 if dtype == torch.bool else torch.arange(6)).to(dtype).reshape(2, 3)
    (y,) = op.execute([x])
    assert y.dtype == dtype and torch.equal(y[0], x)


def test_non_contiguous_inputs_are_made_contiguous():
    # As ATB's BuildVariantPack does; the caller's tensor is left as it was.
    op = make("AllGatherOperation", solo())
    base = torch.arange(12.0).reshape(3, 4)
    (y,) = op.execute([base.t()])
    assert torch.equal(y[0], base.t().contiguous())
    out = torch.empty(1, 4, 3)
    op.execute_out([base.t()], [out])
    assert torch.equal(out[0], base.t().contiguous())
    assert torch.equal(base, torch.arange(12.0).reshape(3, 4))
    # A non-contiguous x of AllToAllVV2 is sent in its logical (row-major) order.
    vv2 = make("AllToAllVV2Operation", solo())
    (y,) = vv2.execute(
        [base.t(), counts(4), counts(5), counts(4), counts(0), torch.zeros(4, dtype=torch.int8)]
    )
    assert torch.equal(y, vv2_solo_golden(base.t().contiguous(), 4, 5))


def test_non_contiguous_output_raises_saying_so():
    op = make("AllReduceOperation", solo())
    with pytest.raises(RuntimeError, match=r"outTensors\[0\] is not contiguous"):
        op.execute_out([torch.zeros(4, 4)], [torch.zeros(4, 4).t()])


# torch warns that sparse CSR support is in beta whenever a CSR tensor is made; the test is
# about collops' refusal, not torch's support.
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
@pytest.mark.parametrize(
    "make_tensor, layout",
    [
        (lambda: torch.ones(4, 4).to_sparse(), "torch.sparse_coo"),
        (lambda: torch.ones(4, 4).to_sparse_csr(), "torch.sparse_csr"),
        (lambda: torch.ones(4, 4).to_mkldnn(), "torch._mkldnn"),
    ],
    ids=["coo", "csr", "mkldnn"],
)
def test_a_tensor_that_is_not_strided_raises_naming_the_slot(make_tensor, layout):
    # Refused by name with ERROR_INVALID_TENSOR_FORMAT, not torch's "unsupported memory format
    # option Contiguous" from making it contiguous; as an input and as an output.
    op = make("AllReduceOperation", solo())
    text = rf"must be a dense \(strided\) tensor, got layout {layout}; call .to_dense\(\) first"
    with pytest.raises(RuntimeError, match=r"ERROR_INVALID_TENSOR_FORMAT.*inTensors\[0\] " + text):
        op.execute([make_tensor()])
    with pytest.raises(RuntimeError, match=r"outTensors\[0\] " + text):
        op.execute_out([torch.ones(4, 4)], [make_tensor()])
    (y,) = op.execute([torch.ones(4, 4)])  # the operation still runs
    assert torch.equal(y, torch.ones(4, 4))


def test_non_cpu_input_raises_naming_the_device():
    op = make("AllReduceOperation", solo())
    with pytest.raises(RuntimeError, match=r"inTensors\[0\] is on device meta"):
        op.execute([torch.zeros(4, device="meta")])


def test_wrong_output_shape_raises_with_status_name():
    op = make("AllReduceOperation", solo())
    with pytest.raises(
        RuntimeError,
        match=r"ERROR_INVALID_TENSOR_\w+ \(\d+\): "
        r"OperationTorch\(AllReduceOperation\)\.execute_out",
    ):
        op.execute_out([torch.zeros(4)], [torch.zeros(5)])


def test_wrong_input_count_raises():
    op = make("AllReduceOperation", solo())
    with pytest.raises(RuntimeError, match="ERROR_INVALID_IN_TENSOR_NUM"):
        op.execute([torch.zeros(4), torch.zeros(4)])


def test_reducible_only_op_rejects_bool():
    op = make("AllReduceOperation", solo())
    with pytest.raises(RuntimeError, match="ERROR_INVALID_TENSOR_DTYPE"):
        op.execute([torch.zeros(4, dtype=torch.bool)])


def test_output_too_large_for_memory_raises_from_infer_shape():
    # x is empty, but y_shape asks for 2 rows of x's 2^61 columns: 2^64 bytes.
    op = make("AllGatherVOperation", solo())
    with pytest.raises(
        RuntimeError,
        match=r"ERROR_INVALID_TENSOR_SIZE.*outTensors\[0\] \(out\) "
        r"has shape \[2, 2305843009213693952\]",
    ):
        op.execute([torch.empty(0, 2**61), counts(0), counts(0), counts(0), torch.empty(2)])


def test_all_to_all_in_place_raises_naming_the_overlap():
    op = make("AllToAllOperation", solo())
    x = torch.arange(8.0)
    with pytest.raises(
        RuntimeError,
        match=r"ERROR_INVALID_PARAM.*y overlaps x \(x starts at byte 0 "
        r"of y\); peers may still read x",
    ):
        op.execute_out([x], [x])


def test_all_reduce_in_place_works_and_a_shifted_output_raises():
    op = make("AllReduceOperation", solo())
    buffer = torch.arange(9.0)
    op.execute_out([buffer[:8]], [buffer[:8]])
    assert torch.equal(buffer, torch.arange(9.0))
    with pytest.raises(
        RuntimeError,
        match=r"y overlaps x \(y starts at byte 4 of x\); the one "
        r"in-place form supported is x == y",
    ):
        op.execute_out([buffer[:8]], [buffer[1:]])


# ---- loading and the torch_npu shim (fresh interpreters) ----------------------------------------


def run_python(code, **env):
    """Runs `code` in a fresh interpreter with the shim and the source tree on PYTHONPATH (and
    the library this process loaded selected as here: COLLOPS_BUILD_DIR or COLLOPS_LIBRARY_DIR)."""
    full_env = dict(os.environ, PYTHONPATH=SHIM_PYTHONPATH, **env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )


def test_missing_library_gives_import_error_saying_how_to_get_it():
    done = run_python("import collops", COLLOPS_LIBRARY_DIR="/nonexistent-collops")
    assert done.returncode != 0
    assert "ImportError" in done.stderr, done.stderr
    assert "/nonexistent-collops/libcollops_torch.so (COLLOPS_LIBRARY_DIR)" in done.stderr
    assert "pip install --no-build-isolation" in done.stderr, done.stderr
    assert "COLLOPS_BUILD_DIR=" in done.stderr, done.stderr


def test_torch_npu_shim_runs_atb_idioms():
    done = run_python(
        "import torch, torch_npu\n"
        "torch_npu.npu.set_device(3)\n"
        "assert torch.npu.current_device() == 3 and torch_npu.npu.current_device() == 3\n"
        "x = torch.ones(2)\n"
        "assert x.npu() is x and x.npu().device.type == 'cpu'\n"
        "torch.npu.synchronize()\n"
        "assert torch_npu.npu_format_cast(x, 2) is x\n"
        "op = torch.classes.OperationTorch.OperationTorch('AllToAllVV2Operation')\n"
        "import collops.compat.torch_npu as shim\n"
        "assert torch_npu is shim\n"
        "print('ok')\n"
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_torch_npu_shim_keeps_npu_moves_on_cpu_and_maps_hccl_to_collops():
    done = run_python(
        "import torch, torch_npu\n"
        "import torch.distributed as dist\n"
        "x = torch.ones(2, dtype=torch.int32)\n"
        "for moved in (x.to('npu:1'), x.to('npu'), x.to(device='npu:0'),\n"
        "              x.to('npu:0', torch.float64), x.to(device='npu:0', dtype=torch.float64)):\n"
        "    assert moved.device.type == 'cpu' and torch.equal(moved.int(), x), moved\n"
        "assert x.to('npu:0', torch.float64).dtype == torch.float64\n"
        "assert x.to(torch.float16).dtype == torch.float16 and x.to('cpu') is x\n"
        "m = torch.nn.Linear(2, 2)\n"
        "assert m.to('npu:3') is m and m.weight.device.type == 'cpu'\n"
        "assert m.to('npu:0', torch.float64).weight.dtype == torch.float64\n"
        "def f(x):  # compiled .to calls, npu or not, stay in one graph\n"
        "    return x.to(torch.float64) * 2 + x.to('npu:0').sum() + x.to(device='npu').sum()\n"
        "y = torch.arange(4.0, requires_grad=True)\n"
        "got = torch.compile(f, fullgraph=True)(y)\n"
        "assert torch.equal(got, f(y)) and got.dtype == torch.float64\n"
        "got.sum().backward()\n"
        "assert torch.equal(y.grad, torch.full((4,), 10.0)), y.grad\n"
        "for bad in ('npu:x', 'npu:-1'):\n"
        "    try:\n"
        "        x.to(bad)\n"
        "        print('moved to', bad)\n"
        "    except RuntimeError as e:\n"
        "        assert bad in str(e), e\n"
        "assert 'hccl' in dist.Backend.backend_list\n"
        "assert dist.Backend.backend_capability['hccl'] == ['cpu']\n"
        "dist.init_process_group('hccl', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
        "from collops import _c10d_backend as backend\n"
        "assert backend.communicator_name() == '', 'no collective yet'\n"
        "t = torch.full((3,), 2.0)\n"
        "dist.all_reduce(t)\n"
        "assert backend.communicator_name() == 'lccl', backend.communicator_name()\n"
        "assert torch.equal(t, torch.full((3,), 2.0))\n"
        "print('ok')\n"
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_torch_npu_shim_makes_factory_calls_on_npu_cpu_tensors():
    done = run_python(
        "import torch, torch_npu\n"
        "x = torch.arange(3.0)\n"
        "made = [torch.ones(2, device='npu:0'), torch.zeros(2, 3, device='npu'),\n"
        "        torch.empty(4, dtype=torch.int8, device='npu:1'), torch.full((2,), 7, device='npu'),\n"
        "        torch.randn(5, device='npu:0'), torch.arange(4, device='npu'),\n"
        "        torch.tensor([1, 2], device='npu:0'), torch.zeros_like(x, device='npu'),\n"
        "        x.new_ones(2, device='npu:0'), torch.eye(2, device='npu')]\n"
        "assert all(t.device.type == 'cpu' for t in made), [t.device for t in made]\n"
        "assert torch.equal(made[3], torch.full((2,), 7)) and made[2].dtype == torch.int8\n"
        "assert torch.equal(made[6], torch.tensor([1, 2]))\n"
        "def f(y):  # in compiled code too, in the one graph\n"
        "    return y + torch.ones(3, device='npu:0') + torch.arange(3, device='npu')\n"
        "assert torch.equal(torch.compile(f, fullgraph=True)(x), f(x))\n"
        "try:\n"
        "    torch.ones(2, device='npu:x')\n"
        "    print('made on npu:x')\n"
        "except RuntimeError as e:\n"
        "    assert 'npu:x' in str(e), e\n"
        "assert torch.ones(1, device='cpu').device.type == 'cpu'\n"
        "import torch_npu as again  # a second install leaves one mode, not two\n"
        "again.install()\n"
        "from torch.overrides import _get_current_function_mode_stack as stack\n"
        "assert len(stack()) == 1, stack()\n"
        "import threading  # modes are per thread: another thread installs for itself\n"
        "seen = []\n"
        "def other():\n"
        "    torch_npu.install()\n"
        "    seen.append(torch.ones(1, device='npu:0').device.type)\n"
        "worker = threading.Thread(target=other)\n"
        "worker.start()\n"
        "worker.join()\n"
        "assert seen == ['cpu'], seen\n"
        "print('ok')\n"
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_install_torch_npu_does_not_shadow_a_real_one():
    done = run_python(
        "import sys, types\n"
        "sys.modules['torch_npu'] = types.ModuleType('torch_npu')\n"
        "import collops\n"
        "try:\n"
        "    collops.compat.install_torch_npu()\n"
        "except RuntimeError as e:\n"
        "    print('refused' if 'not shadowing' in str(e) else e)\n"
    )
    assert done.stdout.strip() == "refused", done.stdout + done.stderr


def test_atb_home_path_library_name_loads_the_same_library():
    # ATB scripts load $ATB_HOME_PATH/lib/libatb_test_framework.so themselves; the build puts
    # that name beside libcollops_torch.so, as a library that loads it.
    alias = os.path.join(os.path.dirname(collops.library_path()), "libatb_test_framework.so")
    assert os.path.exists(alias), f"{alias} missing: torch_bindings/CMakeLists.txt builds it"
    atb_home = os.path.dirname(os.path.dirname(alias))
    for prelude, epilogue in (
        ("import torch\n", "import collops\n"),
        ("import torch, collops\n", ""),
    ):
        done = run_python(
            prelude
            + f"torch.classes.load_library({alias!r})\n"
            + epilogue
            + "op = torch.classes.OperationTorch.OperationTorch('AllReduceOperation')\n"
            "maps = open('/proc/self/maps').read().splitlines()\n"
            "paths = {line.split()[-1] for line in maps if 'libcollops_torch' in line}\n"
            "assert len(paths) == 1, paths\n"
            "print('ok')\n",
            ATB_HOME_PATH=atb_home,
        )
        assert done.returncode == 0 and done.stdout.strip() == "ok", prelude + done.stderr


def test_atb_home_path_and_another_build_never_load_two_copies(tmp_path):
    # ATB_HOME_PATH names one copy of the library and COLLOPS_BUILD_DIR another (a copy, as an
    # ATB install of another build would hold): only one may load, since a second aborts the
    # process ("Only a single TORCH_LIBRARY can be used to register the namespace OperationTorch").
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(collops.library_path(), lib / "libatb_test_framework.so")
    atb = str(lib / "libatb_test_framework.so")
    build = os.environ.get("COLLOPS_BUILD_DIR", os.path.join(REPO, "build"))
    use = "op = torch.classes.OperationTorch.OperationTorch('AllReduceOperation')\nprint('ok')\n"
    # The ATB script loads its library first: collops uses that copy.
    done = run_python(
        f"import torch\ntorch.classes.load_library({atb!r})\nimport collops\n" + use,
        ATB_HOME_PATH=str(tmp_path),
        COLLOPS_BUILD_DIR=build,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    # collops first: it refuses, naming both files, before anything aborts.
    done = run_python(
        "import collops\n" + use, ATB_HOME_PATH=str(tmp_path), COLLOPS_BUILD_DIR=build
    )
    assert done.returncode != 0 and "ImportError" in done.stderr, done.stderr
    assert "are different files" in done.stderr and atb in done.stderr, done.stderr
