"""TorchTitan benchmark: its trainer (`torchrun -m torchtitan.train`, FSDP2 on
2 processes) on tpu against the same job on the CPU over gloo
(tests/titan/cpu_reference.py), eager and compiled, for the Llama 3 debug
model and a ~50M-parameter Llama (bench/titan_flavors.py), side by side in
one run. Not a test.

    python bench/titan.py [--steps 8] [--seq-len 128] [--batch 4] [--models debugmodel,bench50m]

Runs with the integrations' environment ($TORCHTPU_INTEGRATIONS_VENV,
default .venv-integrations). Compiled: `--compile.backend tpu` on tpu,
TorchTitan's default (Inductor) on the CPU. Per job: tokens/s per process
and step time (medians over both ranks' steps 3..N, from TorchTitan's tps,
which is per process), TorchTitan's device memory (tpu; the CPU job has no
device memory) and the peak resident memory of the largest process (both).
Float32 parameters by default (--dtype bfloat16 for TorchTitan's default)."""
import argparse
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("TORCHTPU_INTEGRATIONS_VENV", os.path.join(ROOT, ".venv-integrations"))
LINE = re.compile(r"step:\s+(\d+).*?memory:\s+(-?[0-9.]+)GiB.*?tps:\s+([0-9,]+)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_job(a, workdir, system, model, compiled):
    """Runs one torchrun job in a child process of its own and returns the
    parsed numbers (the child reports its descendants' peak RSS)."""
    args = ["--model.name", "llama3", "--model.flavor", model, "--training.seq-len", str(a.seq_len),
            "--training.local-batch-size", str(a.batch), "--training.steps", str(a.steps),
            "--training.mixed-precision-param", a.dtype, "--metrics.log-freq", "1",
            "--parallelism.data-parallel-shard-degree", "2", "--experimental.custom-import", "bench.titan_flavors"]
    if compiled:
        args += ["--compile.enable"] + (["--compile.backend", "tpu"] if system == "tpu" else [])
    target = [os.path.join(ROOT, "tests", "titan", "cpu_reference.py")] if system == "cpu" else ["-m", "torchtitan.train"]
    cmd = [os.path.join(VENV, "bin", "python"), "-m", "torch.distributed.run", "--nproc-per-node=2",
           f"--master-port={free_port()}", *target, *args]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    runner = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
              "print('maxrss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)")
    p = subprocess.run([sys.executable, "-c", runner, *cmd], cwd=workdir, env=env, capture_output=True, text=True,
                       timeout=a.timeout)
    out = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout + p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"{system} {model} {'compiled' if compiled else 'eager'} failed:\n{out[-4000:]}")
    tps, mem = [], []
    for step, gib, t in LINE.findall(out):
        if int(step) >= 3:
            tps.append(float(t.replace(",", "")))
            mem.append(float(gib))
    rss = int(re.search(r"maxrss (\d+)", out).group(1)) / 2**20  # KiB -> GiB
    tokens = a.seq_len * a.batch
    med = statistics.median(tps)
    return {"tps": med, "step_s": tokens / med, "device_gib": max(mem) if system == "tpu" else None, "rss_gib": rss,
            "n": len(tps)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--models", default="debugmodel,bench50m")
    ap.add_argument("--timeout", type=int, default=1200)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="titan-bench-")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torchtitan", "make_assets.py"), workdir],
                   check=True, capture_output=True)
    rows = []
    for model in a.models.split(","):
        for compiled in (False, True):
            got = {}
            for system in ("tpu", "cpu"):
                got[system] = one_job(a, workdir, system, model, compiled)
                print(model, "compiled" if compiled else "eager", system, got[system], file=sys.stderr, flush=True)
            rows.append((model, compiled, got))
    print(f"FSDP2, 2 processes, seq {a.seq_len}, local batch {a.batch}, {a.dtype} parameters, "
          f"medians of steps 3-{a.steps} over both ranks\n")
    print("| model | mode | tpu tokens/s/proc | CPU tokens/s/proc | tpu/CPU | tpu step s | CPU step s "
          "| tpu device GiB | tpu peak RSS GiB | CPU peak RSS GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, compiled, g in rows:
        t, c = g["tpu"], g["cpu"]
        print(f"| {model} | {'compiled' if compiled else 'eager'} | {t['tps']:.0f} | {c['tps']:.0f} | "
              f"{t['tps'] / c['tps']:.2f}x | {t['step_s']:.3f} | {c['step_s']:.3f} | {t['device_gib']:.2f} | "
              f"{t['rss_gib']:.2f} | {c['rss_gib']:.2f} |")


if __name__ == "__main__":
    main()
