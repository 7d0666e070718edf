"""LinearParallel's oneDNN products inside a torch process, whatever kernel oneDNN picks.

torch carries its own oneDNN and exports its symbols; collops' oneDNN (the system's) must keep
its own one-time kernel tables, or its `gemm:jit` kernels fail to execute. Capping oneDNN at AVX2
(as on a CPU without AVX-512) makes it choose those kernels for a float32 product, on any CPU.
"""

import os
import subprocess
import sys

import pytest

from repo_paths import PYTHON_DIR

_CHILD = r"""
import json, torch
import collops  # noqa: F401  (OperationTorch)

op = torch.classes.OperationTorch.OperationTorch("LinearParallelOperation")
status = json.loads(op.set_param(json.dumps({"rank": 0, "rankSize": 1, "type": 3})))
assert status["result"] == 0, status
torch.manual_seed(0)
x, w = torch.randn(5, 64), torch.randn(24, 64)
(y,) = op.execute([x, w])
golden = (x.double() @ w.double().t()).float()
err = (y - golden).abs().max().item()
assert err <= 2**-11 * max(1.0, golden.abs().max().item()), err
print("product ok", err)
"""


@pytest.mark.parametrize("isa", ["AVX2", "DEFAULT"])
def test_float32_product_in_a_torch_process(isa):
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([PYTHON_DIR, os.environ.get("PYTHONPATH", "")])
    )
    if isa != "DEFAULT":
        env["DNNL_MAX_CPU_ISA"] = isa  # oneDNN 2.x's name
        env["ONEDNN_MAX_CPU_ISA"] = isa
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "product ok" in proc.stdout, proc.stdout + proc.stderr
