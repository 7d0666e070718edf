"""TorchAir's collective-in-graph example (examples/python/torchair_all_reduce.py) runs unchanged
on CPU with the collops shims of torch_npu and torchair (python/torch_npu_shim), in both of the
ways the example patches torch.distributed; and the shim's own rules."""

import os
import subprocess
import sys
import time

from repo_paths import REPO, SHIM_PYTHONPATH

SEED_SCRIPT = os.path.join(REPO, "examples", "python", "torchair_all_reduce.py")


def _shim_env(**extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLLOPS_JOB_ID", "MASTER_ADDR", "MASTER_PORT", "TORCH_LOGS")
    }
    env.update(
        PYTHONPATH=SHIM_PYTHONPATH,
        COLLOPS_JOB_ID=f"torchair-{os.getpid()}-{time.time_ns()}",
        **extra,
    )
    return env


def _run(args, **env):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=_shim_env(**env), timeout=300
    )


def _run_seed(script):
    """Runs `script` with dynamo's graph logs on; checks that every rank compiled the model into
    one graph holding the collops all_reduce, with no graph break."""
    done = _run([script], TORCH_LOGS="graph_breaks,graph_code")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    for rank in (0, 1):
        lines = [line for line in done.stderr.splitlines() if line.startswith(f"[rank{rank}]:")]
        text = "\n".join(lines)
        assert text.count("TRACED GRAPH") == 1, text[-4000:]
        assert "torch.ops.collops.all_reduce(" in text, text[-4000:]
        assert "Graph break" not in text, text[-4000:]


def test_seed_000_runs_unchanged():
    _run_seed(SEED_SCRIPT)


def test_seed_000_with_the_older_all_reduce_patch_module(tmp_path):
    """The example's second way: importing TorchAir's patch_for_hcom_allreduce module patches."""
    with open(SEED_SCRIPT) as f:
        text = f.read()
    assert "torchair.patch_for_hcom()\n" in text
    script = tmp_path / "torchair_patch_module.py"
    script.write_text(
        text.replace(
            "torchair.patch_for_hcom()\n",
            "import torchair.ge_concrete_graph.ge_converter.experimental.patch_for_hcom_allreduce\n",
        )
    )
    _run_seed(str(script))


def test_without_a_patch_the_compiled_all_reduce_is_not_a_collops_op(tmp_path):
    """The check above can fail: unpatched, dynamo does not put collops' op in the graph."""
    with open(SEED_SCRIPT) as f:
        text = f.read()
    script = tmp_path / "torchair_unpatched.py"
    script.write_text(text.replace("torchair.patch_for_hcom()\n", ""))
    done = _run([str(script)], TORCH_LOGS="graph_code")
    assert "torch.ops.collops.all_reduce(" not in done.stderr, done.stderr[-4000:]


def test_compiler_config_records_any_option_and_the_backend_compiles():
    done = _run(
        [
            "-c",
            "import torch, torch_npu, torchair\n"
            "from torchair.configs.compiler_config import CompilerConfig\n"
            "config = CompilerConfig()\n"
            "config.mode = 'reduce-overhead'\n"
            "config.experimental_config.frozen_parameter = True\n"
            "config.debug.graph_dump.type = 'pbtxt'\n"
            "assert config.as_dict() == {'mode': 'reduce-overhead', 'experimental_config':\n"
            "    {'frozen_parameter': True}, 'debug': {'graph_dump': {'type': 'pbtxt'}}}\n"
            "backend = torchair.get_npu_backend(compiler_config=config)\n"
            "f = torch.compile(lambda x: torch.sin(x) * 2, backend=backend, fullgraph=True)\n"
            "x = torch.arange(4.0)\n"
            "assert torch.allclose(f(x), torch.sin(x) * 2)\n"
            "try:\n"
            "    torchair.get_npu_backend(compiler_config={'mode': 'max-autotune'})\n"
            "except TypeError as e:\n"
            "    assert 'CompilerConfig' in str(e), e\n"
            "else:\n"
            "    raise AssertionError('a dict was taken for a CompilerConfig')\n"
            "print('ok')\n",
        ]
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_torchair_shim_refuses_beside_a_real_torch_npu():
    done = _run(
        [
            "-c",
            "import sys, types\n"
            "sys.modules['torch_npu'] = types.ModuleType('torch_npu')\n"
            "from collops.compat import torchair\n"
            "for call in (torchair.patch_for_hcom, torchair.get_npu_backend):\n"
            "    try:\n"
            "        call()\n"
            "        print('not refused')\n"
            "    except RuntimeError as e:\n"
            "        assert 'real torch_npu' in str(e), e\n"
            "print('ok')\n",
        ]
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
