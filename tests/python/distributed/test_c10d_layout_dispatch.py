"""torch.distributed calls in which one rank's tensor is not strided (sparse COO, sparse CSR,
mkldnn) while its peers pass strided ones. torch registers kernels of its c10d ops for dense CPU
tensors (and, for allreduce_ alone, sparse COO); collops adds, for the layouts torch has none for,
a kernel that hands the call to the group's backend as the CPU kernel does
(torch_bindings/missing_c10d_kernels.cpp). On a "collops" group the backend refuses the tensor and
tells its peers, so every rank ends with an error well within the group's timeout: the refusing
rank's names the call, the argument and the layout, its peers' name the refusing rank. Without
those kernels torch raised NotImplementedError on the refusing rank alone and its peers waited for
the timeout. On gloo the call reaches gloo, which refuses such tensors itself; strided tensors
never reach the added kernels."""

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import REFUSAL_PROMPT as QUICK
from c10d_ranks import REFUSAL_WORLD as WORLD
from c10d_ranks import group_works, run_refusal_job, timed

N = 4

TOLD = r"ERROR_RANK_MISMATCH.*rank 0.*ERROR_INVALID_TENSOR_FORMAT"
LAYOUT_NAMES = {"coo": "torch.sparse_coo", "csr": "torch.sparse_csr", "mkldnn": "torch._mkldnn"}


