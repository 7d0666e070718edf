"""OperationTorch's tensor checks in one process: every dtype round-trips, non-contiguous,
non-strided and non-CPU tensors, wrong shapes and counts, and in-place calls.

Anything that executes uses rankSize 1 in commMode 1 (a one-thread job, solo_operation.py), so
these tests need no peers; the collective behaviour itself is in test_operation_torch_threads.py /
_procs.py.
"""

import pytest
import torch

from solo_operation import ACL_CODES, counts, make, solo, vv2_solo_golden


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
