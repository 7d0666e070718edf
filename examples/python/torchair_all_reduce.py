# TorchAir's collective-in-graph example, exactly as its documentation writes it (only this
# comment and line breaks are added). On CPU it runs with the
# collops shims of torch_npu and torchair on the path:
#     PYTHONPATH=python/torch_npu_shim:python python3 examples/python/torchair_all_reduce.py
# "hccl" is then a collops group, .to("npu:<n>") stays on CPU, torchair.patch_for_hcom() is
# collops.patch_torch_distributed() and the npu backend compiles with inductor.
import os
import torch
import torch_npu
import torchair
from torchair.configs.compiler_config import CompilerConfig

# 导入patch包
torchair.patch_for_hcom()


class AllReduceSingeGroup(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x = x + y
        torch.distributed.all_reduce(x, op=torch.distributed.ReduceOp.SUM)
        return x


def example(rank, world_size):
    torch.npu.set_device(rank)
    torch.distributed.init_process_group("hccl", rank=rank, world_size=world_size)
    x = torch.ones([2, 2], dtype=torch.int32).to("npu:" + str(rank))
    y = torch.ones([2, 2], dtype=torch.int32).to("npu:" + str(rank))
    config = CompilerConfig()
    npu_backend = torchair.get_npu_backend(compiler_config=config)
    model = torch.compile(
        AllReduceSingeGroup().to("npu:" + str(rank)), backend=npu_backend, dynamic=False
    )
    out = torch.ones([2, 2], dtype=torch.int32).npu() * 2 * world_size
    ret = model(x, y)
    assert out.equal(ret)
    torch.distributed.destroy_process_group()


def mp():
    world_size = 2
    torch.multiprocessing.spawn(example, args=(world_size,), nprocs=world_size, join=True)


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29506"
    mp()
