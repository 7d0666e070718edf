"""Checks an installed collops wheel (tests/install/wheel_smoke.sh runs it in a fresh venv):

- `import collops` loads the package and the libraries of the venv, nothing of the checkout;
- collops.__version__ (collops::Version() of the loaded library), the wheel's metadata and the
  CMake project version are one version; the wheel requires exactly the torch installed;
- a 2-process OperationTorch AllReduce and a 2-process dist.all_reduce on "cpu:collops" give the
  sums, every rank's exit code checked within a deadline;
- the ATB-named alias beside the library loads that same library.

    python wheel_smoke.py <expected version> <venv> <checkout>
"""

import importlib.metadata
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile

import torch

DEADLINE_S = 120


def all_reduce_operation_torch(rank, domain):
    import collops  # noqa: F401  (registers OperationTorch in this process)

    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    result = json.loads(
        op.set_param(
            json.dumps({"rank": rank, "rankSize": 2, "backend": "lccl", "commDomain": domain})
        )
    )
    assert result["result"] == 0, result
    (y,) = op.execute([torch.arange(8.0) + 100 * rank])
    assert torch.equal(y, torch.arange(8.0) * 2 + 100), y


def all_reduce_distributed(rank, store_path):
    import torch.distributed as dist

    import collops  # noqa: F401  (registers the "collops" backend)

    dist.init_process_group(
        "cpu:collops", init_method=f"file://{store_path}", rank=rank, world_size=2
    )
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), 3.0)), t
    dist.destroy_process_group()


def run_two_ranks(target, arg):
    """Runs target(rank, arg) in 2 spawned processes; every exit code must be 0 in time."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=(rank, arg)) for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(DEADLINE_S)
    for p in procs:
        if p.is_alive():
            p.kill()
    codes = [p.exitcode for p in procs]
    assert codes == [0, 0], f"{target.__name__}: rank exit codes {codes}"


def main():
    expected, venv, checkout = sys.argv[1:]
    import collops

    venv, checkout = os.path.realpath(venv), os.path.realpath(checkout)
    for what, path in (("collops", collops.__file__), ("the library", collops.library_path())):
        path = os.path.realpath(path)
        assert path.startswith(venv + os.sep), f"{what} comes from {path}, not the venv {venv}"
        assert not path.startswith(checkout + os.sep), f"{what} comes from the checkout: {path}"

    wheel_version = importlib.metadata.version("collops")
    assert collops.__version__ == wheel_version == expected, (
        f"collops.__version__ {collops.__version__}, wheel {wheel_version}, CMake {expected}"
    )
    torch_public = torch.__version__.split("+")[0]
    requires = importlib.metadata.requires("collops")
    assert requires == [f"torch=={torch_public}"], requires

    lib_dir = os.path.dirname(collops.library_path())
    for name in ("libcollops.so", "libcollops_mpi.so", "libatb_test_framework.so"):
        assert os.path.isfile(os.path.join(lib_dir, name)), f"{name} is not in {lib_dir}"

    domain = f"wheel-smoke-{os.getpid()}"
    run_two_ranks(all_reduce_operation_torch, domain)
    with tempfile.TemporaryDirectory() as tmp:
        run_two_ranks(all_reduce_distributed, os.path.join(tmp, "store"))

    # An ATB script: $ATB_HOME_PATH/lib/libatb_test_framework.so first, then collops.
    atb_home = os.path.dirname(lib_dir)
    code = (
        "import os, torch\n"
        "torch.classes.load_library(os.environ['ATB_HOME_PATH'] + "
        "'/lib/libatb_test_framework.so')\n"
        "import collops\n"
        "torch.classes.OperationTorch.OperationTorch('AllReduceOperation')\n"
        "maps = open('/proc/self/maps').read().splitlines()\n"
        "paths = {line.split()[-1] for line in maps if 'libcollops_torch' in line}\n"
        "assert paths == {os.path.realpath(collops.library_path())}, paths\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, ATB_HOME_PATH=atb_home),
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    print(
        f"wheel: collops {collops.__version__} from {os.path.dirname(collops.__file__)}: "
        f"import, version, OperationTorch and cpu:collops all_reduce on 2 processes, "
        f"the ATB alias: ok"
    )


if __name__ == "__main__":
    main()
