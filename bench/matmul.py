"""Matrix product benchmark: float32 products in every operand layout, on tpu
with the hand-written kernel, on tpu with XLA's dots (TORCHTPU_KERNELS=attention)
and with PyTorch on the CPU, side by side in one run.

    python bench/matmul.py [--repeats 7] [--calls 10] [--shapes 1024x256x768,...]

The default shapes (M x K x N) are the training benchmark's: its linear
layers' forward (x @ w.t(): NT), input gradients (dy @ w: NN) and weight
gradients (dy.t() @ x: TN), and the language-model head's. Each system runs
in a process of its own (the kernel switch is read at import); rounds
interleave the systems. A call is one product to warm up, then --calls
products of the same operands (eager ops, one device sync at the end):
throughput with operands in cache, as GEMM benchmarks measure it; medians in
GFLOP/s. bench/train_step.py measures the products where they run in a model.
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

SYSTEMS = {"tpu kernel": ("tpu", "1"), "tpu XLA dot": ("tpu", "attention"), "torch cpu": ("cpu", None)}
LAYOUTS = ("NN", "NT", "TN")  # N: as stored; T: a transposed view of the stored operand
SHAPES = "1024x256x768,1024x256x1024,1024x1024x256,768x1024x256,256x1024x1024,256x1024x256,1024x256x8192," \
         "1024x8192x256,8192x1024x256"


def operands(shape, layout, device):
    import torch
    m, k, n = shape
    a = torch.randn(k, m, device=device).t() if layout[0] == "T" else torch.randn(m, k, device=device)
    b = torch.randn(n, k, device=device).t() if layout[1] == "T" else torch.randn(k, n, device=device)
    return a, b


def worker(a):
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import torch
    device = SYSTEMS[a.worker][0]
    if device == "tpu":
        import torchtpu  # noqa: F401
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    torch.manual_seed(0)
    cases = {}
    for s in a.shapes.split(","):
        shape = tuple(int(d) for d in s.split("x"))
        for layout in LAYOUTS:
            cases[f"{s} {layout}"] = operands(shape, layout, device)

    def run(name):
        x, y = cases[name]
        x @ y
        sync()
        t0 = time.perf_counter()
        for _ in range(a.calls):
            x @ y
        sync()
        return time.perf_counter() - t0

    for name in cases:
        run(name)  # compile, warm up
    gc.collect()
    gc.disable()  # a collection inside a timed call would cost the Python systems alike
    out.write(json.dumps(list(cases)) + "\n")
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        out.write(json.dumps(run(line.strip())) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--shapes", default=SHAPES, help="comma-separated MxKxN")
    p.add_argument("--settle", type=float, default=0.1,
                   help="seconds between measurements, for the last system's spinning threads to sleep")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    os.environ["TORCHTPU_CACHE_DIR"] = "off"
    if a.worker:
        return worker(a)
    procs, cases = {}, None
    for name, (_, kernels) in SYSTEMS.items():
        env = dict(os.environ, **({"TORCHTPU_KERNELS": kernels} if kernels else {}))
        procs[name] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", name,
                                        f"--calls={a.calls}", f"--shapes={a.shapes}"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = procs[name].stdout.readline()
        if not line:
            raise RuntimeError(f"the {name} worker failed to start (its error is above)")
        cases = json.loads(line)
    samples = {n: {c: [] for c in cases} for n in procs}
    for _ in range(a.repeats):
        for case in cases:
            for name, proc in procs.items():
                proc.stdin.write(case + "\n")
                proc.stdin.flush()
                samples[name][case].append(json.loads(proc.stdout.readline()))
                time.sleep(a.settle)
    for proc in procs.values():
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait()
    print(f"float32 products, {a.calls} per call; GFLOP/s of the median of {a.repeats} interleaved rounds")
    print("| M x K x N | layout | " + " | ".join(procs) + " | kernel / XLA dot | kernel / torch cpu |")
    print("|---|---|" + "---|" * (len(procs) + 2))
    total = {n: 0.0 for n in procs}
    for case in cases:
        shape, layout = case.split()
        m, k, n = (int(d) for d in shape.split("x"))
        t = {name: statistics.median(samples[name][case]) for name in procs}
        for name in procs:
            total[name] += t[name]
        rate = {name: 2 * m * k * n * a.calls / t[name] / 1e9 for name in procs}
        print(f"| {shape} | {layout} | " + " | ".join(f"{rate[n]:.0f}" for n in procs) +
              f" | {t['tpu XLA dot'] / t['tpu kernel']:.2f}x | {t['torch cpu'] / t['tpu kernel']:.2f}x |")
    print("total time (s): " + ", ".join(f"{n} {total[n]:.3f}" for n in procs))


if __name__ == "__main__":
    main()
