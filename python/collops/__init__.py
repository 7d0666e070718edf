"""collops: ATB-style collective-communication operations on CPU tensors, from PyTorch.

``import collops`` (after or without ``import torch``; torch is imported first either way) loads
``libcollops_torch.so``, which registers ``torch.classes.OperationTorch.OperationTorch`` -- ATB's
Python test class -- over every collops operation::

    import collops, json, torch
    op = torch.classes.OperationTorch.OperationTorch("AllReduceOperation")
    op.set_param(json.dumps({"rank": 0, "rankSize": 1, "commMode": 1}))
    (y,) = op.execute([torch.ones(4)])

Where the library is looked for: :mod:`collops._library`. Each module imports what it needs, so
the library is loaded before anything uses it, whichever module is imported first.

ATB scripts that ``import torch_npu``: see :mod:`collops.compat`.
"""

import torch  # noqa: F401  (first: the library resolves its torch symbols against it)

# torch.distributed backend "collops", torch.ops.collops.* (graph-capturable collectives) with
# their gradients, and the helpers over them.
from . import _c10d_backend, _gradients, compat, distributed, functional, ops  # noqa: F401
from ._library import library_path
from .patch import patch_torch_distributed  # noqa: F401  (collops.patch_torch_distributed)

__all__ = ["__version__", "library_path", "compat", "release_communicators"]

#: The version of the loaded library (collops::Version(), the CMake project version), which the
#: wheel's metadata carries too.
__version__ = _c10d_backend.factory().version()


def release_communicators(comm_domain=None):
    """Lets go of the communicators that this process' ``OperationTorch`` objects created: those
    of ``comm_domain``, or all of them when it is None. Returns how many were let go.

    They are cached per (backend, commDomain, rankSize, rank, commMode) for the life of the
    process, so that later operations reuse them; a job that goes through many commDomains calls
    this when it is done with one, as it would call ``destroy_process_group``: on every rank at
    the same point of its calls. A communicator is freed once no ``OperationTorch`` holds it (an
    object holds it from its first execute until it is deleted or given new params); the next
    operation of that domain then makes a new one, which the peers must make too.
    """
    if comm_domain is not None and not isinstance(comm_domain, str):
        raise TypeError(
            f"release_communicators: comm_domain must be a str or None, "
            f"got {type(comm_domain).__name__}"
        )
    return _c10d_backend.factory().release_communicators(comm_domain)
