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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RANK_SCRIPT = os.path.join(HERE, "c10d_engine_rank.py")
DEADLINE = float(os.environ.get("COLLOPS_TEST_DEADLINE", "240"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(world_size, **env_extra):
    """Runs c10d_engine_rank.py as `world_size` processes over 127.0.0.1; returns each rank's
    output. Fails naming every rank that exited nonzero or outlived the deadline (then killed)."""
    env = {k: v for k, v in os.environ.items() if k != "COLLOPS_JOB_ID"}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world_size),
               COLLOPS_JOB_ID=f"c10d-engine-{os.getpid()}-{time.time_ns()}",
               PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"), HERE,
                                           env.get("PYTHONPATH", "")]))
    env.setdefault("COLLOPS_TIMEOUT", "60")
    env.update(env_extra)
    procs = [subprocess.Popen([sys.executable, RANK_SCRIPT], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world_size)]
    deadline = time.monotonic() + DEADLINE
    outputs, failures = [], []
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            failures.append(f"--- rank {rank}: still running after {DEADLINE:.0f} s (killed)\n"
                            f"{out[-3000:]}")
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


def test_c10d_over_a_collops_group():
    """Any ProcessGroup works: here the default group is torch.distributed's "collops" backend
    (lccl underneath), and backend "c10d" rides on it."""
    outputs = run_job(2, COLLOPS_TEST_GROUP_BACKEND="collops",
                      COLLOPS_TEST_CASES="all_reduce,all_gather_v,reduce_scatter_v,all_to_allv,"
                                         "send_recv,p2p_mismatch")
    assert "rank 1: reduce_scatter_v domain '': PASS" in outputs[1]
