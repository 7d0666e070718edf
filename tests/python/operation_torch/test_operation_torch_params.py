"""OperationTorch's construction and set_param in one process: every op constructs, unknown names
and bad or malformed params give result 1 naming the field, and a failed set_param leaves no
operation.

Anything that executes uses rankSize 1 in commMode 1 (a one-thread job, solo_operation.py), so
these tests need no peers; the collective behaviour itself is in test_operation_torch_threads.py /
_procs.py.
"""

import json

import pytest
import torch

from solo_operation import ALL_OPS, OperationTorch, make, solo


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
