"""Functional collectives (torch.distributed._functional_collectives, the _c10d_functional ops
that DTensor and compiled graphs call) in which one rank's tensor is sparse COO, sparse CSR,
mkldnn, nested or quantized while its peers pass plain ones. torch's kernel of those ops stops
such a tensor on that rank ("unsupported memory format option Contiguous") or has none (nested),
and its peers waited for the group's timeout. collops registers a kernel for those keys
(torch_bindings/missing_c10d_kernels.cpp) that, on a "collops" group, refuses the tensor by name
and tells the peers, which end at once naming the rank; a quantized tensor goes on to the c10d
op, which refuses it the same way. On any other group the call does what torch's own kernel did,
message for message. Run on 2 and 3 ranks, the refusing rank the last; every call of every rank
is timed against half the group's timeout, and the group then goes on in step."""

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

N = 12  # rows of dim 0 split over 2 and 3 ranks
PROMPT = REFUSAL_GROUP_TIMEOUT / 2
TOLD = r"ERROR_RANK_MISMATCH.*rank {bad}.*ERROR_INVALID_TENSOR_FORMAT"
KINDS = ["coo", "csr", "mkldnn", "nested", "quantized"]
LAYOUT = {"coo": "torch.sparse_coo", "csr": "torch.sparse_csr", "mkldnn": "torch._mkldnn"}


