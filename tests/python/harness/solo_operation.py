"""OperationTorch in a one-rank, one-thread job (rankSize 1, commMode 1), for the tests of its
Python surface that need no peers: the op names, ATB's dtype codes, the params of such a job, an
operation built from them, and a one-rank AllToAllVV2's inputs and golden output.
"""

import json

import torch

import collops  # noqa: F401  (registers torch.classes.OperationTorch)

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


def vv2_solo_inputs(x, n):
    return [x, counts(n), counts(0), counts(n), counts(0), torch.zeros(n, dtype=torch.int8)]


def vv2_solo_golden(x, count, displ):
    """What a one-rank AllToAllVV2 gives: `count` elements of x from `displ`, as [1, count]."""
    return x.flatten()[displ : displ + count].reshape(1, count)
