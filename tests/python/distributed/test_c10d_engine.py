"""backend "c10d": every operation through OperationTorch on torch.distributed gloo groups (the
default group and a new_group subgroup, commDomain = the group's name), 2 and 3 ranks, against
independent goldens; the error rules (not initialised, unknown group, rank/rankSize disagreeing,
Send/Recv mismatch). Each rank is a real process running c10d_engine_rank.py, as it would run on
its own host; every rank has a deadline and its exit code is checked."""

import os
import re
import socket
import subprocess
import sys
import time

import pytest

from repo_paths import PYTHON_DIR, RANKS_DIR

RANK_SCRIPT = os.path.join(RANKS_DIR, "c10d_engine_rank.py")
DEADLINE = float(os.environ.get("COLLOPS_TEST_DEADLINE", "240"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(world_size, **env_extra):
    """Runs c10d_engine_rank.py as `world_size` processes over 127.0.0.1; returns each rank's
    output. Fails naming every rank that exited nonzero or outlived the deadline (then killed)."""
    env = {k: v for k, v in os.environ.items() if k != "COLLOPS_JOB_ID"}
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE=str(world_size),
        COLLOPS_JOB_ID=f"c10d-engine-{os.getpid()}-{time.time_ns()}",
        PYTHONPATH=os.pathsep.join([PYTHON_DIR, env.get("PYTHONPATH", "")]),
    )
    env.setdefault("COLLOPS_TIMEOUT", "60")
    env.update(env_extra)
    # COLLOPS_TEST_HOST_IDS="a,a,b,b": rank r pretends to be on host ids[r] (COLLOPS_HOST_ID).
    host_ids = env.pop("COLLOPS_TEST_HOST_IDS", "")
    host_ids = host_ids.split(",") if host_ids else None
    procs = [
        subprocess.Popen(
            [sys.executable, RANK_SCRIPT],
            env=dict(env, RANK=str(r), **({"COLLOPS_HOST_ID": host_ids[r]} if host_ids else {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world_size)
    ]
    deadline = time.monotonic() + DEADLINE
    outputs, failures = [], []
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            failures.append(
                f"--- rank {rank}: still running after {DEADLINE:.0f} s (killed)\n{out[-3000:]}"
            )
            outputs.append(out)
            continue
        outputs.append(out)
        if p.returncode != 0 or f"rank {rank}: ALL PASS" not in out:
            failures.append(f"--- rank {rank}: exit code {p.returncode}\n{out[-3000:]}")
    assert not failures, "\n".join(failures)
    return outputs


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_op_on_default_group_and_subgroup(world_size):
    outputs = run_job(world_size)
    # The cases really ran on both groups (a case list gone empty must not pass).
    for rank, out in enumerate(outputs):
        assert f"rank {rank}: all_to_allv domain '': PASS" in out, out
        assert f"rank {rank}: bad_params: PASS" in out, out
        in_subgroup = world_size == 2 or rank > 0
        on_subgroup = re.search(rf"rank {rank}: reduce_scatter_v domain '[^']+': PASS", out)
        assert bool(on_subgroup) == in_subgroup, out
    assert "rank 0: not_initialised: PASS" in outputs[0]
    assert "rank 1: p2p_mismatch: PASS" in outputs[1]
    if world_size == 3:
        assert "rank 0: non_member: PASS" in outputs[0]


def test_quantised_all_reduce_at_four_ranks():
    """Quantised AllReduce on gloo at R = 4 (R = 2, 3 run with every op above): int8 slices through
    the group's all_to_all_single and the dequantised ones through its all_gather."""
    outputs = run_job(4, COLLOPS_TEST_CASES="all_reduce_quant,all_reduce_quant_errors")
    for rank, out in enumerate(outputs):
        assert f"rank {rank}: all_reduce_quant domain '': PASS" in out, out
        assert f"rank {rank}: all_reduce_quant_errors domain '': PASS" in out, out


def test_c10d_over_a_collops_group():
    """Any ProcessGroup works: here the default group is torch.distributed's "collops" backend
    (lccl underneath), and backend "c10d" rides on it."""
    outputs = run_job(
        2,
        COLLOPS_TEST_GROUP_BACKEND="collops",
        COLLOPS_TEST_CASES="all_reduce,all_gather_v,reduce_scatter_v,all_to_allv,"
        "send_recv,p2p_mismatch",
    )
    assert "rank 1: reduce_scatter_v domain '': PASS" in outputs[1]


# ---- the "collops" torch.distributed backend across (pretend) hosts ----------------------------


def _with_engine(ctx, body):
    """body(ctx), and the engine the default group ran it on."""
    from collops import _c10d_backend

    result = body(ctx)
    return _c10d_backend.communicator_name(), result


def _run_on_pretend_hosts(hosts, body):
    """body(ctx) on a "collops" default group as if rank r ran on host hosts[r]."""
    from c10d_ranks import run_group_job

    return run_group_job(len(hosts), _with_engine, body, hosts=hosts)


def test_collops_backend_across_pretend_hosts_2x2():
    """Every collective of the collops torch.distributed backend (test_c10d_backend's goldens)
    on 2 hosts x 2 ranks: hierarchical (lccl per host, gloo between hosts)."""
    import test_c10d_backend

    results = _run_on_pretend_hosts([0, 0, 1, 1], test_c10d_backend._collectives)
    assert [engine for engine, _ in results] == ["hccl(lccl+c10d)"] * 4


def test_collops_backend_across_uneven_pretend_hosts_with_subgroups():
    """3 ranks on hosts [0, 0, 1], collectives and sub-groups spanning both hosts."""
    import test_c10d_backend

    results = _run_on_pretend_hosts([0, 0, 1], test_c10d_backend._job)
    assert results == [("hccl(lccl+c10d)", "collops")] * 3


def _all_reduce_sum(ctx):
    import torch
    import torch.distributed as dist

    t = torch.full((5,), float(ctx.rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), float(sum(range(1, ctx.world_size + 1))))), t


def test_collops_backend_on_one_host_stays_lccl():
    """A group whose ranks share a host runs on one lccl communicator, exactly as before."""
    results = _run_on_pretend_hosts([0, 0, 0], _all_reduce_sum)
    assert [engine for engine, _ in results] == ["lccl"] * 3


def test_hccl_over_c10d_engine_across_pretend_hosts():
    """backend "hccl" (auto) on 2 pretend hosts x 2 ranks with COLLOPS_ENGINE=c10d: hierarchical,
    lccl inside each host and this c10d communicator between hosts (its Split makes the leaders'
    group), every op on the default group and on a subgroup."""
    ids = ",".join(f"pretend-host-{r // 2}" for r in range(4))
    run_job(4, COLLOPS_TEST_BACKEND="hccl", COLLOPS_ENGINE="c10d", COLLOPS_TEST_HOST_IDS=ids)


def _reinit_between_ops(ctx, store_dir):
    """The same op params before and after destroy_process_group + a new init: the cached
    communicator over the destroyed group counts as broken and the new group is adopted."""
    import json

    import torch
    import torch.distributed as dist

    import collops  # noqa: F401

    param = json.dumps(
        {
            "rank": ctx.rank,
            "rankSize": ctx.world_size,
            "backend": "c10d",
            "commDomain": "",
            "allReduceType": "sum",
        }
    )
    for round_ in range(2):
        dist.init_process_group(
            "gloo",
            init_method=f"file://{store_dir}/store{round_}",
            rank=ctx.rank,
            world_size=ctx.world_size,
        )
        try:
            op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
            assert json.loads(op.set_param(param))["result"] == 0
            (y,) = op.execute([torch.full((3,), float(ctx.rank + round_))])
            want = float(sum(r + round_ for r in range(ctx.world_size)))
            assert torch.equal(y, torch.full((3,), want)), (round_, y)
        finally:
            dist.destroy_process_group()


def test_c10d_adopts_a_recreated_default_group(tmp_path):
    from rank_harness import run_process_ranks

    run_process_ranks(2, _reinit_between_ops, str(tmp_path))