def _not_strided(layout, n):
    """A float32 tensor of n elements (a 2 x n/2 matrix for CSR, which is 2-D only) in `layout`."""
    if layout == "coo":
        return torch.ones(n).to_sparse()
    if layout == "csr":
        return torch.ones(2, n // 2).to_sparse_csr()
    return torch.ones(n).to_mkldnn()


def _strided(layout, n):
    return torch.ones(2, n // 2) if layout == "csr" else torch.ones(n)


# Each call: (what the backend names, argument, call(ctx, t, layout)), where rank 0 passes a
# non-strided t and rank 1 a strided one of the same shape; the call's other tensors are strided.
def _all_gather(ctx, t, layout):
    dist.all_gather([_strided(layout, N) for _ in range(WORLD)], t)


def _all_gather_output(ctx, t, layout):
    dist.all_gather([t, _strided(layout, N)], _strided(layout, N))


def _all_gather_into_tensor(ctx, t, layout):
    dist.all_gather_into_tensor(torch.empty(WORLD * t.numel()), t)


def _gather(ctx, t, layout):
    gather_list = [_strided(layout, N) for _ in range(WORLD)] if ctx.rank == 1 else None
    dist.gather(t, gather_list, dst=1)


def _scatter(ctx, t, layout):
    scatter_list = [_strided(layout, N) for _ in range(WORLD)] if ctx.rank == 1 else None
    dist.scatter(t, scatter_list, src=1)


def _reduce_scatter(ctx, t, layout):
    dist.reduce_scatter(t, [_strided(layout, N) for _ in range(WORLD)])


def _reduce_scatter_tensor(ctx, t, layout):
    dist.reduce_scatter_tensor(torch.empty(t.numel() // WORLD), t)


def _all_to_all_single(ctx, t, layout):
    dist.all_to_all_single(torch.empty(t.numel()), t)


def _all_to_all(ctx, t, layout):
    dist.all_to_all([_strided(layout, N) for _ in range(WORLD)], [t, _strided(layout, N)])


CALLS = {
    "broadcast": ("broadcast", "tensor", lambda ctx, t, layout: dist.broadcast(t, src=1)),
    "reduce": ("reduce", "tensor", lambda ctx, t, layout: dist.reduce(t, dst=1)),
    "all_reduce_coalesced": (
        "allreduce",
        "tensor",
        lambda ctx, t, layout: dist.all_reduce_coalesced([t]),
    ),
    "all_gather": ("allgather", "tensor", _all_gather),
    "all_gather output": ("allgather", "tensor_list", _all_gather_output),
    "all_gather_into_tensor": ("all_gather_into_tensor", "input_tensor", _all_gather_into_tensor),
    "gather": ("gather", "tensor", _gather),
    "scatter": ("scatter", "tensor", _scatter),
    "reduce_scatter": ("reduce_scatter", "output", _reduce_scatter),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", "input", _reduce_scatter_tensor),
    "all_to_all_single": ("all_to_all_single", "input", _all_to_all_single),
    "all_to_all": ("all_to_all", "input_tensor_list", _all_to_all),
}
# The calls whose tensors may be 2-D matrices of any shape (CSR is 2-D only; the others need a
# flat tensor of WORLD blocks or compare shapes with the 1-D strided tensors of the call).
CSR_CALLS = ["broadcast", "reduce", "all_gather_into_tensor", "all_to_all_single"]


def _one_rank_not_strided(ctx, layout, names):
    import warnings

    # all_reduce_coalesced is deprecated; sparse CSR is in beta.
    warnings.filterwarnings("ignore", message=".*(deprecated|beta state).*")
    group_works(ctx)  # the refusals below are not the group's first call: that case is
    # test_c10d_refusals.py's
    for name in names:
        what, arg, call = CALLS[name]
        n = 2 * N if name == "reduce_scatter_tensor" else N

        def body(what=what, arg=arg, call=call, n=n):
            if ctx.rank == 0:
                refused = rf"collops backend: {what}: {arg} must be a dense \(strided\) tensor, "
                refused += rf"got layout {LAYOUT_NAMES[layout]}"
                with pytest.raises(RuntimeError, match=refused):
                    call(ctx, _not_strided(layout, n), layout)
            else:
                with pytest.raises(RuntimeError, match=TOLD):
                    call(ctx, _strided(layout, n), layout)

        timed(ctx, f"{name} with a {layout} tensor on rank 0", body, QUICK)
    group_works(ctx)
    return True


def _point_to_point_not_strided(ctx, layout):
    # dist.send and dist.recv wait at once: rank 0's refusal runs in place of its op and raises,
    # rank 1's matching op is told.
    group_works(ctx)
    for what, told in [("send", "refused its send to rank 1"), ("recv", "refused its receive")]:

        def body(what=what, told=told):
            if ctx.rank == 0:
                op = dist.send if what == "send" else dist.recv
                with pytest.raises(RuntimeError, match=rf"collops backend: {what}: tensor must be"):
                    op(_not_strided(layout, N), 1)
            else:
                op = dist.recv if what == "send" else dist.send
                with pytest.raises(
                    RuntimeError, match=rf"rank 0 {told}.*ERROR_INVALID_TENSOR_FORMAT"
                ):
                    op(_strided(layout, N), 0)

        timed(ctx, f"{what} of a {layout} tensor on rank 0", body, QUICK)
    group_works(ctx)
    return True


@pytest.mark.parametrize("layout", ["coo", "mkldnn"])
def test_every_collective_with_one_rank_not_strided_fails_every_rank_at_once(layout):
    assert run_refusal_job(_one_rank_not_strided, layout, list(CALLS)) == [True] * WORLD


def test_sparse_csr_on_one_rank_fails_every_rank_at_once():
    assert run_refusal_job(_one_rank_not_strided, "csr", CSR_CALLS) == [True] * WORLD


@pytest.mark.parametrize("layout", ["coo", "mkldnn"])
def test_send_or_recv_with_one_rank_not_strided_fails_both_at_once(layout):
    assert run_refusal_job(_point_to_point_not_strided, layout) == [True] * WORLD


def _gloo_refuses_them_itself(ctx, layout):
    # Every rank passes the same non-strided tensor (gloo tells no peer of a refusal of its own):
    # each call reaches gloo, which raises on every rank; strided calls are untouched, and a
    # sparse COO all_reduce still runs torch's own kernel, which gloo sums.
    import warnings

    warnings.filterwarnings("ignore", message=".*(deprecated|beta state).*")
    raised = 0
    for name in CALLS:
        _, _, call = CALLS[name]
        n = 2 * N if name == "reduce_scatter_tensor" else N
        with pytest.raises((RuntimeError, NotImplementedError)):
            call(ctx, _not_strided(layout, n), layout)
        raised += 1
    for op in (dist.send, dist.recv) if ctx.rank == 0 else (dist.recv, dist.send):
        with pytest.raises(RuntimeError):
            op(_not_strided(layout, N), 1 - ctx.rank)
        raised += 1
    t = torch.ones(N)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((N,), float(ctx.world_size)))
    coo = torch.ones(N).to_sparse()
    dist.all_reduce(coo)
    assert torch.equal(coo.to_dense(), torch.full((N,), float(ctx.world_size)))
    return raised


@pytest.mark.parametrize("layout", ["coo", "mkldnn"])
def test_gloo_refuses_non_strided_tensors_itself_and_still_sums_sparse_all_reduce(layout):
    results = run_refusal_job(_gloo_refuses_them_itself, layout, backend="gloo")
    assert results == [len(CALLS) + 2] * WORLD
