"""init_process_group(timeout=...) bounds the "collops" backend's waits, as it does gloo's: a rank
whose peer never makes the matching call gets ERROR_TIMEOUT after that timeout, naming the peer
and where the bound came from. Without timeout= (torch's 30-minute default), COLLOPS_TIMEOUT
stays in charge."""
import datetime
import os
import tempfile
import time

import pytest

import rank_harness


def _missed_call(ctx, store, timeout, collops_timeout):
    import torch
    import torch.distributed as dist

    import collops  # noqa: F401  (registers the "collops" backend)

    os.environ["COLLOPS_TIMEOUT"] = str(collops_timeout)
    kwargs = {} if timeout is None else {"timeout": datetime.timedelta(seconds=timeout)}
    dist.init_process_group("collops", init_method=f"file://{store}", rank=ctx.rank,
                            world_size=ctx.world_size, **kwargs)
    try:
        t = torch.ones(4)
        dist.all_reduce(t)  # both ranks: the communicator exists and works
        assert torch.equal(t, torch.full((4,), 2.0))
        limit = timeout if timeout is not None else collops_timeout
        if ctx.rank == 1:
            time.sleep(limit + 15)  # never makes the second call, but stays alive
            return None
        start = time.monotonic()
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            return time.monotonic() - start, str(e)
        raise AssertionError("all_reduce without its peer returned")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("timeout, collops_timeout, source", [
    (3, 60, "the caller's timeout"),  # init_process_group's timeout wins over COLLOPS_TIMEOUT
    (None, 3, "COLLOPS_TIMEOUT"),  # torch's default leaves COLLOPS_TIMEOUT in charge
])
def test_a_missed_call_fails_after_the_groups_timeout(timeout, collops_timeout, source):
    store = os.path.join(tempfile.gettempdir(), f"collops-store-{os.getpid()}-{time.time_ns()}")
    try:
        results = rank_harness.run_process_ranks(2, _missed_call, store, timeout,
                                                 collops_timeout, timeout=120)
    finally:
        if os.path.exists(store):
            os.remove(store)
    elapsed, message = results[0]
    assert 2.5 <= elapsed < 15, (elapsed, message)
    assert "ERROR_TIMEOUT" in message and "rank 1" in message and source in message, message
