"""Loading OperationTorch's library and the torch_npu shim, in fresh interpreters: a missing
library, ATB's idioms through the shim, ATB_HOME_PATH's library name, and never two copies of the
library in one process.
"""

import os
import shutil
import subprocess
import sys

import collops
from repo_paths import REPO, SHIM_PYTHONPATH


def run_python(code, **env):
    """Runs `code` in a fresh interpreter with the shim and the source tree on PYTHONPATH (and
    the library this process loaded selected as here: COLLOPS_BUILD_DIR or COLLOPS_LIBRARY_DIR)."""
    full_env = dict(os.environ, PYTHONPATH=SHIM_PYTHONPATH, **env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )


def test_missing_library_gives_import_error_saying_how_to_get_it():
    done = run_python("import collops", COLLOPS_LIBRARY_DIR="/nonexistent-collops")
    assert done.returncode != 0
    assert "ImportError" in done.stderr, done.stderr
    assert "/nonexistent-collops/libcollops_torch.so (COLLOPS_LIBRARY_DIR)" in done.stderr
    assert "pip install --no-build-isolation" in done.stderr, done.stderr
    assert "COLLOPS_BUILD_DIR=" in done.stderr, done.stderr


def test_torch_npu_shim_runs_atb_idioms():
    done = run_python(
        "import torch, torch_npu\n"
        "torch_npu.npu.set_device(3)\n"
        "assert torch.npu.current_device() == 3 and torch_npu.npu.current_device() == 3\n"
        "x = torch.ones(2)\n"
        "assert x.npu() is x and x.npu().device.type == 'cpu'\n"
        "torch.npu.synchronize()\n"
        "assert torch_npu.npu_format_cast(x, 2) is x\n"
        "op = torch.classes.OperationTorch.OperationTorch('AllToAllVV2Operation')\n"
        "import collops.compat.torch_npu as shim\n"
        "assert torch_npu is shim\n"
        "print('ok')\n"
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_torch_npu_shim_keeps_npu_moves_on_cpu_and_maps_hccl_to_collops():
    done = run_python(
        "import torch, torch_npu\n"
        "import torch.distributed as dist\n"
        "x = torch.ones(2, dtype=torch.int32)\n"
        "for moved in (x.to('npu:1'), x.to('npu'), x.to(device='npu:0'),\n"
        "              x.to('npu:0', torch.float64), x.to(device='npu:0', dtype=torch.float64)):\n"
        "    assert moved.device.type == 'cpu' and torch.equal(moved.int(), x), moved\n"
        "assert x.to('npu:0', torch.float64).dtype == torch.float64\n"
        "assert x.to(torch.float16).dtype == torch.float16 and x.to('cpu') is x\n"
        "m = torch.nn.Linear(2, 2)\n"
        "assert m.to('npu:3') is m and m.weight.device.type == 'cpu'\n"
        "assert m.to('npu:0', torch.float64).weight.dtype == torch.float64\n"
        "def f(x):  # compiled .to calls, npu or not, stay in one graph\n"
        "    return x.to(torch.float64) * 2 + x.to('npu:0').sum() + x.to(device='npu').sum()\n"
        "y = torch.arange(4.0, requires_grad=True)\n"
        "got = torch.compile(f, fullgraph=True)(y)\n"
        "assert torch.equal(got, f(y)) and got.dtype == torch.float64\n"
        "got.sum().backward()\n"
        "assert torch.equal(y.grad, torch.full((4,), 10.0)), y.grad\n"
        "for bad in ('npu:x', 'npu:-1'):\n"
        "    try:\n"
        "        x.to(bad)\n"
        "        print('moved to', bad)\n"
        "    except RuntimeError as e:\n"
        "        assert bad in str(e), e\n"
        "assert 'hccl' in dist.Backend.backend_list\n"
        "assert dist.Backend.backend_capability['hccl'] == ['cpu']\n"
        "dist.init_process_group('hccl', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
        "from collops import _c10d_backend as backend\n"
        "assert backend.communicator_name() == '', 'no collective yet'\n"
        "t = torch.full((3,), 2.0)\n"
        "dist.all_reduce(t)\n"
        "assert backend.communicator_name() == 'lccl', backend.communicator_name()\n"
        "assert torch.equal(t, torch.full((3,), 2.0))\n"
        "print('ok')\n"
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_torch_npu_shim_makes_factory_calls_on_npu_cpu_tensors():
    done = run_python(
        "import torch, torch_npu\n"
        "x = torch.arange(3.0)\n"
        "made = [torch.ones(2, device='npu:0'), torch.zeros(2, 3, device='npu'),\n"
        "        torch.empty(4, dtype=torch.int8, device='npu:1'), torch.full((2,), 7, device='npu'),\n"
        "        torch.randn(5, device='npu:0'), torch.arange(4, device='npu'),\n"
        "        torch.tensor([1, 2], device='npu:0'), torch.zeros_like(x, device='npu'),\n"
        "        x.new_ones(2, device='npu:0'), torch.eye(2, device='npu')]\n"
        "assert all(t.device.type == 'cpu' for t in made), [t.device for t in made]\n"
        "assert torch.equal(made[3], torch.full((2,), 7)) and made[2].dtype == torch.int8\n"
        "assert torch.equal(made[6], torch.tensor([1, 2]))\n"
        "def f(y):  # in compiled code too, in the one graph\n"
        "    return y + torch.ones(3, device='npu:0') + torch.arange(3, device='npu')\n"
        "assert torch.equal(torch.compile(f, fullgraph=True)(x), f(x))\n"
        "try:\n"
        "    torch.ones(2, device='npu:x')\n"
        "    print('made on npu:x')\n"
        "except RuntimeError as e:\n"
        "    assert 'npu:x' in str(e), e\n"
        "assert torch.ones(1, device='cpu').device.type == 'cpu'\n"
        "import torch_npu as again  # a second install leaves one mode, not two\n"
        "again.install()\n"
        "from torch.overrides import _get_current_function_mode_stack as stack\n"
        "assert len(stack()) == 1, stack()\n"
        "import threading  # modes are per thread: another thread installs for itself\n"
        "seen = []\n"
        "def other():\n"
        "    torch_npu.install()\n"
        "    seen.append(torch.ones(1, device='npu:0').device.type)\n"
        "worker = threading.Thread(target=other)\n"
        "worker.start()\n"
        "worker.join()\n"
        "assert seen == ['cpu'], seen\n"
        "print('ok')\n"
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_install_torch_npu_does_not_shadow_a_real_one():
    done = run_python(
        "import sys, types\n"
        "sys.modules['torch_npu'] = types.ModuleType('torch_npu')\n"
        "import collops\n"
        "try:\n"
        "    collops.compat.install_torch_npu()\n"
        "except RuntimeError as e:\n"
        "    print('refused' if 'not shadowing' in str(e) else e)\n"
    )
    assert done.stdout.strip() == "refused", done.stdout + done.stderr


def test_atb_home_path_library_name_loads_the_same_library():
    # ATB scripts load $ATB_HOME_PATH/lib/libatb_test_framework.so themselves; the build puts
    # that name beside libcollops_torch.so, as a library that loads it.
    alias = os.path.join(os.path.dirname(collops.library_path()), "libatb_test_framework.so")
    assert os.path.exists(alias), f"{alias} missing: torch_bindings/CMakeLists.txt builds it"
    atb_home = os.path.dirname(os.path.dirname(alias))
    for prelude, epilogue in (
        ("import torch\n", "import collops\n"),
        ("import torch, collops\n", ""),
    ):
        done = run_python(
            prelude
            + f"torch.classes.load_library({alias!r})\n"
            + epilogue
            + "op = torch.classes.OperationTorch.OperationTorch('AllReduceOperation')\n"
            "maps = open('/proc/self/maps').read().splitlines()\n"
            "paths = {line.split()[-1] for line in maps if 'libcollops_torch' in line}\n"
            "assert len(paths) == 1, paths\n"
            "print('ok')\n",
            ATB_HOME_PATH=atb_home,
        )
        assert done.returncode == 0 and done.stdout.strip() == "ok", prelude + done.stderr


def test_atb_home_path_and_another_build_never_load_two_copies(tmp_path):
    # ATB_HOME_PATH names one copy of the library and COLLOPS_BUILD_DIR another (a copy, as an
    # ATB install of another build would hold): only one may load, since a second aborts the
    # process ("Only a single TORCH_LIBRARY can be used to register the namespace OperationTorch").
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(collops.library_path(), lib / "libatb_test_framework.so")
    atb = str(lib / "libatb_test_framework.so")
    build = os.environ.get("COLLOPS_BUILD_DIR", os.path.join(REPO, "build"))
    use = "op = torch.classes.OperationTorch.OperationTorch('AllReduceOperation')\nprint('ok')\n"
    # The ATB script loads its library first: collops uses that copy.
    done = run_python(
        f"import torch\ntorch.classes.load_library({atb!r})\nimport collops\n" + use,
        ATB_HOME_PATH=str(tmp_path),
        COLLOPS_BUILD_DIR=build,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    # collops first: it refuses, naming both files, before anything aborts.
    done = run_python(
        "import collops\n" + use, ATB_HOME_PATH=str(tmp_path), COLLOPS_BUILD_DIR=build
    )
    assert done.returncode != 0 and "ImportError" in done.stderr, done.stderr
    assert "are different files" in done.stderr and atb in done.stderr, done.stderr
