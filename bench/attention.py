"""Attention benchmark: F.scaled_dot_product_attention forward, and forward +
backward, on tpu with the hand-written kernel, on tpu with XLA's composite
(TORCHTPU_KERNELS=matmul), with PyTorch on the CPU (its flash-attention kernel)
and under Inductor, side by side in one run.

    python bench/attention.py [--repeats 7] [--batch 8 --heads 8 --seq 128 --dim 32] [--no-causal]

Each system runs in a process of its own (the kernel switch is read at
import); rounds interleave the systems. A call is a chain of --calls
attention layers (each query the previous output, keys and values shared),
compiled as one graph under torch.compile(backend="tpu") for the tpu
columns; medians in ms per chain, with ratios against the kernel.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SYSTEMS = {"tpu kernel": ("tpu", "1"), "tpu composite": ("tpu", "matmul"), "torch cpu": ("cpu", None),
           "torch inductor (cpu)": ("inductor", None)}


def worker(a):
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import torch
    import torch.nn.functional as F
    kind = SYSTEMS[a.worker][0]
    device = "tpu" if kind == "tpu" else "cpu"
    if device == "tpu":
        import torchtpu  # noqa: F401
    torch.manual_seed(0)
    q, k, v = (torch.randn(a.batch, a.heads, a.seq, a.dim, device=device, requires_grad=True) for _ in range(3))

    def chain(q, k, v):
        for _ in range(a.calls):
            q = F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
        return q.sum()

    f = torch.compile(chain, backend="tpu") if kind == "tpu" else torch.compile(chain) if kind == "inductor" \
        else chain
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)

    def forward():
        with torch.no_grad():
            f(q, k, v)
        sync()

    def step():
        f(q, k, v).backward()
        sync()

    for fn in (forward, step, forward, step):
        fn()
    out.write("ready\n")
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        fn = forward if line.strip() == "forward" else step
        t0 = time.perf_counter()
        fn()
        out.write(json.dumps((time.perf_counter() - t0) * 1e3) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    os.environ["TORCHTPU_CACHE_DIR"] = "off"
    if a.worker:
        return worker(a)
    argv = [f"--{k}={getattr(a, k)}" for k in ("batch", "heads", "seq", "dim", "calls")]
    argv += [] if a.causal else ["--no-causal"]
    procs = {}
    for name, (_, kernels) in SYSTEMS.items():
        env = dict(os.environ, **({"TORCHTPU_KERNELS": kernels} if kernels else {}))
        procs[name] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", name] + argv,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        if procs[name].stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {name} worker failed to start (its error is above)")
    samples = {n: {"forward": [], "step": []} for n in procs}

    def ask(name, what):
        procs[name].stdin.write(what + "\n")
        procs[name].stdin.flush()
        return json.loads(procs[name].stdout.readline())

    for _ in range(a.repeats):
        for name in procs:
            for what in ("forward", "step"):
                samples[name][what].append(ask(name, what))
    for name in procs:
        procs[name].stdin.write("quit\n")
        procs[name].stdin.flush()
        procs[name].wait()
    med = {n: {w: statistics.median(v) for w, v in s.items()} for n, s in samples.items()}
    base = med["tpu kernel"]
    print(f"{a.calls} x SDPA [{a.batch}, {a.heads}, {a.seq}, {a.dim}] float32, causal={a.causal}; "
          f"medians of {a.repeats} interleaved rounds")
    print("| system | forward (ms) | forward + backward (ms) | fwd / kernel | fwd+bwd / kernel |")
    print("|---|---|---|---|---|")
    for name, r in med.items():
        print(f"| {name} | {r['forward']:.1f} | {r['step']:.1f} | {r['forward'] / base['forward']:.2f}x | "
              f"{r['step'] / base['step']:.2f}x |")


if __name__ == "__main__":
    main()
