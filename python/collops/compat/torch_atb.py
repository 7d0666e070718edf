"""A CPU ``torch_atb``: ATB's newer Python API over collops' operations.

``import torch_atb`` (with ``<repo>/python/torch_npu_shim`` on ``PYTHONPATH``, as for the
``torch_npu`` shim) gives ATB's param classes with their snake_case fields and defaults --
``AllReduceParam``, ``AllGatherParam``, ``BroadcastParam``, ``ReduceScatterParam``,
``AllToAllParam``, ``LinearParallelParam`` -- and ``Operation(param)`` whose
``forward(list_of_tensors)`` returns the list of outputs::

    param = torch_atb.LinearParallelParam(rank=rank, rank_size=2, backend="lccl",
                                          type=torch_atb.LinearParallelParam.ParallelType.LINEAR_ALL_REDUCE)
    op = torch_atb.Operation(param)
    (y,) = op.forward([x, weight])

Each param becomes the JSON of the collops operation of the same name, and ``Operation`` runs it
through ``torch.classes.OperationTorch.OperationTorch`` (one binding, shared with ATB's test
class). A param collops refuses, and a ``forward`` that fails, raise :class:`OperationError`
carrying the ATB status code and name and the message, which names the field or tensor.
"""

import enum
import json
import re

import torch

import collops  # noqa: F401  (loads the OperationTorch library)

__all__ = [
    "AclDataType",
    "CommMode",
    "OperationError",
    "Operation",
    "AllReduceParam",
    "AllGatherParam",
    "BroadcastParam",
    "ReduceScatterParam",
    "AllToAllParam",
    "LinearParallelParam",
]


class AclDataType(enum.IntEnum):
    """aclDataType, as torch_atb exports it (the values are also module attributes)."""

    ACL_DT_UNDEFINED = -1
    ACL_FLOAT = 0
    ACL_FLOAT16 = 1
    ACL_INT8 = 2
    ACL_INT32 = 3
    ACL_UINT8 = 4
    ACL_INT16 = 6
    ACL_UINT16 = 7
    ACL_UINT32 = 8
    ACL_INT64 = 9
    ACL_UINT64 = 10
    ACL_DOUBLE = 11
    ACL_BOOL = 12
    ACL_BF16 = 27


class CommMode(enum.IntEnum):
    COMM_UNDEFINED = -1
    COMM_MULTI_PROCESS = 0
    COMM_MULTI_THREAD = 1


globals().update(AclDataType.__members__)
globals().update(CommMode.__members__)

_STATUS = re.compile(r"^([A-Z_]+) \((-?\d+)\): ")


class OperationError(RuntimeError):
    """A collops operation refused its params or failed: ``status`` is ATB's code (1
    ERROR_INVALID_PARAM, 8 ERROR_INVALID_TENSOR_DIM, ...), ``status_name`` its name."""

    def __init__(self, status, status_name, message):
        super().__init__(f"{status_name} ({status}): {message}")
        self.status = status
        self.status_name = status_name


# ---- params ---------------------------------------------------------------------------------


def _set_fields(obj, args, kwargs):
    """Sets every field of `obj._FIELDS` ((name, JSON key, default) in ATB's positional order)
    from positional then keyword arguments, the rest to their defaults (a callable default is
    called, so each object gets its own list); too many or unknown arguments are a TypeError."""
    names = [name for name, _, _ in obj._FIELDS]
    if len(args) > len(names):
        raise TypeError(
            f"{type(obj).__name__}() takes at most {len(names)} positional "
            f"arguments ({len(args)} given)"
        )
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names:
            raise TypeError(
                f"{type(obj).__name__}() got an unexpected keyword argument "
                f"{name!r} (fields: {', '.join(names)})"
            )
        values[name] = value
    for name, _, default in obj._FIELDS:
        if name in values:
            setattr(obj, name, values[name])
        else:
            setattr(obj, name, default() if callable(default) else default)


