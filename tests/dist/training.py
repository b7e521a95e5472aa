"""Worker (run by tests/test_distributed.py under torchrun): DDP and FSDP2 on
tpu through "tpu_dist"; parameters after 3 steps must equal one process
training on the whole batch (float32). Exits 1 on any mismatch."""
import copy
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtpu  # noqa: F401
from checks import finish, same

dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=60))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
STEPS, BATCH = 3, 8 * WORLD


class Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
        self.unused = nn.Linear(4, 4) if unused else None

    def forward(self, x):
        return self.layers(x)


def batches():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(STEPS)]


def reference(model, accumulate=1):
    """One process, the whole batch, on the CPU."""
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches():
        for x1, y1 in zip(x.chunk(accumulate), y.chunk(accumulate)):
            (nn.functional.mse_loss(model(x1), y1) / accumulate).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach() for p in model.parameters()]


def shard(t):
    return t.chunk(WORLD)[RANK]


def run_ddp(name, accumulate=1, unused=False, hook=None, **kw):
    torch.manual_seed(0)
    base = Net(unused)
    want = reference(base, accumulate)
    ddp = DDP(copy.deepcopy(base).to("tpu"), find_unused_parameters=unused, **kw)
    if hook is not None:
        ddp.register_comm_hook(dist.group.WORLD, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for x, y in batches():
        xs, ys = shard(x).chunk(accumulate), shard(y).chunk(accumulate)
        for k in range(accumulate):
            ctx = ddp.no_sync() if k < accumulate - 1 else torch.enable_grad()
            with ctx:
                out = ddp(xs[k].to("tpu"))
                (nn.functional.mse_loss(out, ys[k].to("tpu")) / accumulate).backward()
        opt.step()
        opt.zero_grad()
    got = [p for n, p in ddp.module.named_parameters()]
    same(name, got, want)


run_ddp("DDP several buckets", bucket_cap_mb=0.001)
run_ddp("DDP no_sync", accumulate=2)
run_ddp("DDP find_unused_parameters", unused=True)
run_ddp("DDP comm hook", hook=default_hooks.allreduce_hook)


def run_fsdp(name, reshard, mp=None):
    torch.manual_seed(0)
    base = Net()
    want = reference(base)
    model = copy.deepcopy(base).to("tpu")
    kw = {"reshard_after_forward": reshard}
    if mp is not None:
        kw["mp_policy"] = mp
    for layer in model.layers:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, **kw)
    fully_shard(model, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches():
        out = model(shard(x).to("tpu"))
        nn.functional.mse_loss(out.float(), shard(y).to("tpu")).backward()
        opt.step()
        opt.zero_grad()
    got = [p.full_tensor() for p in model.parameters()]
    if mp is None:
        same(name, got, want)
    else:  # bf16 compute: bf16's tolerance against the float32 run
        same(name, got, want, rtol=1.6e-2, atol=1e-2)


run_fsdp("FSDP2 reshard_after_forward=True", True)
run_fsdp("FSDP2 reshard_after_forward=False", False)
run_fsdp("FSDP2 bf16 params, f32 reduce", True,
         MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))

dist.barrier()
finish("training checks done")
