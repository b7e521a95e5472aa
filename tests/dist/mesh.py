"""Worker (run by tests/test_distributed.py, one process per rank, started by
a launcher that sets RANK and LOCAL_RANK but not LOCAL_WORLD_SIZE): a
default process group used for CPU tensors leaves the tpu runtime unstarted;
then init_device_mesh("tpu") takes tpu:LOCAL_RANK and a tpu all_reduce runs."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import torchtpu

dist.init_process_group()
cpu = torch.ones(2) * (dist.get_rank() + 1)
dist.all_reduce(cpu)
idle = not torchtpu._C._started()
mesh = init_device_mesh("tpu", (dist.get_world_size(),))
x = torch.ones(2, device="tpu") * (dist.get_rank() + 1)
dist.all_reduce(x, group=mesh.get_group())
print(f"rank {dist.get_rank()}: idle {idle} device {torch.tpu.current_device()} "
      f"cpu {cpu.tolist()} tpu {x.cpu().tolist()}", flush=True)
dist.destroy_process_group()
