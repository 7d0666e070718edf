"""init_process_group(timeout=...) bounds the "collops" backend's waits, as it does gloo's: a rank
whose peer never makes the matching call gets ERROR_TIMEOUT after that timeout, naming the peer
and where the bound came from. Without timeout= (torch's 30-minute default), COLLOPS_TIMEOUT
stays in charge."""

import os
import time

import pytest

from c10d_ranks import run_group_job


def _missed_call(ctx, timeout, collops_timeout, done_path):
    import torch
    import torch.distributed as dist

    # Read when the group's communicator is made, at its first collective.
    os.environ["COLLOPS_TIMEOUT"] = str(collops_timeout)
    t = torch.ones(4)
    dist.all_reduce(t)  # both ranks: the communicator exists and works
    assert torch.equal(t, torch.full((4,), 2.0))
    limit = timeout if timeout is not None else collops_timeout
    if ctx.rank == 1:
        # Never makes the second call, but stays alive (a lost peer is another error) until
        # rank 0's call has failed.
        deadline = time.monotonic() + limit + 15
        while not os.path.exists(done_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        return None
    start = time.monotonic()
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        return time.monotonic() - start, str(e)
    finally:
        open(done_path, "w").close()
    raise AssertionError("all_reduce without its peer returned")


@pytest.mark.parametrize(
    "timeout, collops_timeout, source",
    [
        (3, 60, "the caller's timeout"),  # init_process_group's timeout wins over COLLOPS_TIMEOUT
        (None, 3, "COLLOPS_TIMEOUT"),  # torch's default leaves COLLOPS_TIMEOUT in charge
    ],
)
def test_a_missed_call_fails_after_the_groups_timeout(timeout, collops_timeout, source, tmp_path):
    results = run_group_job(
        2,
        _missed_call,
        timeout,
        collops_timeout,
        str(tmp_path / "done"),
        timeout=120,
        group_timeout=timeout,
    )
    elapsed, message = results[0]
    assert 2.5 <= elapsed < 15, (elapsed, message)
    assert "ERROR_TIMEOUT" in message and "rank 1" in message and source in message, message
