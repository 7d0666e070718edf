"""DeepSpeed's own ``deepspeed.comm.all_reduce`` inside ``torch.compile(fullgraph=True)`` becomes
a graph-captured collops op, both as on an NPU host (DeepSpeed picks its NPU accelerator, which
finds the torch_npu shim) and on DeepSpeed's CPU accelerator; patching never imports DeepSpeed,
and DeepSpeed imported after the patch is patched. scripts/setup.sh installs DeepSpeed."""

import importlib.util
import os
import sys

import torch

from c10d_ranks import run_group_job
from repo_paths import PYTHON_DIR

WORLD = 2
DIM, HIDDEN = 8, 16
SHIM_DIR = os.path.join(PYTHON_DIR, "torch_npu_shim")


def _require_deepspeed():
    assert importlib.util.find_spec("deepspeed") is not None, (
        "DeepSpeed is not installed: scripts/setup.sh installs it"
    )


class _RowParallelLinear(torch.nn.Module):
    """DeepSpeed's LinearAllreduce: each rank holds HIDDEN/world input columns of the weight and
    its partial products are summed by deepspeed.comm.all_reduce."""

    def __init__(self, weight, rank, world):
        super().__init__()
        shard = weight.shape[1] // world
        self.weight = torch.nn.Parameter(weight[:, rank * shard : (rank + 1) * shard].clone())
        self.rank, self.shard = rank, shard

    def forward(self, x):
        import deepspeed.comm as ds_comm

        y = x[:, self.rank * self.shard : (self.rank + 1) * self.shard] @ self.weight.t()
        ds_comm.all_reduce(y)
        return torch.relu(y)


def _compile_and_check(ctx):
    """Compiles the row-parallel layer with fullgraph=True; checks the graph holds collops'
    all_reduce and the result equals the unsharded layer's, computed here."""
    weight = torch.randn(DIM, HIDDEN, generator=torch.Generator().manual_seed(0))
    x = torch.randn(4, HIDDEN, generator=torch.Generator().manual_seed(1))
    layer = _RowParallelLinear(weight, ctx.rank, ctx.world_size)
    graphs = []
    with torch.no_grad():
        got = torch.compile(
            layer, fullgraph=True, backend=lambda gm, _: graphs.append(gm) or gm.forward
        )(x)
    targets = {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}
    assert {"collops.all_reduce", "collops.all_reduce.default"} & targets, targets
    want = torch.relu(x @ weight.t())
    torch.testing.assert_close(got, want, rtol=2**-11, atol=2**-11)
    return layer, x, want


def _as_on_an_npu_host(ctx):
    """What an NPU host's script does first: import torch_npu (here: the shim, which maps
    init_process_group("hccl") to a collops group)."""
    sys.path.insert(0, SHIM_DIR)
    import torch_npu  # noqa: F401


def _ask_like_npu_accelerator(accelerator):
    """The questions DeepSpeed's NPU accelerator puts to torch.npu, each answered."""
    accelerator.set_device(1)
    assert accelerator.current_device() == 1 and accelerator.current_device_name() == "npu:1"
    assert accelerator.device_count() >= WORLD and accelerator.is_available()
    accelerator.synchronize()
    start, end = accelerator.Event(enable_timing=True), accelerator.Event(enable_timing=True)
    start.record()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0
    stream = accelerator.Stream()
    with accelerator.stream(stream):
        assert accelerator.current_stream() is stream
    assert accelerator.current_stream() is accelerator.default_stream()
    accelerator.current_stream().wait_event(end)
    state = accelerator.get_rng_state()
    first = torch.rand(3)
    accelerator.set_rng_state(state)
    assert torch.equal(torch.rand(3), first)
    accelerator.manual_seed(5)
    assert accelerator.initial_seed() == 5
    accelerator.manual_seed_all(5)
    assert accelerator.default_generator(1).initial_seed() == 5
    for ask in (
        "memory_allocated",
        "max_memory_allocated",
        "memory_cached",
        "max_memory_cached",
        "memory_reserved",
        "max_memory_reserved",
    ):
        assert getattr(accelerator, ask)() == 0, ask
    for ask in (
        "reset_max_memory_allocated",
        "reset_max_memory_cached",
        "reset_peak_memory_stats",
        "empty_cache",
    ):
        getattr(accelerator, ask)()
    assert accelerator.memory_stats() == {}
    assert accelerator.total_memory() > 0 and accelerator.available_memory() > 0
    assert accelerator.is_bf16_supported()
    ran = []
    accelerator.lazy_call(lambda: ran.append(True))
    assert ran == [True]
    assert accelerator.FloatTensor([1.0]).dtype == torch.float32
    assert accelerator.BFloat16Tensor([1.0]).dtype == torch.bfloat16
    assert accelerator.LongTensor([1]).dtype == torch.int64
    accelerator.set_device(0)


def _through_the_shims(ctx):
    import torchair

    torchair.patch_for_hcom()
    assert "deepspeed" not in sys.modules, "patching imported DeepSpeed"
    import deepspeed
    import deepspeed.comm as ds_comm
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    assert accelerator.device_name() == "npu", accelerator.device_name()
    _ask_like_npu_accelerator(accelerator)
    # The user's group is DeepSpeed's: init_distributed wraps it, as on an NPU host.
    deepspeed.init_distributed(dist_backend="hccl", auto_mpi_discovery=False)
    assert hasattr(ds_comm.all_reduce, "__collops_original__"), "imported later, left unpatched"
    layer, x, want = _compile_and_check(ctx)
    with torch.no_grad():  # uncompiled, the call goes through DeepSpeed's backend to "hccl"
        torch.testing.assert_close(layer(x), want, rtol=2**-11, atol=2**-11)
    return True


def test_deepspeed_all_reduce_compiles_fullgraph_through_the_npu_shims(monkeypatch, tmp_path):
    _require_deepspeed()
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    # CANN's environment on an NPU host, which DeepSpeed's NPU op builders read at init; empty:
    # no CANN here, so DeepSpeed builds no NPU op.
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    assert all(
        run_group_job(WORLD, _through_the_shims, backend="hccl", before_init=_as_on_an_npu_host)
    )


def _on_the_cpu_accelerator(ctx):
    import collops

    collops.patch_torch_distributed()
    assert "deepspeed" not in sys.modules, "patching imported DeepSpeed"
    import deepspeed.comm as ds_comm
    from deepspeed.accelerator import get_accelerator

    assert get_accelerator().device_name() == "cpu", get_accelerator().device_name()
    # No deepspeed.init_distributed: on its CPU accelerator it first builds DeepSpeed's
    # shared-memory kernel from C++ sources; the compiled call does not go through DeepSpeed's
    # backend anyway.
    _compile_and_check(ctx)
    # Imported before the patch: patched at once.
    collops.patch.unpatch_torch_distributed()
    assert not hasattr(ds_comm.all_reduce, "__collops_original__")
    collops.patch_torch_distributed()
    assert hasattr(ds_comm.all_reduce, "__collops_original__")
    collops.patch.unpatch_torch_distributed()
    return True


def test_deepspeed_all_reduce_compiles_fullgraph_on_its_cpu_accelerator(monkeypatch):
    _require_deepspeed()
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    assert all(run_group_job(WORLD, _on_the_cpu_accelerator))
