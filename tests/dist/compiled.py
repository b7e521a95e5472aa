"""Worker (run by tests/test_distributed.py under torchrun): collectives
inside torch.compile(backend="tpu") equal eager; a compiled DDP step equals
the eager one."""
import copy
import datetime

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtpu  # noqa: F401
from checks import finish, same

dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=120))
RANK, WORLD = dist.get_rank(), dist.get_world_size()


def f_dist(x):
    y = x * 2 + 1
    dist.all_reduce(y)
    return y.sin() * 3


def f_funcol(x):
    y = torch.relu(x) + 0.5
    a = funcol.all_reduce(y, "sum", dist.group.WORLD)
    g = funcol.all_gather_tensor(a * 2, 0, dist.group.WORLD)
    r = funcol.reduce_scatter_tensor(g, "avg", 0, dist.group.WORLD)
    return r.cos() + a.sum()


torch.manual_seed(RANK)
x = torch.randn(8, 4, device="tpu")
for name, f in (("dist.all_reduce", f_dist), ("functional collectives", f_funcol)):
    want = f(x.clone())
    got = torch.compile(f, backend="tpu")(x.clone())
    same(name, got, want)

# DDP step, compiled against eager
torch.manual_seed(0)
base = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
data = [(torch.randn(4, 8, device="tpu"), torch.randn(4, 2, device="tpu")) for _ in range(3)]
params = []
for compiled in (False, True):
    ddp = DDP(copy.deepcopy(base).to("tpu"))
    model = torch.compile(ddp, backend="tpu") if compiled else ddp
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for xb, yb in data:
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
        opt.zero_grad()
    params.append([p.detach().cpu() for p in ddp.parameters()])
for a, b in zip(*params):
    same("compiled DDP step", b, a)

# FSDP2 step, compiled against eager
from torch.distributed.fsdp import fully_shard  # noqa: E402

params = []
for compiled in (False, True):
    model = copy.deepcopy(base).to("tpu")
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    run = torch.compile(model, backend="tpu") if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for xb, yb in data:
        nn.functional.mse_loss(run(xb), yb).backward()
        opt.step()
        opt.zero_grad()
    params.append([p.full_tensor().detach().cpu() for p in model.parameters()])
for a, b in zip(*params):
    same("compiled FSDP2 step", b, a)

finish("compiled checks done")
