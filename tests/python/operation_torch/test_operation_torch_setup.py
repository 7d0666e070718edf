"""OperationTorch's infer_shape and setup in one process: ATB's dtype, format and shape codes,
the workspace size, and rank tables that are not UTF-8.

Anything that executes uses rankSize 1 in commMode 1 (a one-thread job, solo_operation.py), so
these tests need no peers; the collective behaviour itself is in test_operation_torch_threads.py /
_procs.py.
"""

import json

import pytest
import torch

from solo_operation import ACL_CODES, make, solo


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
