"""``torch_npu.distributed`` of the torch_npu shim: torch_npu's uneven collectives over collops.

``all_gather_into_tensor_uneven(output, input, output_split_sizes=None, group=None,
async_op=False)`` and ``reduce_scatter_tensor_uneven(output, input, input_split_sizes=None,
op=dist.ReduceOp.SUM, group=None, async_op=False)`` keep torch_npu's signatures (TorchAir's
documentation lists them among the collectives); ``async_op=True`` returns a completed Work, since collops runs the
collective before returning. They work on any process group, as :mod:`collops.distributed`'s do.
"""

from ..distributed import all_gather_into_tensor_uneven, reduce_scatter_tensor_uneven

__all__ = ["all_gather_into_tensor_uneven", "reduce_scatter_tensor_uneven"]
