"""Fused eager against strict eager where dispatch dominates, side by side in
one process:

  strict      TORCHTPU_EAGER=strict: each op its own cached program
  fused       ops recorded, runs of them one program (torchtpu.eager_mode)
  blocking    each op runs and waits for its result
  compiled    torch.compile(step, backend="tpu")
  cpu         PyTorch eager on the CPU

Workloads: a 1,000-op chain on 8 floats, a small MLP training step (widths
64-256, SGD), an LSTM cell over 16 time steps, a foreach AdamW step over 100
small tensors, and the GPT training step of bench/train_step.py (2 layers by
default: --gpt-layers). Every timing ends with a device sync (a cut in fused
mode). Each system is warmed up (compiles) first; then --repeats rounds run
the tpu systems in turn, then PyTorch's CPU eager alone (its OpenMP threads
spin after each op and slowed the next tpu system), and medians are
reported with the speed-up of fused over strict, and "fused rec": the part
of fused's step before its sync, where PyTorch runs the step's Python and
autograd and torchtpu records (fused's step cannot be shorter; 2x strict
needs it within half of strict's). Also the host cost per op: a strict cache
hit against recording one op in fused mode (the chain with no cut inside),
in microseconds.

    python bench/fused_eager.py [--repeats 9] [--skip compiled,cpu] [--gpt-layers 2]
"""
import argparse
import copy
import os
import statistics
import sys
import time

import torch

import torchtpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


_sync_started = [0.0]


def sync(device):
    """The step's last act: waits for the device. Notes when it began: the
    host's part of the step (in fused mode, recording) ends there."""
    _sync_started[0] = time.perf_counter()
    if device == "tpu":
        torch.tpu.synchronize()


# --- workloads: each builds (device) -> a step function -----------------------------

