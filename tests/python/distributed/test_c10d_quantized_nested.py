"""torch.distributed calls in which one rank's tensor is quantized or nested while its peers pass
plain float32 ones. Both are strided, but no plain buffer of their values; torch has no kernel of
its c10d ops for them (QuantizedCPU, NestedTensorCPU, AutogradNestedTensor), so the dispatcher
raised NotImplementedError on that rank alone and its peers waited for the group's timeout.
collops fills those (op, key) pairs (torch_bindings/missing_c10d_kernels.cpp): on a "collops"
group the call reaches the backend, which refuses the tensor by name and tells its peers, so every
rank ends at once; on any other group the kernel raises the NotImplementedError torch raised,
word for word, and never hands the tensor to the backend (gloo would move a quantized tensor's
integers without its scale). Run on 2 and 3 ranks, the refusing rank the last; every call of
every rank is timed against half the group's timeout, and the group then goes on in step."""

import textwrap

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import (
    REFUSAL_GROUP_TIMEOUT,
    fresh_interpreter_json,
    group_works,
    run_refusal_job,
    timed,
)

N = 4
PROMPT = REFUSAL_GROUP_TIMEOUT / 2
TOLD = r"ERROR_RANK_MISMATCH.*rank {bad}.*ERROR_INVALID_TENSOR_FORMAT"
OWN = {
    "quantized": r"is a quantized tensor \(QUInt8\) whose integers mean nothing without its scale",
    "nested": r"is a nested tensor, whose tensors are no one buffer",
}


