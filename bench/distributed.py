"""all_reduce latency and bus bandwidth, tpu_dist on tpu tensors against gloo
on CPU tensors in the same run, and DDP / FSDP2 step time against one process.

    torchrun --nproc-per-node=2 bench/distributed.py [--repeats 20]

Sizes 4 KiB, 256 KiB, 4 MiB, 64 MiB (float32). Each size runs the three
groups interleaved (gloo on CPU tensors, tpu_dist, tpu_dist without its
agreement check: TORCHTPU_DIST_CHECK=0), median of the repeats. Bus bandwidth
is NCCL's: 2 (n - 1) / n * bytes / time. The step table times one training step
(forward, backward, SGD) of a 4-layer MLP on each rank's batch: one process
alone, DDP on tpu_dist, FSDP2 on tpu_dist. Rank 0 prints the tables."""
import argparse
import copy
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtpu  # noqa: F401

p = argparse.ArgumentParser()
p.add_argument("--repeats", type=int, default=20)
p.add_argument("--steps", type=int, default=10)
args = p.parse_args()

dist.init_process_group("tpu_dist")
RANK, N = dist.get_rank(), dist.get_world_size()
GLOO = dist.new_group(backend="gloo")
os.environ["TORCHTPU_DIST_CHECK"] = "0"
UNCHECKED = dist.new_group(backend="tpu_dist")
del os.environ["TORCHTPU_DIST_CHECK"]


def timed(fn, sync):
    dist.barrier(GLOO)
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def out(line=""):
    if RANK == 0:
        print(line, flush=True)


out(f"all_reduce, {N} processes, float32, median of {args.repeats} (device: CPU plugin)")
out("| size | gloo (CPU) µs | tpu_dist µs | unchecked µs | gloo GB/s | tpu_dist GB/s | unchecked GB/s | tpu_dist / gloo | unchecked / gloo |")
out("|---|---|---|---|---|---|---|---|---|")
for nbytes in (4 << 10, 256 << 10, 4 << 20, 64 << 20):
    n = nbytes // 4
    cpu = torch.randn(n)
    dev = cpu.to("tpu")
    reps = max(3, args.repeats if nbytes < (16 << 20) else args.repeats // 2)
    runs = {"gloo": [], "tpu": [], "unchecked": []}
    for k in range(reps + 2):
        for name, t, g, sync in (("gloo", cpu, GLOO, lambda: None),
                                 ("tpu", dev, None, torch.tpu.synchronize),
                                 ("unchecked", dev, UNCHECKED, torch.tpu.synchronize)):
            dt = timed(lambda: dist.all_reduce(t, group=g), sync)
            if k >= 2:
                runs[name].append(dt)
    med = {k: statistics.median(v) for k, v in runs.items()}
    bw = {k: 2 * (N - 1) / N * nbytes / v / 1e9 for k, v in med.items()}
    size = f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
    out(f"| {size} | {med['gloo'] * 1e6:.0f} | {med['tpu'] * 1e6:.0f} | {med['unchecked'] * 1e6:.0f} | "
        f"{bw['gloo']:.2f} | {bw['tpu']:.2f} | {bw['unchecked']:.2f} | "
        f"{med['gloo'] / med['tpu']:.2f}x | {med['gloo'] / med['unchecked']:.2f}x |")


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(512, 512), nn.ReLU())])


def step_time(model, params):
    opt = torch.optim.SGD(params, lr=0.01)
    x, y = torch.randn(64, 512, device="tpu"), torch.randn(64, 512, device="tpu")

    def step():
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    times = [timed(step, torch.tpu.synchronize) for _ in range(args.steps + 2)][2:]
    return statistics.median(times)


base = mlp()
single = copy.deepcopy(base).to("tpu")
ddp = DDP(copy.deepcopy(base).to("tpu"))
fsdp = copy.deepcopy(base).to("tpu")
for m in fsdp:
    if isinstance(m, nn.Linear):
        fully_shard(m)
fully_shard(fsdp)
t_single = step_time(single, single.parameters())
t_ddp = step_time(ddp, ddp.parameters())
t_fsdp = step_time(fsdp, fsdp.parameters())
out()
out(f"training step, 4 x Linear(512, 512), batch 64 per rank, {N} processes, median of {args.steps}")
out("| setup | ms / step | vs one process |")
out("|---|---|---|")
for name, t in (("one process", t_single), ("DDP (tpu_dist)", t_ddp), ("FSDP2 (tpu_dist)", t_fsdp)):
    out(f"| {name} | {t * 1e3:.1f} | {t / t_single:.2f}x |")
dist.destroy_process_group()