class _Param:
    """Base of the param classes: `_FIELDS` lists (snake_case name, JSON key, default) in ATB's
    positional order; `_OP` names the collops operation."""

    _OP = ""
    _FIELDS = ()
    __slots__ = ()

    def __init__(self, *args, **kwargs):
        _set_fields(self, args, kwargs)

    def _json(self):
        """The collops JSON params: every field, enums as their numbers."""
        out = {}
        for name, key, _ in self._FIELDS:
            if key is None:
                continue
            value = getattr(self, name)
            out[key] = int(value) if isinstance(value, enum.Enum) else value
        if getattr(self, "hccl_comm", None) is not None:
            raise OperationError(
                1,
                "ERROR_INVALID_PARAM",
                f"{type(self).__name__}.hccl_comm: an external HCCL communicator "
                "does not exist on CPU; leave it None (the operation makes its "
                "communicator from comm_domain)",
            )
        return out

    def __repr__(self):
        return f"{type(self).__name__}: {json.dumps(self._json_for_repr())}"

    def _json_for_repr(self):
        try:
            return self._json()
        except OperationError:
            return {name: repr(getattr(self, name)) for name, _, _ in self._FIELDS}

    def _input_num(self):
        return 1

    def _output_num(self):
        return 1


def _comm_fields(backend="hccl"):
    """ATB's communication fields in its usual order."""
    return (
        ("rank", "rank", 0),
        ("rank_size", "rankSize", 0),
        ("rank_root", "rankRoot", 0),
        ("backend", "backend", backend),
        ("hccl_comm", None, None),
        ("comm_mode", "commMode", CommMode.COMM_MULTI_PROCESS),
        ("rank_table_file", "rankTableFile", ""),
        ("comm_domain", "commDomain", ""),
    )


def _param_class(name, op, fields, methods=None):
    names = tuple(f[0] for f in fields)
    namespace = {
        "_OP": op,
        "_FIELDS": fields,
        "__slots__": names,
        "__doc__": f"ATB's {name}: fields {', '.join(names)}; runs collops' {op}.",
    }
    namespace.update(methods or {})
    return type(name, (_Param,), namespace)


def _field(fields, name):
    return next(f for f in fields if f[0] == name)


_COMM = _comm_fields()


class _AllReduceQuantType(enum.IntEnum):
    QUANT_TYPE_UNQUANT = 0
    QUANT_TYPE_UNDEFINED = 0
    QUANT_TYPE_PER_TENSOR = 1
    QUANT_TYPE_PER_CHANNEL = 2
    QUANT_TYPE_MAX = 3


def _all_reduce_json(self):
    out = _Param._json(self)
    # quantType/outDataType go to the op only when set: an op without them takes the others.
    if out.get("quantType") == 0:
        del out["quantType"]
    if out.get("outDataType") == -1:
        del out["outDataType"]
    return out


def _all_reduce_inputs(self):
    return 3 if int(self.quant_type) != 0 else 1


AllReduceParam = _param_class(
    "AllReduceParam",
    "AllReduceOperation",
    _COMM[:3]
    + (("all_reduce_type", "allReduceType", "sum"),)
    + _COMM[3:]
    + (
        ("quant_type", "quantType", _AllReduceQuantType.QUANT_TYPE_UNQUANT),
        ("out_data_type", "outDataType", AclDataType.ACL_DT_UNDEFINED),
    ),
    {"_json": _all_reduce_json, "_input_num": _all_reduce_inputs},
)
AllReduceParam.QuantType = _AllReduceQuantType

AllGatherParam = _param_class("AllGatherParam", "AllGatherOperation", _COMM)

BroadcastParam = _param_class(
    "BroadcastParam", "BroadcastOperation", _COMM, {"_output_num": lambda self: 0}
)

ReduceScatterParam = _param_class(
    "ReduceScatterParam",
    "ReduceScatterOperation",
    _COMM[:3]
    + (("reduce_type", "reduceType", "sum"),)
    + _comm_fields("lccl")[4:5]
    + (_comm_fields("lccl")[5], _comm_fields("lccl")[3])
    + _COMM[6:],
)

AllToAllParam = _param_class(
    "AllToAllParam", "AllToAllOperation", _COMM + (("transpose", "transpose", False),)
)


