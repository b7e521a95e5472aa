"""Eager host overhead: torchtpu vs PyTorch CPU vs JAX (un-jitted jnp), side
by side in one process, medians of repeats.

    python bench/eager_overhead.py [--repeats 7] [--ops 1000]

Measures, per framework:
  add8     a cached elementwise op on 8 floats: a 1,000-op dependent chain
           (z = z + y), one sync at the end -> microseconds per op
  mm256    256x256 float32 matmuls, 100 of them, one sync -> microseconds per op
  compile  (torchtpu) cold compile of a new op signature -> milliseconds
Needs jax for the JAX column (`pip install jax`); without it the column is
left out.
"""
import argparse
import os
import sys

# Compile times here are cold compiles: keep the on-disk cache out of the
# measurement unless asked (--disk-cache).
if "--disk-cache" not in sys.argv:
    os.environ["TORCHTPU_CACHE_DIR"] = "off"
import statistics
import time

import torch

import torchtpu


def timed(fn, repeats):
    fn()  # warm-up: compiles, caches
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()
    elif device == "cuda":
        torch.cuda.synchronize()


def torch_chain(device, n):
    y = torch.randn(8, device=device)
    z0 = torch.randn(8, device=device)

    def run():
        z = z0
        for _ in range(n):
            z = z + y
        if device == "cpu":
            z.sum().item()
        sync(device)
    return run


def torch_mm(device, n):
    a = torch.randn(256, 256, device=device)
    b = torch.randn(256, 256, device=device)

    def run():
        for _ in range(n):
            c = a @ b
        sync(device)
        return c
    return run


def jax_cases(n_add, n_mm):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_platforms", "cpu")
    y = jnp.ones(8, jnp.float32)
    z0 = jnp.zeros(8, jnp.float32)
    a = jnp.ones((256, 256), jnp.float32)

    def chain():
        z = z0
        for _ in range(n_add):
            z = z + y
        z.block_until_ready()

    def mm():
        for _ in range(n_mm):
            c = a @ a
        c.block_until_ready()
    return chain, mm


def compile_ms(samples=8):
    """Cold compile + first run of a new signature, minus a cached run."""
    times = []
    for i in range(samples):
        x = torch.randn(3 + i, 5, device="tpu")  # a shape never seen before
        t0 = time.perf_counter()
        (x * 2 + 1).sin_()
        torch.tpu.synchronize()
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        (x * 2 + 1).sin_()
        torch.tpu.synchronize()
        warm = time.perf_counter() - t0
        times.append((cold - warm) / 3 * 1e3)  # three ops per line
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--ops", type=int, default=1000)
    p.add_argument("--mm-ops", type=int, default=100)
    p.add_argument("--disk-cache", action="store_true", help="use the on-disk compile cache")
    args = p.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    rows = {}
    rows["add8"] = {
        "torchtpu": timed(torch_chain("tpu", args.ops), args.repeats) / args.ops * 1e6,
        "torch_cpu": timed(torch_chain("cpu", args.ops), args.repeats) / args.ops * 1e6,
    }
    rows["mm256"] = {
        "torchtpu": timed(torch_mm("tpu", args.mm_ops), args.repeats) / args.mm_ops * 1e6,
        "torch_cpu": timed(torch_mm("cpu", args.mm_ops), args.repeats) / args.mm_ops * 1e6,
    }
    jax_fns = jax_cases(args.ops, args.mm_ops)
    if jax_fns:
        rows["add8"]["jax"] = timed(jax_fns[0], args.repeats) / args.ops * 1e6
        rows["mm256"]["jax"] = timed(jax_fns[1], args.repeats) / args.mm_ops * 1e6
    cms = compile_ms()
    cols = ["torchtpu", "torch_cpu"] + (["jax"] if jax_fns else [])
    print(f"platform: {torchtpu._C._info()['platform']}, torch {torch.__version__}, "
          f"{args.repeats} repeats (medians)")
    print("| case | " + " | ".join(f"{c} (us/op)" for c in cols) + " | torchtpu / torch_cpu |"
          + (" torchtpu / jax |" if jax_fns else ""))
    print("|---" * (len(cols) + 2 + bool(jax_fns)) + "|")
    for name, r in rows.items():
        line = f"| {name} | " + " | ".join(f"{r[c]:.2f}" for c in cols)
        line += f" | {r['torchtpu'] / r['torch_cpu']:.2f}x |"
        if jax_fns:
            line += f" {r['torchtpu'] / r['jax']:.2f}x |"
        print(line)
    print(f"cold compile per new op signature (torchtpu): {cms:.1f} ms")
    s = torchtpu.stats()
    print(f"stats: {s['cache_hits']} hits, {s['cache_misses']} misses, fallbacks {s['fallbacks']}")


if __name__ == "__main__":
    main()