def _tensor(kind, bad):
    """N float32 ones (6 x 2 for CSR, which is 2-D only), in `kind` on the refusing rank (`bad`)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*(deprecated|prototype stage|beta state).*")
    plain = torch.ones(N // 2, 2) if kind == "csr" else torch.ones(N)
    if not bad:
        return plain
    if kind == "coo":
        return plain.to_sparse()
    if kind == "csr":
        return plain.to_sparse_csr()
    if kind == "mkldnn":
        return plain.to_mkldnn()
    if kind == "quantized":
        return torch.quantize_per_tensor(plain, 0.5, 0, torch.quint8)
    return torch.nested.nested_tensor([torch.ones(N // 2), torch.ones(N // 2)])


def _wait(result):
    ops = torch.ops._c10d_functional
    for t in result if isinstance(result, (list, tuple)) else [result]:
        ops.wait_tensor(t)


# Each call(t, name, world): the functional op on the group named `name` with t, the argument the
# refusal names; (op, argument, what the c10d op a quantized tensor reaches names).
def _ops():
    return torch.ops._c10d_functional


CALLS = {
    "all_reduce": (lambda t, g, w: _ops().all_reduce(t, "sum", g), "input", "allreduce: tensor"),
    "all_reduce_": (lambda t, g, w: _ops().all_reduce_(t, "sum", g), "input", "allreduce: tensor"),
    "all_reduce_coalesced": (
        lambda t, g, w: _ops().all_reduce_coalesced([torch.ones(N), t], "sum", g),
        "inputs",
        "allreduce: tensor",
    ),
    "all_gather_into_tensor": (
        lambda t, g, w: _ops().all_gather_into_tensor(t, w, g),
        "input",
        "all_gather_into_tensor: input_tensor",
    ),
    "all_gather_into_tensor_coalesced": (
        lambda t, g, w: _ops().all_gather_into_tensor_coalesced([t], w, g),
        "inputs",
        "all_gather_into_tensor: input_tensor",
    ),
    "reduce_scatter_tensor": (
        lambda t, g, w: _ops().reduce_scatter_tensor(t, "sum", w, g),
        "input",
        "reduce_scatter_tensor: input",
    ),
    "all_to_all_single": (
        lambda t, g, w: _ops().all_to_all_single(t, [N // w] * w, [N // w] * w, g),
        "input",
        "all_to_all_single: input",
    ),
    "broadcast": (lambda t, g, w: _ops().broadcast(t, 0, g), "input", "broadcast: tensor"),
    "broadcast_": (lambda t, g, w: _ops().broadcast_(t, 0, g), "input", "broadcast: tensor"),
}


def _own_error(kind, name, arg, c10d_arg):
    if kind == "quantized":
        return rf"collops backend: {c10d_arg} is a quantized tensor \(QUInt8\)"
    if kind == "nested":
        return rf"collops backend: _c10d_functional.{name}: {arg} is a nested tensor"
    dense = r"must be a dense \(strided\) tensor, got layout"
    return rf"collops backend: _c10d_functional.{name}: {arg} {dense} {LAYOUT[kind]}"


def _one_rank_not_plain(ctx, kind):
    world, bad = ctx.world_size, ctx.world_size - 1
    group = dist.group.WORLD.group_name
    group_works(ctx)  # the refusals below are not the group's first call
    for name, (call, arg, c10d_arg) in CALLS.items():
        if kind == "csr" and name == "all_to_all_single":
            continue  # the op flattens its input first, which a CSR tensor has no view for

        def body(name=name, call=call, arg=arg, c10d_arg=c10d_arg):
            if ctx.rank == bad:
                with pytest.raises(RuntimeError, match=_own_error(kind, name, arg, c10d_arg)):
                    _wait(call(_tensor(kind, True), group, world))
            else:
                with pytest.raises(RuntimeError, match=TOLD.format(bad=bad)):
                    _wait(call(_tensor(kind, False), group, world))

        timed(ctx, f"{name} with a {kind} tensor on rank {bad}", body, PROMPT)
        group_works(ctx)
    return True


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world", [2, 3])
def test_one_rank_not_plain_fails_every_functional_collective_at_once(world, kind):
    assert run_refusal_job(_one_rank_not_plain, kind, world=world) == [True] * world


def _point_to_point(ctx, kind):
    # The refusing rank sends to (receives from) rank 0 alone; its refusal runs in place of its op
    # and raises, rank 0's matching op is told.
    ops, bad = _ops(), ctx.world_size - 1
    group = dist.group.WORLD.group_name
    group_works(ctx)
    for what, told in [("isend", "refused its send to rank 0"), ("irecv", "refused its receive")]:
        for batched in (False, True):

            def body(what=what, told=told, batched=batched):
                if ctx.rank == bad:
                    own = rf"collops backend: {'send' if what == 'isend' else 'recv'}: tensor"
                    with pytest.raises(RuntimeError, match=own):
                        t = _tensor(kind, True)
                        if batched:
                            _wait(ops.batch_p2p_ops([what], [0], [0], [t], group))
                        else:
                            _wait(getattr(ops, what)(t, 0, 0, group))
                elif ctx.rank == 0:
                    other = "irecv" if what == "isend" else "isend"
                    told_re = rf"rank {bad} {told}.*ERROR_INVALID_TENSOR_FORMAT"
                    with pytest.raises(RuntimeError, match=told_re):
                        _wait(getattr(ops, other)(_tensor(kind, False), bad, 0, group))

            timed(ctx, f"{what} (batched {batched}) of a {kind} tensor on rank {bad}", body, PROMPT)
    group_works(ctx)
    return True


@pytest.mark.parametrize("kind", KINDS)
def test_one_rank_not_plain_fails_functional_send_and_receive_at_once(kind):
    assert run_refusal_job(_point_to_point, kind, world=3) == [True] * 3


def _python_api(ctx):
    # torch.distributed._functional_collectives' own functions reach the same kernels.
    import torch.distributed._functional_collectives as fc

    bad = ctx.world_size - 1
    group = dist.group.WORLD
    for kind in ("coo", "nested"):
        for name, call in [
            ("all_reduce", lambda t: fc.all_reduce(t, "sum", group)),
            ("broadcast", lambda t: fc.broadcast(t, 0, group)),
            ("all_reduce_coalesced", lambda t: fc.all_reduce_coalesced([t], "sum", group)),
        ]:

            def body(kind=kind, call=call):
                if ctx.rank == bad:
                    with pytest.raises(RuntimeError, match=r"collops backend: _c10d_functional\."):
                        _wait(call(_tensor(kind, True)))
                else:
                    with pytest.raises(RuntimeError, match=TOLD.format(bad=bad)):
                        _wait(call(_tensor(kind, False)))

            timed(ctx, f"fc.{name} with a {kind} tensor on rank {bad}", body, PROMPT)
            group_works(ctx)
    return True


def test_functional_collectives_python_api_fails_every_rank_at_once():
    assert run_refusal_job(_python_api, world=3) == [True] * 3


# gloo: each op with each kind on a one-rank gloo group in an interpreter of its own: without
# collops (torch's outcome, the reference), and with collops imported before torch's functional
# collectives, whose autograd and Meta registrations torch's messages list. Then on the last rank
# of a gloo group with collops loaded, where no peer calls: torch's kernel stops these tensors
# before gloo, so no rank waits for another.
GLOO_CALLS = ["all_reduce", "all_reduce_coalesced", "broadcast"]

_OUTCOMES = textwrap.dedent(
    """
    import json, sys, tempfile, warnings
    # this test's folder, the harness's (fresh_interpreter_json), then the mode and collops's folder
    here, harness, mode, python = sys.argv[1:]
    sys.path[:0] = [here, harness, python]
    if mode == "collops":
        import collops  # noqa: F401
    import torch, torch.distributed as dist
    import torch.distributed._functional_collectives  # noqa: F401
    warnings.filterwarnings("ignore")
    import test_c10d_functional_refusals as t

    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    outcomes = {}
    for kind in t.KINDS:
        for name in t.GLOO_CALLS:
            outcomes[kind + " " + name] = t.outcome(kind, name, dist.group.WORLD.group_name, 2)
    dist.destroy_process_group()
    assert ("collops" in sys.modules) == (mode == "collops")
    print(json.dumps(outcomes))
    """
)


def outcome(kind, name, group, world):
    """[exception type, message] of the op on the group named `group` with a `kind` tensor."""
    try:
        _wait(CALLS[name][0](_tensor(kind, True), group, world))
    except Exception as e:  # noqa: BLE001  (whatever torch raises is the reference)
        return [type(e).__name__, str(e)]
    return None


def _outcomes(mode):
    from repo_paths import PYTHON_DIR

    return fresh_interpreter_json(_OUTCOMES, __file__, mode, PYTHON_DIR)


def test_collops_loaded_first_leaves_torchs_functional_outcomes_as_they_were():
    reference = _outcomes("torch")
    assert all(reference.values()), "torch ran a collective with such a tensor"
    got = _outcomes("collops")
    for key, expected in reference.items():
        assert got[key] == expected, f"{key}: {got[key]} instead of {expected}"


def _gloo_does_what_torch_did(ctx, reference):
    bad = ctx.world_size - 1
    if ctx.rank == bad:
        group = dist.group.WORLD.group_name
        for kind in KINDS:
            for name in GLOO_CALLS:
                expected = reference[f"{kind} {name}"]

                def body(kind=kind, name=name, expected=expected):
                    got = outcome(kind, name, group, ctx.world_size)
                    assert got == expected, f"{kind} {name}: {got} instead of {expected}"

                timed(ctx, f"gloo {name} of a {kind} tensor", body, PROMPT)
    group_works(ctx)  # gloo still in step
    return True


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_functional_collectives_do_what_torch_did(world):
    results = run_refusal_job(
        _gloo_does_what_torch_did, _outcomes("torch"), backend="gloo", world=world
    )
    assert results == [True] * world
