"""One rank of a "collops" group breaking one of a collective's own argument rules (a list of the
wrong length, an output of the wrong size, splits that do not cover the input, AVG of integers)
while its peers pass good arguments: the rule raises on that rank before it reaches the group's
communicator, and the backend tells the peers (CollopsBackend::Run, a refusal with
ERROR_INVALID_PARAM), so each ends at once with ERROR_RANK_MISMATCH naming the rank instead of
waiting for the group's timeout; then the group goes on in step. The group's timeout is short and
every call is checked against a fraction of it."""

import pytest
import torch
import torch.distributed as dist

from c10d_ranks import REFUSAL_PROMPT as QUICK
from c10d_ranks import REFUSAL_WORLD as WORLD
from c10d_ranks import group_works, run_refusal_job, timed

N = 4

TOLD = r"ERROR_RANK_MISMATCH.*rank 0 failed its own checks for this call \(ERROR_INVALID_PARAM\)"

# name: (call(bad), what rank 0's own error says); rank 0 calls with bad=True, rank 1 with False.
CALLS = {
    "all_gather output list": (
        lambda bad: dist.all_gather([torch.empty(N) for _ in range(WORLD + bad)], torch.ones(N)),
        r"allgather needs 2 outputs, got 3",
    ),
    "all_gather_into_tensor output size": (
        lambda bad: dist.all_gather_into_tensor(torch.empty(WORLD * N + bad), torch.ones(N)),
        r"all_gather_into_tensor output has 9 elements, expected 8",
    ),
    "all_to_all_single rows": (
        lambda bad: dist.all_to_all_single(torch.empty(N + bad), torch.ones(N + bad)),
        r"all_to_all_single input has 5 rows, not divisible by 2 ranks",
    ),
    "all_to_all_single splits": (
        lambda bad: dist.all_to_all_single(
            torch.empty(N), torch.ones(N), input_split_sizes=[1, 1] if bad else [2, 2]
        ),
        r"all_to_all_single input split sizes sum to 2",
    ),
    "reduce_scatter_tensor input size": (
        lambda bad: dist.reduce_scatter_tensor(torch.empty(N), torch.ones(WORLD * N + bad)),
        r"reduce_scatter_tensor",
    ),
    "all_reduce AVG of integers": (
        lambda bad: dist.all_reduce(
            torch.ones(N, dtype=torch.int32 if bad else torch.float32), op=dist.ReduceOp.AVG
        ),
        r"ReduceOp.AVG needs a floating-point tensor",
    ),
    "scatter list on the root": (
        lambda bad: dist.scatter(
            torch.empty(N), [torch.ones(N) for _ in range(WORLD + 1)] if bad else None, src=0
        ),
        r"scatter",
    ),
}


def _one_rank_breaks_a_rule(ctx):
    group_works(ctx)  # the communicator exists: the first call's case is test_c10d_refusals.py's
    for name, (call, own) in CALLS.items():

        def body(call=call, own=own):
            if ctx.rank == 0:
                with pytest.raises(RuntimeError, match=own):
                    call(True)
            else:
                with pytest.raises(RuntimeError, match=TOLD):
                    call(False)

        timed(ctx, f"{name} broken on rank 0", body, QUICK)
        group_works(ctx)
    return True


def test_a_rank_breaking_an_argument_rule_fails_its_peers_at_once():
    results = run_refusal_job(_one_rank_breaks_a_rule)
    assert results == [True] * WORLD
