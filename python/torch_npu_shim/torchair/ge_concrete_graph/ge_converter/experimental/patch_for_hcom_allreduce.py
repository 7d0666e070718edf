"""Importing this patches torch.distributed, as TorchAir's module of this name does."""

import torchair  # noqa: F401
from collops.compat.torchair import patch_for_hcom_allreduce

patch_for_hcom_allreduce()