class _ParallelType(enum.IntEnum):
    UNDEFINED = -1
    LINEAR_ALL_REDUCE = 0
    LINEAR_REDUCE_SCATTER = 1
    ALL_GATHER_LINEAR = 2
    PURE_LINEAR = 3
    ALL_GATHER_LINEAR_REDUCE_SCATTER = 4
    ALLTOALLVC_ALL_GATHER_GMM = 5
    GMM_REDUCE_SCATTER_ALLTOALLVC = 6
    MAX = 7


class _LinearQuantType(enum.IntEnum):
    QUANT_TYPE_UNDEFINED = -1
    QUANT_TYPE_UNQUANT = -1
    QUANT_TYPE_PER_TENSOR = 0
    QUANT_TYPE_PER_CHANNEL = 1
    QUANT_TYPE_PER_GROUP = 2
    QUANT_TYPE_PER_TOKEN = 3
    QUANT_TYPE_MAX = 4


class _Info:
    """A struct field of a param: `_FIELDS` lists (name, JSON key, default) in ATB's order."""

    _FIELDS = ()
    __slots__ = ()

    def __init__(self, *args, **kwargs):
        _set_fields(self, args, kwargs)

    def _json(self):
        return {key: int(getattr(self, name)) for name, key, _ in self._FIELDS}

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)}" for name, _, _ in self._FIELDS)
        return f"{type(self).__name__}({fields})"


class TwoDimTPInfo(_Info):
    """ATB's LinearParallelParam.TwoDimTPInfo: the ag_dim x rs_dim grid of
    ALL_GATHER_LINEAR_REDUCE_SCATTER (type 4). inner_dim_is_ag = 1: consecutive ranks form the
    AllGather groups; 0: they form the ReduceScatter groups (docs/operations.md)."""

    _FIELDS = (
        ("ag_dim", "agDim", 0),
        ("rs_dim", "rsDim", 0),
        ("inner_dim_is_ag", "innerDimIsAg", 1),
    )
    __slots__ = ("ag_dim", "rs_dim", "inner_dim_is_ag")


class MoeInfo(_Info):
    """ATB's LinearParallelParam.MoeInfo, its fields under ATB's camelCase names and its Python
    defaults (0). Its MoE types 5 and 6 are not supported; the other types ignore it."""

    _FIELDS = (
        ("localExpertNums", "localExpertNums", 0),
        ("epSize", "epSize", 0),
        ("tpSize", "tpSize", 0),
    )
    __slots__ = ("localExpertNums", "epSize", "tpSize")


def _linear_parallel_json(self):
    out = _Param._json(self)
    for name, key, cls in (
        ("two_dim_TP_info", "twoDimTPInfo", TwoDimTPInfo),
        ("moe_info", "moeInfo", MoeInfo),
    ):
        info = getattr(self, name)
        if not isinstance(info, cls):
            raise OperationError(
                1,
                "ERROR_INVALID_PARAM",
                f"LinearParallelParam.{name} = {info!r} is not a LinearParallelParam.{cls.__name__}",
            )
        out[key] = info._json()
    return out


LinearParallelParam = _param_class(
    "LinearParallelParam",
    "LinearParallelOperation",
    (("trans_weight", "transWeight", True),)
    + _COMM[:3]
    + (("has_residual", "hasResidual", False),)
    + _COMM[3:7]
    + (
        ("type", "type", _ParallelType.LINEAR_ALL_REDUCE),
        ("keep_intermediate", "keepIntermediate", False),
        ("quant_type", "quantType", _LinearQuantType.QUANT_TYPE_UNQUANT),
        ("quant_group_size", "quantGroupSize", 0),
        ("out_data_type", "outDataType", AclDataType.ACL_DT_UNDEFINED),
        _COMM[7],
        ("two_dim_TP_info", None, TwoDimTPInfo),
        # ATB's param default is its C++ struct's (1, 1, 1), not MoeInfo()'s zeros.
        ("moe_info", None, lambda: MoeInfo(1, 1, 1)),
    ),
    {
        "_json": _linear_parallel_json,
        # x, weight [, bias, scale (quantised)] [, residual] [, perTokenScale (PER_TOKEN)]
        "_input_num": lambda self: (
            2
            + (2 if int(self.quant_type) != -1 else 0)
            + (1 if self.has_residual else 0)
            + (1 if int(self.quant_type) == 3 else 0)
        ),
        "_output_num": lambda self: 2 if self.keep_intermediate else 1,
    },
)
LinearParallelParam.ParallelType = _ParallelType
LinearParallelParam.QuantType = _LinearQuantType
LinearParallelParam.TwoDimTPInfo = TwoDimTPInfo
LinearParallelParam.MoeInfo = MoeInfo

