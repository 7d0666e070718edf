"""``import torchair`` on a machine without an NPU: the collops CPU shim
(:mod:`collops.compat.torchair`; enabled as the torch_npu shim beside it is)."""

import torch_npu  # noqa: F401  (TorchAir needs torch_npu; here: the collops shim, which loads collops)
from collops.compat.torchair import (
    CompilerConfig,
    get_npu_backend,  # noqa: F401
    patch_for_hcom,
)

__all__ = ["CompilerConfig", "get_npu_backend", "patch_for_hcom"]
