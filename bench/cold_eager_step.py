"""Where a cold eager training step's time goes, strict against fused eager:
the first forward, backward and AdamW step of a small Llama (built from its
config) in a fresh process with the compile cache off, split into XLA's
compile time (torchtpu.stats()["compile_seconds"]) and the rest (PyTorch,
torchtpu's own building of programs, execution). Fused eager compiles one
program per run of ops instead of one per op signature.

    python bench/cold_eager_step.py [--runs 3] [--layers 2]

Each run of each mode is its own process (modes alternate); medians are
reported. The losses of the modes must be equal (bit for bit).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def worker(layers):
    import torch
    import torchtpu
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 256, (2, 16)).to("tpu")
    t0 = time.perf_counter()
    out = model(ids, labels=ids)
    out.loss.backward()
    opt.step()
    loss = out.loss.item()
    step = time.perf_counter() - t0
    s = torchtpu.stats()
    print(json.dumps({"step": step, "xla": s["compile_seconds"], "programs": s["cache_misses"],
                      "loss": loss.hex()}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.layers)
        return
    modes = ("strict", "fused")
    results = {m: [] for m in modes}
    for _ in range(a.runs):
        for m in modes:
            env = dict(os.environ, TORCHTPU_EAGER=m, TORCHTPU_CACHE_DIR="off", TORCHTPU_PROGRESS="0")
            out = subprocess.run([sys.executable, __file__, "--worker", "--layers", str(a.layers)], env=env,
                                 capture_output=True, text=True, timeout=900)
            if out.returncode != 0:
                sys.exit(f"{m} run failed:\n{out.stderr[-3000:]}")
            results[m].append(json.loads(out.stdout.strip().splitlines()[-1]))
    losses = {r["loss"] for m in modes for r in results[m]}
    print(f"Llama, {a.layers} layers, first training step, compile cache off, medians of {a.runs} fresh processes")
    print(f"{'mode':8s}{'step (s)':>10s}{'XLA compile (s)':>17s}{'rest (s)':>10s}{'programs compiled':>19s}")
    for m in modes:
        step = statistics.median(r["step"] for r in results[m])
        xla = statistics.median(r["xla"] for r in results[m])
        programs = statistics.median(r["programs"] for r in results[m])
        print(f"{m:8s}{step:10.2f}{xla:17.2f}{step - xla:10.2f}{programs:19.0f}")
    print("losses equal across modes and runs:", len(losses) == 1)


if __name__ == "__main__":
    main()
