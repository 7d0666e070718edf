"""DeepSpeed as a peer: its CPU accelerator and shared-memory all_reduce kernel over the existing
default group, and the shared-memory files that kernel leaves behind.
"""

import os


class DeepSpeedShm:
    """DeepSpeed's CPU accelerator and its shared-memory kernel, as deepspeed.init_distributed
    sets them up over the existing default group. path_taken() says which way
    deepspeed.comm.inference_all_reduce goes for a dtype, by DeepSpeed's own rule; checked()
    also counts the calls that reached torch.distributed.all_reduce (a fallback) during one
    call."""

    def __init__(self):
        import deepspeed
        import deepspeed.comm as dscomm
        from deepspeed.utils import logger

        logger.setLevel("WARNING")
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
        self.cdb = dscomm.comm.cdb
        self.version = deepspeed.__version__

    def path_taken(self, dtype):
        import torch

        if getattr(self.cdb, "shm_comm_op", None) is None:
            return "fallback: DeepSpeed built no shared-memory kernel"
        if not (
            hasattr(torch.ops, "deepspeed")
            and hasattr(torch.ops.deepspeed, "inference_all_reduce_")
        ):
            return "fallback: torch.ops.deepspeed.inference_all_reduce_ is missing"
        need = 1 if dtype == torch.float32 else 2
        have = getattr(self.cdb, "shm_vector_kernel_level", 0)
        if have < need:
            return (
                f"fallback: this CPU lacks the ISA of DeepSpeed's {dtype} kernel (level "
                f"{have} < {need}: avx2 for float32, avx512bw for 16-bit)"
            )
        return "shm"

    def checked(self, check, dtype):
        import torch.distributed as dist

        original, calls = dist.all_reduce, []

        def counting(*args, **kwargs):
            calls.append(1)
            return original(*args, **kwargs)

        dist.all_reduce = counting
        try:
            wrong = check()
        finally:
            dist.all_reduce = original
        taken = self.path_taken(dtype)
        if calls and taken == "shm":
            raise RuntimeError(
                "DeepSpeed reached torch.distributed.all_reduce although its "
                "rule says the shared-memory kernel runs"
            )
        return wrong


def ds_segments(world, addr, port):
    """The shared-memory files DeepSpeed's kernel makes for ranks 0..world-1 of a job with
    MASTER_ADDR `addr` and MASTER_PORT `port`: its shm.cpp names each
    deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank> (in /dev/shm) and never unlinks it, so
    every rank's file (over 64 MiB) outlives the job."""
    prefix = f"deepspeed_allreduce_buffer_{os.getuid()}_{addr}_{port}"
    return [os.path.join("/dev/shm", f"{prefix}_{r}") for r in range(world)]


def remove_ds_segments(candidates, existed):
    """Unlinks the files of `candidates` that exist now and were not in `existed` (the ones this
    run created); returns their paths."""
    removed = []
    for path in candidates:
        if path not in existed and os.path.exists(path):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed
