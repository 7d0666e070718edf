"""One rank of a "collops" group passing a list of tensors whose first is good and a later one
breaks a rule of the collective (the coalesced forms, and the backend's own methods given several
tensors), while its peers pass good lists. The backend checks every tensor of the list before the
first moves (collops_backend.h), so the rule raises on that rank before anything reached the
group's communicator and is told to the peers (CollopsBackend::Run), which end at once with
ERROR_RANK_MISMATCH naming the rank. Checked tensor by tensor instead, the earlier tensors moved,
the rule raised on that rank alone, and its peers waited in the next transfer: for the group's
timeout, or until the refusing rank's next collective met it, refused as another operation or,
where it looked the same (an all_reduce of 4 float32 met by the coalesced AVG's second), paired
with it and returning the wrong data. Run on 2 and 3 ranks, the refusing rank the last; every
call of every rank is timed against half the group's timeout, and the group then goes on in
step."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _coalescing_manager, _get_default_group

from c10d_ranks import REFUSAL_DEADLINE, REFUSAL_GROUP_TIMEOUT, group_works, run_group_job, timed

N = 4
PROMPT = REFUSAL_GROUP_TIMEOUT / 2


def _told(bad):
    return rf"ERROR_RANK_MISMATCH.*rank {bad} failed its own checks for this call \(ERROR_INVALID_PARAM\)"


def _opts(cls, op):
    opts = cls()
    opts.reduceOp = op
    return opts


# Each call(world, bad) runs the collective with a list whose second tensor breaks the rule when
# `bad`; the string is what the refusing rank's own error says.
def _coalesced_all_reduce(world, bad):
    with _coalescing_manager():
        dist.all_reduce(torch.ones(N), op=dist.ReduceOp.AVG)
        dist.all_reduce(
            torch.ones(N, dtype=torch.int32 if bad else torch.float32), op=dist.ReduceOp.AVG
        )


def _coalesced_all_gather_single(world, bad):
    with _coalescing_manager():
        dist.all_gather_single(torch.empty(world * N), torch.ones(N))
        dist.all_gather_single(torch.empty(world * N + bad), torch.ones(N))


def _coalesced_reduce_scatter_single(world, bad):
    with _coalescing_manager():
        dist.reduce_scatter_single(torch.empty(N), torch.ones(world * N))
        dist.reduce_scatter_single(torch.empty(N), torch.ones(world * N + bad))


def _all_gather_coalesced(world, bad):
    outputs = [[torch.empty(N) for _ in range(world)] for _ in range(2)]
    if bad:
        outputs[1].append(torch.empty(N))
    dist.all_gather_coalesced(outputs, [torch.ones(N), torch.ones(N)])


def _backend_allreduce(world, bad):
    # BAND of the first (integer) tensor is fine; of a float32 second one it is not.
    tensors = [
        torch.ones(N, dtype=torch.int32),
        torch.ones(N, dtype=torch.float32 if bad else torch.int32),
    ]
    _get_default_group().allreduce(tensors, _opts(dist.AllreduceOptions, dist.ReduceOp.BAND)).wait()


def _backend_reduce(world, bad):
    tensors = [torch.ones(N), torch.ones(N, dtype=torch.complex64 if bad else torch.float32)]
    opts = _opts(dist.ReduceOptions, dist.ReduceOp.MAX)
    opts.rootRank = 0
    _get_default_group().reduce(tensors, opts).wait()


def _backend_reduce_scatter(world, bad):
    inputs = [[torch.ones(N) for _ in range(world)] for _ in range(2)]
    if bad:
        inputs[1].append(torch.ones(N))
    outputs = [torch.empty(N), torch.empty(N)]
    opts = _opts(dist.ReduceScatterOptions, dist.ReduceOp.SUM)
    _get_default_group().reduce_scatter(outputs, inputs, opts).wait()


def _backend_all_gather_into_tensor_coalesced(world, bad):
    outputs = [torch.empty(world * N) for _ in range(2 - bad)]
    _get_default_group().allgather_into_tensor_coalesced(
        outputs, [torch.ones(N), torch.ones(N)]
    ).wait()


CALLS = {
    "coalesced all_reduce, AVG of integers second": (
        _coalesced_all_reduce,
        r"ReduceOp.AVG needs a floating-point tensor, got Int",
    ),
    "coalesced all_gather_single, second output too large": (
        _coalesced_all_gather_single,
        r"all_gather_into_tensor output has {big} elements, expected {even}",
    ),
    "coalesced reduce_scatter_single, second input too large": (
        _coalesced_reduce_scatter_single,
        r"reduce_scatter_tensor input has {big} elements, expected {even}",
    ),
    "all_gather_coalesced, second output list too long": (
        _all_gather_coalesced,
        r"allgather needs {world} outputs, got {more}",
    ),
    "allreduce of two tensors, BAND of a float32 second": (
        _backend_allreduce,
        r"allreduce with ReduceOp.BAND needs an integer or bool tensor, got Float",
    ),
    "reduce of two tensors, MAX of a complex second": (
        _backend_reduce,
        r"reduce of complex tensors takes SUM or AVG, not ReduceOp.MAX",
    ),
    "reduce_scatter of two outputs, second input list too long": (
        _backend_reduce_scatter,
        r"reduce_scatter needs {world} inputs, got {more}",
    ),
    "allgather_into_tensor_coalesced, one output for two inputs": (
        _backend_all_gather_into_tensor_coalesced,
        r"all_gather_into_tensor needs one output per input, got 1 outputs and 2 inputs",
    ),
}


def _a_later_tensor_breaks_a_rule(ctx, names):
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # the deprecated coalesced calls
    world, bad = ctx.world_size, ctx.world_size - 1
    group_works(ctx)  # the refusals below are not the group's first call
    for name in names:
        call, own = CALLS[name]
        own = own.format(world=world, more=world + 1, even=world * N, big=world * N + 1)

        def body(call=call, own=own):
            if ctx.rank == bad:
                with pytest.raises(RuntimeError, match=own):
                    call(world, True)
            else:
                with pytest.raises(RuntimeError, match=_told(bad)):
                    call(world, False)

        timed(ctx, f"{name} on rank {bad}", body, PROMPT)
        group_works(ctx)
    return True


def _good_lists_move(ctx):
    # The same calls with good lists on every rank give what they compute.
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    world, rank = ctx.world_size, ctx.rank
    a, b = torch.full((N,), float(rank)), torch.full((N,), float(2 * rank))
    with _coalescing_manager():
        dist.all_reduce(a)
        dist.all_reduce(b)
    total = sum(range(world))
    assert torch.equal(a, torch.full((N,), float(total)))
    assert torch.equal(b, torch.full((N,), float(2 * total)))
    outs = [torch.empty(world * N) for _ in range(2)]
    with _coalescing_manager():
        dist.all_gather_single(outs[0], torch.full((N,), float(rank)))
        dist.all_gather_single(outs[1], torch.full((N,), float(rank + 10)))
    ranks = torch.arange(world, dtype=torch.float32).repeat_interleave(N)
    assert torch.equal(outs[0], ranks) and torch.equal(outs[1], ranks + 10)
    outs = [torch.empty(N) for _ in range(2)]
    with _coalescing_manager():
        dist.reduce_scatter_single(outs[0], torch.arange(world * N, dtype=torch.float32))
        dist.reduce_scatter_single(outs[1], torch.ones(world * N))
    mine = torch.arange(rank * N, (rank + 1) * N, dtype=torch.float32) * world
    assert torch.equal(outs[0], mine) and torch.equal(outs[1], torch.full((N,), float(world)))
    return True


@pytest.mark.parametrize("world", [2, 3])
def test_a_later_tensor_breaking_a_rule_fails_every_rank_at_once(world):
    results = run_group_job(
        world,
        _a_later_tensor_breaks_a_rule,
        list(CALLS),
        group_timeout=REFUSAL_GROUP_TIMEOUT,
        timeout=REFUSAL_DEADLINE,
    )
    assert results == [True] * world


def test_good_coalesced_lists_still_move():
    assert run_group_job(3, _good_lists_move, group_timeout=REFUSAL_GROUP_TIMEOUT) == [True] * 3
