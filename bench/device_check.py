"""The device check's measurements (scripts/device_check.sh runs them), each
torchtpu beside torch on a reference device in the same process or run:
torch's CUDA when the platform is cuda, torch's CPU otherwise.

    python bench/device_check.py matmul|gpt|eager|trace|summary --out DIR [--quick]

  matmul   bf16 and float32 N^3 products (N=8192, --quick 512): TFLOP/s
           (medians of timed rounds) and the largest error against the
           reference's product of the same inputs
  gpt      bench/train_step.py's GPT: torchtpu compiled against torch.compile
           (Inductor) and torchtpu eager against torch eager, on the
           reference device (--quick: a small GPT, Inductor left out)
  eager    host time per op (bench/eager_overhead.py's cases)
  trace    a torch.profiler trace (CPU + PrivateUse1) of training steps,
           written to DIR/trace.json.gz; counts its device events
  summary  DIR/summary.md from DIR/results.json

Each measurement adds its figures to DIR/results.json under its own name.
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def platform():
    import torchtpu
    return torchtpu._C._info()["platform"]


def ref_device():
    import torch
    return "cuda" if platform() == "cuda" and torch.cuda.is_available() else "cpu"


def sync(device):
    import torch
    if device == "tpu":
        torch.tpu.synchronize()
    elif device == "cuda":
        torch.cuda.synchronize()


def record(out, name, value):
    path = os.path.join(out, "results.json")
    results = {}
    if os.path.exists(path):
        with open(path) as f:
            results = json.load(f)
    results[name] = value
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def matmul(a):
    import torch
    import torchtpu  # noqa: F401
    n = 512 if a.quick else 8192
    ref = ref_device()
    rounds, per_round = (3, 2) if a.quick else (5, 10)
    out = {"n": n, "ref_device": ref, "torch_allow_tf32": torch.backends.cuda.matmul.allow_tf32}
    for dtype in (torch.bfloat16, torch.float32):
        torch.manual_seed(0)
        x, y = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        row = {}
        products = {}
        for device in ("tpu", ref):
            p, q = x.to(device), y.to(device)
            products[device] = (p @ q).float().cpu()  # warm-up: compiles, autotunes
            samples = []
            for _ in range(rounds):
                sync(device)
                t0 = time.perf_counter()
                for _ in range(per_round):
                    p @ q
                sync(device)
                samples.append(time.perf_counter() - t0)
            row["tpu" if device == "tpu" else "ref"] = 2 * n ** 3 * per_round / statistics.median(samples) / 1e12
        row["ratio"] = row["tpu"] / row["ref"]
        diff = (products["tpu"] - products[ref]).abs().max().item()
        row["max_abs_diff"] = diff
        row["max_abs_ref"] = products[ref].abs().max().item()
        out[str(dtype).replace("torch.", "")] = row
        print(f"{n}^3 {dtype}: torchtpu {row['tpu']:.3f} TFLOP/s, torch {ref} {row['ref']:.3f} TFLOP/s "
              f"({row['ratio']:.2f}x); largest difference {diff:.3g} (largest value {row['max_abs_ref']:.3g})")
    record(a.out, "matmul", out)


def gpt(a):
    ref = ref_device()
    path = os.path.join(a.out, "gpt.json")
    cmd = [sys.executable, os.path.join(HERE, "train_step.py"), "--skip", "jax,jax_plugin", "--ref-device", ref,
           "--json", path]
    if a.quick:
        cmd += ["--layers", "1", "--d", "32", "--heads", "2", "--vocab", "128", "--seq", "16", "--batch", "2",
                "--repeats", "2", "--skip", "jax,jax_plugin,inductor"]
    subprocess.run(cmd, check=True)
    with open(path) as f:
        result = json.load(f)
    os.remove(path)
    systems = result["systems"]
    ratios = {"compiled step / torchtpu eager step": systems["torchtpu compiled"]["step_ms"]
              / systems["torchtpu eager"]["step_ms"],
              f"torchtpu eager step / torch {ref} eager step": systems["torchtpu eager"]["step_ms"]
              / systems[f"torch {ref} eager"]["step_ms"]}
    if f"torch inductor ({ref})" in systems:
        ratios[f"compiled step / inductor ({ref}) step"] = (systems["torchtpu compiled"]["step_ms"]
                                                              / systems[f"torch inductor ({ref})"]["step_ms"])
    result["ratios"] = ratios
    result["ref_device"] = ref
    record(a.out, "gpt", result)


def eager(a):
    sys.path.insert(0, HERE)
    import eager_overhead as eo
    import torch
    ref = ref_device()
    repeats, ops, mm_ops = (3, 200, 20) if a.quick else (7, 1000, 100)
    out = {"ref_device": ref, "repeats": repeats}
    for name, case, n in (("add8", eo.torch_chain, ops), ("mm256", eo.torch_mm, mm_ops)):
        row = {"tpu_us": eo.timed(case("tpu", n), repeats) / n * 1e6,
               "ref_us": eo.timed(case(ref, n), repeats) / n * 1e6}
        row["ratio"] = row["tpu_us"] / row["ref_us"]
        out[name] = row
        print(f"{name}: torchtpu {row['tpu_us']:.2f} us/op, torch {ref} {row['ref_us']:.2f} us/op "
              f"({row['ratio']:.2f}x)")
    out["compile_ms"] = eo.compile_ms(3 if a.quick else 8)
    print(f"cold compile of a new op signature: {out['compile_ms']:.1f} ms; torch {torch.__version__}")
    record(a.out, "eager", out)


def trace(a):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    import torchtpu
    torch.manual_seed(0)
    d = 64 if a.quick else 1024
    model = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)).to("tpu")
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(32, d, device="tpu")

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    step()  # compiles outside the trace
    torch.tpu.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for i in range(3):
            with record_function(f"step {i}"):
                step()
        torch.tpu.synchronize()
    raw = os.path.join(a.out, "trace.json")
    prof.export_chrome_trace(raw)
    with open(raw) as f:
        data = json.load(f)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb") as g:
        g.write(f.read())
    os.remove(raw)
    events = data["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    result = {"events": len(events), "device_events": len(kernels),
              "device_us": sum(e.get("dur", 0) for e in kernels),
              "profiler_extension": data.get("tpu_pjrt_profiler_extension", "not in the trace's metadata"),
              "device_timing": data.get("tpu_device_timing", ""), "platform": platform(),
              "memory_info": list(torch.tpu.mem_get_info()), "torchtpu_stats_fallbacks": torchtpu.stats()["fallbacks"]}
    print(f"trace: {len(events)} events, {len(kernels)} on the device ({result['device_us']:.0f} us); "
          f"PJRT profiler extension: {result['profiler_extension']}")
    record(a.out, "trace", result)
    if not kernels:
        raise SystemExit("the trace has no device events")


def summary(a):
    with open(os.path.join(a.out, "results.json")) as f:
        r = json.load(f)
    lines = [f"# torchtpu device check: {r.get('platform', '?')}", ""]
    for k in ("platform", "device", "torch", "commit"):
        if k in r:
            lines.append(f"- {k}: {r[k]}")
    if "phases" in r:
        lines += ["", "| phase | result | seconds |", "|---|---|---|"]
        said = {0: "ok", -1: "not run (the budget was spent)", 124: "FAILED: stopped at its time limit"}
        lines += [f"| {p['name']} | {said.get(p['rc'], 'FAILED (exit ' + str(p['rc']) + ')')} | {p['seconds']} |"
                  for p in r["phases"]]
    if "matmul" in r:
        m = r["matmul"]
        lines += ["", f"Matrix products {m['n']}^3 (TFLOP/s):", "",
                  f"| dtype | torchtpu | torch {m['ref_device']} | ratio | largest difference |", "|---|---|---|---|---|"]
        for dt in ("bfloat16", "float32"):
            if dt in m:
                x = m[dt]
                lines.append(f"| {dt} | {x['tpu']:.2f} | {x['ref']:.2f} | {x['ratio']:.2f}x | {x['max_abs_diff']:.3g} |")
    if "gpt" in r:
        g = r["gpt"]
        lines += ["", f"bench/train_step.py GPT ({g['params']:,} parameters), medians of {g['repeats']} rounds:", "",
                  "| system | forward (ms) | train step (ms) | first step (ms) |", "|---|---|---|---|"]
        lines += [f"| {n} | {s['forward_ms']:.2f} | {s['step_ms']:.2f} | {s['first_step_ms']:.0f} |"
                  for n, s in g["systems"].items()]
        lines += [""] + [f"- {k}: {v:.2f}x" for k, v in g["ratios"].items()]
    if "eager" in r:
        e = r["eager"]
        lines += ["", "Eager host time per op (us):", "", f"| case | torchtpu | torch {e['ref_device']} | ratio |",
                  "|---|---|---|---|"]
        lines += [f"| {c} | {e[c]['tpu_us']:.2f} | {e[c]['ref_us']:.2f} | {e[c]['ratio']:.2f}x |"
                  for c in ("add8", "mm256")]
        lines.append(f"\nCold compile of a new op signature: {e['compile_ms']:.1f} ms")
    if "trace" in r:
        t = r["trace"]
        lines += ["", f"Profiler trace (trace.json.gz): {t['events']} events, {t['device_events']} device events; "
                  f"PJRT profiler extension: {t['profiler_extension']}; mem_get_info: {t['memory_info']}"]
    targets = []  # issue 46's, for a GPU against torch's CUDA
    if "matmul" in r and "bfloat16" in r["matmul"]:
        ratio = r["matmul"]["bfloat16"]["ratio"]
        targets.append(f"bf16 product at least 0.90x torch {r['matmul']['ref_device']}'s: {ratio:.2f}x, "
                       f"{'met' if ratio >= 0.9 else 'NOT met'}")
    key = f"compiled step / inductor ({r.get('gpt', {}).get('ref_device')}) step"
    if key in r.get("gpt", {}).get("ratios", {}):
        ratio = r["gpt"]["ratios"][key]
        targets.append(f"compiled GPT step within 1.10x of Inductor's: {ratio:.2f}x, "
                       f"{'met' if ratio <= 1.1 else 'NOT met'}")
    if targets:
        lines += ["", "Targets:", ""] + [f"- {t}" for t in targets]
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["matmul", "gpt", "eager", "trace", "summary"])
    p.add_argument("--out", required=True, help="the folder of results.json")
    p.add_argument("--quick", action="store_true", help="small sizes (the CPU plugin's run in the suite)")
    a = p.parse_args()
    {"matmul": matmul, "gpt": gpt, "eager": eager, "trace": trace, "summary": summary}[a.what](a)


if __name__ == "__main__":
    main()