def _tensor(kind, bad):
    """N float32 ones, as the refusing rank passes them (quantized or nested) or as its peers do."""
    import warnings

    warnings.filterwarnings("ignore", message=".*(deprecated|prototype stage).*")
    if not bad:
        return torch.ones(N)
    if kind == "quantized":
        return torch.quantize_per_tensor(torch.ones(N), 0.5, 0, torch.quint8)
    return torch.nested.nested_tensor([torch.ones(N // 2), torch.ones(N // 2)])


# Each call(ctx, t): t is the refusing rank's quantized or nested tensor or a peer's plain one, in
# the argument the backend names; the call's other tensors are plain. Rank 0 is the root where
# there is one, so the refusing rank (the last) passes no list: torch's Python compares a list's
# dtypes with the tensor's before any backend, on that rank alone.
CALLS = {
    "broadcast": ("broadcast", "tensor", lambda ctx, t: dist.broadcast(t, src=0)),
    "all_reduce": ("allreduce", "tensor", lambda ctx, t: dist.all_reduce(t)),
    "reduce": ("reduce", "tensor", lambda ctx, t: dist.reduce(t, dst=0)),
    "all_reduce_coalesced": ("allreduce", "tensor", lambda ctx, t: dist.all_reduce_coalesced([t])),
    "all_gather_single": (
        "all_gather_into_tensor",
        "input_tensor",
        lambda ctx, t: dist.all_gather_single(torch.empty(ctx.world_size * N), t),
    ),
    "reduce_scatter_single": (
        "reduce_scatter_tensor",
        "output",
        lambda ctx, t: dist.reduce_scatter_single(t, torch.ones(ctx.world_size * N)),
    ),
    "gather": (
        "gather",
        "tensor",
        lambda ctx, t: dist.gather(
            t, [torch.empty(N) for _ in range(ctx.world_size)] if ctx.rank == 0 else None, dst=0
        ),
    ),
    "scatter": (
        "scatter",
        "tensor",
        lambda ctx, t: dist.scatter(
            t, [torch.ones(N) for _ in range(ctx.world_size)] if ctx.rank == 0 else None, src=0
        ),
    ),
}


def _one_rank_quantized_or_nested(ctx, kind):
    import warnings

    warnings.filterwarnings("ignore", message=".*deprecated.*")  # all_reduce_coalesced
    bad = ctx.world_size - 1
    group_works(ctx)  # the refusals below are not the group's first call
    for name, (what, arg, call) in CALLS.items():

        def body(what=what, arg=arg, call=call):
            if ctx.rank == bad:
                own = rf"collops backend: {what}: {arg} {OWN[kind]}"
                with pytest.raises(RuntimeError, match=own):
                    call(ctx, _tensor(kind, True))
            else:
                with pytest.raises(RuntimeError, match=TOLD.format(bad=bad)):
                    call(ctx, _tensor(kind, False))

        timed(ctx, f"{name} with a {kind} tensor on rank {bad}", body, PROMPT)
        group_works(ctx)
    return True


def _point_to_point(ctx, kind):
    # The refusing rank's send or recv raises its refusal; the matching op of rank 0 is told.
    bad = ctx.world_size - 1
    group_works(ctx)
    for what, told in [("send", "refused its send to rank 0"), ("recv", "refused its receive")]:

        def body(what=what, told=told):
            if ctx.rank == bad:
                op = dist.send if what == "send" else dist.recv
                with pytest.raises(
                    RuntimeError, match=rf"collops backend: {what}: tensor {OWN[kind]}"
                ):
                    op(_tensor(kind, True), 0)
            elif ctx.rank == 0:
                op = dist.recv if what == "send" else dist.send
                with pytest.raises(
                    RuntimeError, match=rf"rank {bad} {told}.*ERROR_INVALID_TENSOR_FORMAT"
                ):
                    op(_tensor(kind, False), bad)

        timed(ctx, f"{what} of a {kind} tensor on rank {bad}", body, PROMPT)
    group_works(ctx)
    return True


@pytest.mark.parametrize("kind", ["quantized", "nested"])
@pytest.mark.parametrize("world", [2, 3])
def test_one_rank_quantized_or_nested_fails_every_rank_at_once(world, kind):
    results = run_refusal_job(_one_rank_quantized_or_nested, kind, world=world)
    assert results == [True] * world


@pytest.mark.parametrize("kind", ["quantized", "nested"])
def test_send_or_recv_of_a_quantized_or_nested_tensor_fails_both_at_once(kind):
    assert run_refusal_job(_point_to_point, kind) == [True, True]


# gloo: the calls torch's own Python hands to a c10d op with the tensor, once in a process without
# collops (torch's errors, the reference) and once in a rank of a gloo group with collops loaded.
GLOO_CALLS = ["broadcast", "all_reduce", "all_gather_single", "reduce_scatter_single"]

_REFERENCE = textwrap.dedent(
    """
    import json, sys, tempfile, warnings
    import torch, torch.distributed as dist
    warnings.filterwarnings("ignore")
    sys.path[:0] = sys.argv[1:]  # this test's folder and the harness's (fresh_interpreter_json)
    import test_c10d_quantized_nested as t

    class Ctx:
        rank, world_size = 0, 1

    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    errors = {}
    for kind in ("quantized", "nested"):
        for name in t.GLOO_CALLS:
            try:
                t.CALLS[name][2](Ctx, t._tensor(kind, True))
                errors[kind + " " + name] = None
            except Exception as e:
                errors[kind + " " + name] = [type(e).__name__, str(e)]
    dist.destroy_process_group()
    assert "collops" not in sys.modules
    print(json.dumps(errors))
    """
)


def _gloo_raises_what_torch_raised(ctx, reference):
    # Only the last rank calls: with the tensor stopped before gloo, no rank waits for another;
    # handed to gloo, the call would wait for peers that never come, past the limit.
    bad = ctx.world_size - 1
    if ctx.rank == bad:
        for kind in ("quantized", "nested"):
            for name in GLOO_CALLS:
                expected = reference[f"{kind} {name}"]
                assert expected is not None and expected[0] == "NotImplementedError"

                def body(kind=kind, name=name, expected=expected):
                    with pytest.raises(NotImplementedError) as raised:
                        CALLS[name][2](ctx, _tensor(kind, True))
                    assert str(raised.value) == expected[1]

                timed(ctx, f"gloo {name} of a {kind} tensor", body, PROMPT)
    group_works(ctx)  # gloo still in step
    return True


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_raises_torchs_own_error_and_gets_no_such_tensor(world):
    reference = fresh_interpreter_json(_REFERENCE, __file__)
    results = run_refusal_job(
        _gloo_raises_what_torch_raised, reference, backend="gloo", world=world
    )
    assert results == [True] * world
