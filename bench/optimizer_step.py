"""Optimizer-step benchmark: one AdamW step over the parameters of the
training benchmark's GPT model (bench/train_step.py, 10.5M parameters in 101
tensors), gradients given, side by side in one run:

  tpu foreach       the default implementation (torch._foreach_* ops)
  tpu per-tensor    foreach=False
  tpu fused         fused=True (aten::_fused_adamw_)
  tpu compiled      torch.compile(opt.step, backend="tpu") of the foreach step
  cpu foreach / per-tensor / fused   PyTorch on the CPU

    python bench/optimizer_step.py [--repeats 15] [--optimizer AdamW|Adam|SGD|Adagrad]

Each system is built and warmed up (its first step, compiles included, is
reported apart), then --repeats rounds ask every system in turn for one
step, so drift of the machine affects all alike; medians, a device sync per
tpu step. The on-disk compile cache is off (cold compiles) unless
--disk-cache. Also reported: the programs one tpu step launches.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--optimizer", default="AdamW", choices=["AdamW", "Adam", "SGD", "Adagrad"])
    p.add_argument("--disk-cache", action="store_true")
    a = p.parse_args()
    if not a.disk_cache:
        os.environ["TORCHTPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchtpu-bench-")
    import torch
    import torchtpu
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_step import build_gpt

    model = build_gpt(argparse.Namespace(vocab=8192, d=256, heads=8, layers=8, seq=128, batch=1))[0]
    cls = getattr(torch.optim, a.optimizer)
    kw = dict(lr=1e-3, momentum=0.9) if a.optimizer == "SGD" else dict(lr=1e-3, weight_decay=0.1)

    def system(device, impl):
        torch.manual_seed(0)
        params = [p.detach().clone().to(device).requires_grad_() for p in model.parameters()]
        for q in params:
            q.grad = torch.randn_like(q) * 1e-3
        opt = cls(params, foreach=impl in ("foreach", "compiled"), fused=impl == "fused" or None, **kw)
        step = torch.compile(opt.step, backend="tpu") if impl == "compiled" else opt.step

        def run():
            step()
            if device == "tpu":
                torch.tpu.synchronize()
        return run

    names = [("tpu", "foreach"), ("tpu", "per-tensor"), ("tpu", "fused"), ("tpu", "compiled"),
             ("cpu", "foreach"), ("cpu", "per-tensor"), ("cpu", "fused")]
    runs, first, programs = {}, {}, {}
    for device, impl in names:
        run = system(device, impl)
        t0 = time.perf_counter()
        run()
        first[device, impl] = time.perf_counter() - t0
        run()
        before = torchtpu.stats()["ops"]
        run()
        programs[device, impl] = torchtpu.stats()["ops"] - before
        runs[device, impl] = run
    times = {n: [] for n in names}
    for _ in range(a.repeats):
        for n in names:
            t0 = time.perf_counter()
            runs[n]()
            times[n].append(time.perf_counter() - t0)
    base = statistics.median(times["cpu", "foreach"])
    print(f"{a.optimizer} step over {sum(q.numel() for q in model.parameters()) / 1e6:.1f}M parameters in "
          f"{len(list(model.parameters()))} tensors; medians of {a.repeats}")
    print("| system | step (ms) | vs cpu foreach | first step (ms) | tpu programs per step |")
    print("|---|---|---|---|---|")
    for n in names:
        m = statistics.median(times[n])
        progs = programs[n] if n[0] == "tpu" else "-"
        print(f"| {n[0]} {n[1]} | {m * 1e3:.1f} | {m / base:.2f}x | {first[n] * 1e3:.0f} | {progs} |")


if __name__ == "__main__":
    main()
