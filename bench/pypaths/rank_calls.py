"""One rank's side of a row: the barrier outside every library under test that starts each timed
call, and every path's call and golden check for one (op, dtype, size).
"""

import json
import os
import time

from pypaths.columns import DS_PATHS


class SpinBarrier:
    """A barrier outside every library under test (bench/spin_barrier.h in Python): each rank
    writes its round into a word of its own (one cache line apart) and waits until every word has
    reached it. With more ranks than CPUs a waiting rank yields its CPU on every look."""

    STRIDE = 8  # 64-byte lines of uint64

    def __init__(self, words, ranks, rank):
        self.words, self.ranks, self.rank, self.round = words, ranks, rank, 0
        self.yield_cpu = ranks > (os.cpu_count() or 1)

    def wait(self, timeout=120.0):
        self.round += 1
        words, stride, target = self.words, self.STRIDE, self.round
        words[self.rank * stride] = target
        deadline = time.monotonic() + timeout
        for r in range(self.ranks):
            looks = 0
            while words[r * stride] < target:
                if self.yield_cpu:
                    os.sched_yield()
                looks += 1
                if looks % 65536 == 0 and time.monotonic() > deadline:
                    raise RuntimeError(f"spin barrier: rank {r} did not arrive in {timeout} s")


def _torch_dtype(name):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


class Row:
    """One rank's tensors and callables for one (op, dtype, size): {path: call} and {path: check},
    check() returning the number of wrong elements after one call on golden inputs."""

    def __init__(self, env, op, dtype, size):
        import torch
        import torch.distributed as dist

        # torch's custom-class method of an OperationTorch object (the builtin execute skips it)
        torch_method = torch.ScriptObject.__getattr__
        self.calls, self.checks, self.notes = {}, {}, {}
        R, rank = env.world, env.rank
        t = _torch_dtype(dtype)
        esize = torch.empty((), dtype=t).element_size()
        param = json.dumps(
            {
                "rank": rank,
                "rankSize": R,
                "backend": "lccl",
                "commMode": 0,
                "commDomain": "python-paths",
            }
        )
        gname = dist.group.WORLD.group_name
        if op == "allreduce":
            n = max(size // esize, 1)
            x = torch.zeros(n, dtype=t)
            y = torch.zeros(n, dtype=t)
            opt = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
            opt.set_param(json.dumps({**json.loads(param), "allReduceType": "sum"}))
            opt.execute([x])  # creates the communicator, so empty_shared can use its heap
            out = opt.empty_shared([n], t)
            golden = R * (R + 1) / 2
            self.calls = {
                "execute": lambda: opt.execute([x]),
                "execute_torch": lambda: torch_method(opt, "execute")([x]),
                "execute_out": lambda: opt.execute_out([x], [out]),
                # "sum" on the default group: the schema's defaults, as DeepSpeed users call theirs.
                "ops": lambda: torch.ops.collops.all_reduce(x),
                # DeepSpeed's op shape: ds_kernel's call with collops for deepspeed.
                "ops_": lambda: torch.ops.collops.inference_all_reduce_(y),
                "dist": lambda: dist.all_reduce(y),
                "noop": lambda: dist.all_reduce(y, group=env.noop),
                "gloo": lambda: dist.all_reduce(y, group=env.gloo),
            }

            def wrong(result):
                return int((result.float() != golden).sum())

            def check_out_of_place(fn, result_of):
                x.fill_(rank + 1)
                try:
                    return wrong(result_of(fn()))
                finally:
                    x.zero_()

            def check_in_place(fn):
                y.fill_(rank + 1)
                try:
                    fn()
                    return wrong(y)
                finally:
                    y.zero_()

            self.checks = {
                "execute": lambda: check_out_of_place(self.calls["execute"], lambda r: r[0]),
                "execute_torch": lambda: check_out_of_place(
                    self.calls["execute_torch"], lambda r: r[0]
                ),
                "execute_out": lambda: check_out_of_place(
                    lambda: (out.fill_(-1), self.calls["execute_out"]()), lambda r: out
                ),
                "ops": lambda: check_out_of_place(self.calls["ops"], lambda r: r),
                "ops_": lambda: check_in_place(self.calls["ops_"]),
                "dist": lambda: check_in_place(self.calls["dist"]),
                "noop": lambda: 0,  # moves nothing by design
                "gloo": lambda: check_in_place(self.calls["gloo"]),
            }
            if env.ds is not None:
                import deepspeed.comm as dscomm

                self.calls["deepspeed"] = lambda: dscomm.inference_all_reduce(y)
                self.calls["ds_kernel"] = lambda: torch.ops.deepspeed.inference_all_reduce_(y)
                for p in DS_PATHS:
                    self.checks[p] = lambda p=p: env.ds.checked(
                        lambda: check_in_place(self.calls[p]), t
                    )
                    self.notes[p] = env.ds.path_taken(t)
        elif op == "allgather":
            n = max(size // esize // R, 1)  # each rank's block: S is the gathered output
            x = torch.zeros(n, dtype=t)
            y = torch.zeros(n * R, dtype=t)
            opt = torch.classes.OperationTorch.OperationTorch("AllGatherOperation")
            opt.set_param(param)
            opt.execute([x])
            out = opt.empty_shared([R, n], t)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            self.calls = {
                "execute": lambda: opt.execute([x]),
                "execute_torch": lambda: torch_method(opt, "execute")([x]),
                "execute_out": lambda: opt.execute_out([x], [out]),
                "ops": lambda: torch.ops.collops.all_gather(x, gname),
                "dist": lambda: gather(y, x),
                "noop": lambda: gather(y, x, group=env.noop),
                "gloo": lambda: gather(y, x, group=env.gloo),
            }
            golden = torch.arange(1, R + 1, dtype=torch.float32).repeat_interleave(n)

            def wrong_gather(result):
                return int((result.reshape(-1).float() != golden).sum())

            def check(fn, result_of, poison):
                x.fill_(rank + 1)
                poison.fill_(-1)
                try:
                    return wrong_gather(result_of(fn()))
                finally:
                    x.zero_()

            self.checks = {
                "execute": lambda: check(self.calls["execute"], lambda r: r[0], y),
                "execute_torch": lambda: check(self.calls["execute_torch"], lambda r: r[0], y),
                "execute_out": lambda: check(self.calls["execute_out"], lambda r: out, out),
                "ops": lambda: check(self.calls["ops"], lambda r: r, y),
                "dist": lambda: check(self.calls["dist"], lambda r: y, y),
                "noop": lambda: 0,
                "gloo": lambda: check(self.calls["gloo"], lambda r: y, y),
            }
            for p in DS_PATHS:
                self.notes[p] = "no shared-memory all_gather in DeepSpeed"
        else:
            raise ValueError(op)
