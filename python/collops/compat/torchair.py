"""A CPU stand-in for the parts of TorchAir that collective-in-graph scripts use.

TorchAir compiles torch graphs for the NPU's graph engine and makes ``torch.distributed``
collectives capturable. On CPU the graph engine is torch's own (inductor) and the capture is
:func:`collops.patch_torch_distributed`:

* ``torchair.patch_for_hcom()`` and importing
  ``torchair.ge_concrete_graph.ge_converter.experimental.patch_for_hcom_allreduce`` (TorchAir's
  older way, all_reduce only) patch ``torch.distributed`` so compiled calls become
  ``torch.ops.collops.*`` ops, without a graph break;
* ``torchair.get_npu_backend(compiler_config=...)`` is a ``torch.compile`` backend that compiles
  with inductor;
* ``CompilerConfig()`` takes any of TorchAir's graph-engine options (``config.mode``,
  ``config.experimental_config.frozen_parameter``, ...) and records them; none has a meaning for
  inductor, so none changes what runs.

Unchanged scripts put ``<repo>/python/torch_npu_shim`` on ``PYTHONPATH``, whose ``torchair``
package re-exports this module; the torch_npu shim there maps ``init_process_group("hccl")`` and
``.to("npu:<n>")`` to CPU (:mod:`collops.compat.torch_npu`).
"""

import torch

from ..patch import patch_torch_distributed
from .torch_npu import real_torch_npu

__all__ = ["patch_for_hcom", "patch_for_hcom_allreduce", "get_npu_backend", "CompilerConfig"]


def _refuse_beside_a_real_torch_npu():
    loaded = real_torch_npu()
    if loaded is not None:
        raise RuntimeError(
            "collops torchair shim: a real torch_npu is imported "
            f"({getattr(loaded, '__file__', loaded)}); use the real torchair"
        )


def patch_for_hcom():
    """Makes compiled ``torch.distributed`` collectives graph-captured collops ops."""
    _refuse_beside_a_real_torch_npu()
    patch_torch_distributed()


def patch_for_hcom_allreduce():
    """TorchAir's all_reduce-only patch; collops patches every capturable collective at once,
    which compiles the same all_reduce and leaves no other collective to break the graph."""
    patch_for_hcom()


class _Options:
    """A namespace of graph-engine options: any attribute can be set and read back; reading one
    never set gives a nested namespace, so ``config.a.b = 1`` works as on TorchAir's config."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        child = _Options()
        object.__setattr__(self, name, child)
        return child

    def as_dict(self):
        """The options set, nested as they were set (for logs and tests)."""
        return {k: v.as_dict() if isinstance(v, _Options) else v for k, v in vars(self).items()}


class CompilerConfig(_Options):
    """TorchAir's compiler configuration; see the module docstring."""


def get_npu_backend(*, compiler_config=None):
    """A ``torch.compile`` backend: inductor, whatever `compiler_config` holds."""
    _refuse_beside_a_real_torch_npu()
    if compiler_config is not None and not isinstance(compiler_config, _Options):
        raise TypeError(
            "collops torchair shim: compiler_config must be a "
            f"torchair.configs.compiler_config.CompilerConfig, got "
            f"{type(compiler_config).__name__}"
        )
    return torch._dynamo.lookup_backend("inductor")
