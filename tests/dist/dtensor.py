"""Worker (run by tests/test_distributed.py under torchrun, 4 processes):
DTensor on tpu through tpu_dist on a 2x2 mesh: placements, redistribute, and a
tensor-parallel MLP (parallelize_module, column- then row-wise) whose
parameters after 3 steps equal one process's."""
import copy

import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import torchtpu  # noqa: F401
from checks import finish, same

mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
import torch.distributed as dist  # noqa: E402

RANK = dist.get_rank()


assert isinstance(dist.group.WORLD._get_backend(torch.device("tpu")), torchtpu._C._ProcessGroupTpu)
torch.manual_seed(0)
full = torch.randn(8, 6)
for placements in ([Shard(0), Shard(1)], [Replicate(), Shard(0)], [Shard(1), Replicate()]):
    d = distribute_tensor(full.to("tpu"), mesh, placements)
    same(f"full_tensor {placements}", d.full_tensor(), full)
    for target in ([Replicate(), Replicate()], [Shard(1), Shard(0)], [Shard(0), Replicate()]):
        same(f"redistribute {placements}->{target}", d.redistribute(mesh, target).full_tensor(), full)

# Partial: each rank holds a part of a sum
part = torch.full((4, 4), float(RANK + 1), device="tpu")
from torch.distributed.tensor import DTensor  # noqa: E402
p = DTensor.from_local(part, mesh, [Partial(), Partial()])
same("Partial -> Replicate", p.redistribute(mesh, [Replicate(), Replicate()]).to_local(),
     torch.full((4, 4), float(sum(range(1, 5)))))
same("Partial -> Shard", p.redistribute(mesh, [Shard(0), Shard(1)]).full_tensor(),
     torch.full((4, 4), 10.0))

# Tensor parallel MLP over the tp dim, every dp rank the same batch
torch.manual_seed(0)
base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
data = [(torch.randn(4, 8), torch.randn(4, 8)) for _ in range(3)]
ref = copy.deepcopy(base)
opt = torch.optim.SGD(ref.parameters(), lr=0.1)
for x, y in data:
    nn.functional.mse_loss(ref(x), y).backward()
    opt.step()
    opt.zero_grad()
tp = parallelize_module(copy.deepcopy(base).to("tpu"), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.SGD(tp.parameters(), lr=0.1)
for x, y in data:
    nn.functional.mse_loss(tp(x.to("tpu")), y.to("tpu")).backward()
    opt.step()
    opt.zero_grad()
for (n, a), b in zip(tp.named_parameters(), ref.parameters()):
    same(f"tensor parallel {n}", a.full_tensor(), b)

finish("dtensor checks done")