def chain(device, n=1000):
    x0 = torch.randn(8).to(device)
    one = torch.full((8,), 1.0001).to(device)

    def step():
        x = x0
        for _ in range(n // 2):
            x = x * one
            x = x - 0.0001
        sync(device)
        return x
    return step


def mlp(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 64).to(device), torch.randint(0, 10, (32,)).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sync(device)
        return loss
    return step


def lstm(device, steps=16):
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(32, 64).to(device)
    xs = torch.randn(steps, 8, 32).to(device)
    h0, c0 = torch.zeros(8, 64).to(device), torch.zeros(8, 64).to(device)

    def step():
        with torch.no_grad():
            h, c = h0, c0
            for t in range(steps):
                h, c = cell(xs[t], (h, c))
        sync(device)
        return h
    return step


def adamw(device, n=100):
    torch.manual_seed(0)
    params = [torch.randn(16, 16).to(device).requires_grad_() for _ in range(n)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)

    def step():
        opt.step()
        sync(device)
    return step


def gpt(device, layers):
    from train_step import build_gpt
    a = argparse.Namespace(layers=layers, d=256, heads=8, vocab=8192, seq=128, batch=8)
    model, data = build_gpt(a)
    m = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    x, y = (t.to(device) for t in data)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = m(x, y)
        loss.backward()
        opt.step()
        sync(device)
        return loss
    return step


# --- systems ----------------------------------------------------------------------

def make(system, workload, args):
    build = {"chain": chain, "mlp": mlp, "lstm": lstm, "adamw": adamw,
             "gpt": lambda d: gpt(d, args.gpt_layers)}[workload]
    device = "cpu" if system == "cpu" else "tpu"
    step = build(device)
    if system == "compiled":
        step = torch.compile(step, backend="tpu")
    mode = {"strict": "strict", "fused": "fused", "blocking": "blocking"}.get(system, "strict")

    def run():
        """(ms per step, ms of it before the step's sync)."""
        with torchtpu.eager_mode(mode):
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            return (t1 - t0) * 1e3, (_sync_started[0] - t0) * 1e3
    return run


def host_cost_per_op(n=2000, repeats=7):
    """Microseconds of host time per op: strict (each op a cache hit, launched)
    against fused (recorded only: no cut inside the timed loop)."""
    x0 = torch.randn(8, device="tpu")
    one = torch.full((8,), 1.0001, device="tpu")
    torchtpu._C._set_fused_max_ops(4 * n)
    torchtpu._C._set_fused_loop_detection(False)
    out = {}
    try:
        for mode in ("strict", "fused"):
            times = []
            for _ in range(repeats + 1):
                with torchtpu.eager_mode(mode):
                    x = x0
                    t0 = time.perf_counter()
                    for _ in range(n):
                        x = x * one
                    dt = time.perf_counter() - t0
                torch.tpu.synchronize()
                times.append(dt / n * 1e6)
            out[mode] = statistics.median(times[1:])
    finally:
        torchtpu._C._set_fused_max_ops(0)
        torchtpu._C._set_fused_loop_detection(True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--skip", default="", help="systems to skip (comma-separated)")
    p.add_argument("--workloads", default="chain,mlp,lstm,adamw,gpt")
    p.add_argument("--gpt-layers", type=int, default=2)
    args = p.parse_args()
    systems = [s for s in ("strict", "fused", "blocking", "compiled", "cpu") if s not in args.skip.split(",")]
    print(f"torch {torch.__version__}, platform {torchtpu._C._info()['platform']}, {os.cpu_count()} CPUs")
    cost = host_cost_per_op()
    print(f"host time per op (8 floats, x * y): strict cache hit {cost['strict']:.2f} us, "
          f"fused record {cost['fused']:.2f} us")
    print()
    header = f"{'workload':10s}" + "".join(f"{s:>12s}" for s in systems) + f"{'fused/strict':>14s}"
    if "fused" in systems:
        header += f"{'quartiles':>12s}{'fused rec':>11s}"
    print(header + "   (median ms per step; per-round fused/strict)")
    for w in args.workloads.split(","):
        runs = {}
        for s in systems:
            runs[s] = make(s, w, args)
            if s != "cpu":
                runs[s]()  # compiles
                runs[s]()
        if "cpu" in runs:
            runs["cpu"]()
            runs["cpu"]()
        # The tpu systems take turns; PyTorch's CPU eager runs after them, not
        # between: its OpenMP threads spin-wait after each parallel region and
        # took a core from the next tpu system's XLA threads (strict's MLP step
        # measured 6.5 ms beside it, 1.7 ms without).
        times = {s: [] for s in systems}
        host = {s: [] for s in systems}
        for _ in range(args.repeats):
            for s in systems:
                if s != "cpu":
                    total, before_sync = runs[s]()
                    times[s].append(total)
                    host[s].append(before_sync)
        if "cpu" in runs:
            times["cpu"] = [runs["cpu"]()[0] for _ in range(args.repeats)]
        med = {s: statistics.median(times[s]) for s in systems}
        ratio, spread = float("nan"), ""
        if "strict" in med and "fused" in med:
            ratio = med["strict"] / med["fused"]
            # The ratio of each round (the two ran one after the other): how
            # far this VM's noise moves it.
            rounds = sorted(a / b for a, b in zip(times["strict"], times["fused"]))
            spread = f"{rounds[len(rounds) // 4]:.2f}-{rounds[(3 * len(rounds)) // 4]:.2f}"
        # Fused mode's recording (the host's part, before the sync): 2x
        # strict needs the whole step within half of strict's.
        rec = f"{statistics.median(host['fused']):11.2f}" if "fused" in host else ""
        print(f"{w:10s}" + "".join(f"{med[s]:12.2f}" for s in systems) + f"{ratio:13.2f}x" + f"{spread:>12s}" + rec,
              flush=True)
    s = torchtpu.stats()
    print(f"\nfused: {s['fused_ops']} ops in {s['fused_programs']} programs (at most {s['fused_max_ops']}), "
          f"trace cache {s['trace_hits']} hits / {s['trace_misses']} misses, cuts {s['cuts']}")


if __name__ == "__main__":
    main()