_PARAM_CLASSES = (
    AllReduceParam,
    AllGatherParam,
    BroadcastParam,
    ReduceScatterParam,
    AllToAllParam,
    LinearParallelParam,
)


# ---- the operation --------------------------------------------------------------------------


class Operation:
    """ATB's torch_atb.Operation: built from a param, run by ``forward(tensors) -> list``."""

    def __init__(self, param):
        if not isinstance(param, _PARAM_CLASSES):
            raise TypeError(
                f"torch_atb.Operation: expected one of "
                f"{', '.join(c.__name__ for c in _PARAM_CLASSES)}, "
                f"got {type(param).__name__}"
            )
        self._param_name = type(param).__name__
        self._name = param._OP
        self._input_num = param._input_num()
        self._output_num = param._output_num()
        self._op = torch.classes.OperationTorch.OperationTorch(param._OP)
        result = json.loads(self._op.set_param(json.dumps(param._json())))
        if result["result"] != 0:
            raise OperationError(
                result["result"],
                _status_name(result["message"], result),
                f"torch_atb.Operation({self._param_name}): {result['message']}",
            )

    @property
    def name(self):
        return self._name

    @property
    def input_num(self):
        return self._input_num

    @property
    def output_num(self):
        return self._output_num

    def forward(self, tensors):
        """Runs the operation on `tensors` (a list, in the op's input order) and returns its
        outputs as a list (an empty one for BroadcastParam, which works in place)."""
        try:
            return self._op.execute(list(tensors))
        except RuntimeError as e:
            text = str(e)
            match = _STATUS.search(text)
            if match is None:
                raise
            raise OperationError(
                int(match.group(2)),
                match.group(1),
                f"torch_atb.Operation({self._param_name}).forward: {text[match.end() :]}",
            ) from None

    def __repr__(self):
        return (
            f"op name: {self._name}, input_num: {self._input_num}, output_num: {self._output_num}"
        )


_STATUS_NAMES = {
    0: "NO_ERROR",
    1: "ERROR_INVALID_PARAM",
    3: "ERROR_INTERNAL_ERROR",
    5: "ERROR_INVALID_IN_TENSOR_NUM",
    6: "ERROR_INVALID_TENSOR_DTYPE",
    7: "ERROR_INVALID_TENSOR_FORMAT",
    8: "ERROR_INVALID_TENSOR_DIM",
    9: "ERROR_INVALID_TENSOR_SIZE",
    13: "ERROR_INVALID_TENSOR_INI_MATCH",
    14: "ERROR_INVALID_TENSOR_ADDR",
    15: "ERROR_INVALID_TENSOR_NUM",
    16: "ERROR_INVALID_TENSOR_DIM_NUM",
    19: "ERROR_INVALID_CONTEXT_ADDR",
    22: "ERROR_INVALID_WORKSPACE_SIZE",
    23: "ERROR_INVALID_WORKSPACE_ADDR",
    25: "ERROR_COMM_FAIL",
    27: "ERROR_OUT_OF_HOST_MEMORY",
    28: "ERROR_COMM_EMPTY",
    100: "ERROR_TIMEOUT",
    101: "ERROR_PEER_LOST",
    102: "ERROR_RANK_MISMATCH",
    103: "ERROR_BACKEND_UNAVAILABLE",
}


def _status_name(message, result):
    """set_param's JSON carries the code; the names are collops' (ATB's numbering)."""
    return _STATUS_NAMES.get(result["result"], "UNKNOWN_STATUS")
