"""Grouped product benchmark (torch._grouped_mm, the MoE layers' product): on
tpu with the matmul kernel's grouped product, on tpu with the composite
(TORCHTPU_KERNELS=attention: every group's product, G times the work), and
with PyTorch on the CPU, side by side in one run.

    python bench/grouped_mm.py [--repeats 9] [--shapes 2048x512x1024x8,...]

A shape is tokens x in-features x out-features x experts; the tokens are
split evenly over the experts. Each system runs in a process of its own (the
kernel switch is read at import), one after another. A call is
the forward product (2d x 3d), its input gradient (the transposed weights)
and its weight gradient (2d x 2d over the tokens), ending with a device
sync; medians in ms.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SYSTEMS = {"tpu kernel": ("tpu", "1"), "tpu composite": ("tpu", "attention"), "torch cpu": ("cpu", None)}
SHAPES = "512x256x512x8,2048x512x1024x8,2048x512x1024x32"


def worker(device, shapes, repeats):
    import torch
    import torchtpu  # noqa: F401
    calls = []
    for tokens, d_in, d_out, experts in shapes:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(tokens, d_in, generator=g).to(device)
        w = torch.randn(experts, d_in, d_out, generator=g).to(device)
        dy = torch.randn(tokens, d_out, generator=g).to(device)
        offs = torch.cumsum(torch.full((experts,), tokens // experts), 0).to(torch.int32).to(device)

        def call(x=x, w=w, dy=dy, offs=offs):
            y = torch._grouped_mm(x, w, offs=offs)
            dx = torch._grouped_mm(dy, w.transpose(1, 2), offs=offs)
            dw = torch._grouped_mm(x.t(), dy, offs=offs)
            for t in (y, dx, dw):
                t.cpu()
        call()
        calls.append(call)
    times = [[] for _ in calls]
    for _ in range(repeats):
        for i, call in enumerate(calls):
            t = time.perf_counter()
            call()
            times[i].append((time.perf_counter() - t) * 1e3)
    return [statistics.median(t) for t in times]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    if a.worker:
        print(json.dumps(worker(a.worker, shapes, a.repeats)))
        return
    results = {}
    for name, (device, kernels) in SYSTEMS.items():
        env = dict(os.environ)
        if kernels is not None:
            env["TORCHTPU_KERNELS"] = kernels
        out = subprocess.run([sys.executable, __file__, "--worker", device, "--shapes", a.shapes,
                              "--repeats", str(a.repeats)], env=env, check=True, capture_output=True, text=True)
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"forward + input gradient + weight gradient, medians of {a.repeats} (ms)")
    print("| tokens x in x out x experts | " + " | ".join(SYSTEMS) + " |")
    print("|---|" + "---|" * len(SYSTEMS))
    for i, s in enumerate(shapes):
        print(f"| {'x'.join(map(str, s))} | " + " | ".join(f"{results[n][i]:.1f}" for n in SYSTEMS) + " |")


if __name__ == "__main__":
    main()
