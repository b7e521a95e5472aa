"""First compiled training step: how long a process waits before the model of
bench/train_step.py (forward, backward and AdamW, model and optimizer step
compiled) has taken its first step, with empty caches (cold) and with the
caches a previous process filled (warm), torchtpu beside Inductor.

    python bench/first_step.py [--warm-runs 3] [--systems tpu,tpu_no_aot,inductor] [--layers 8] [--dynamic]

--dynamic compiles as torch.compile(..., dynamic=True) does: the graphs' input
sizes are symbolic (the batch and sequence lengths of a workload whose
lengths vary).

Systems:
  tpu          torch.compile(backend="tpu"): XLA executables from torchtpu's
               disk cache, AOTAutograd's graphs from PyTorch's AOTAutograd cache
  tpu_no_aot   the same with TORCHINDUCTOR_AUTOGRAD_CACHE=0: executables from
               disk, but AOTAutograd traces every graph again
  inductor     torch.compile on the CPU: Inductor's FX graph and AOTAutograd
               caches

Every run is a fresh process with the system's own cache directories (under
a temporary folder): the first finds them empty, the next --warm-runs find
them filled. Reported per system: the cold first step, the median warm one,
and of the warm step Dynamo's bytecode tracing and the backend's time
(AOTAutograd's tracing or cache load, and the backend's own compile), from
torch._dynamo's compile metrics; and, for the cold tpu runs, each graph
program's building and XLA compile time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SYSTEMS = {"tpu": ("tpu", {}), "tpu_no_aot": ("tpu", {"TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}),
           "inductor": ("inductor", {})}


def worker(a):
    import types
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train_step
    shape = types.SimpleNamespace(layers=a.layers, d=256, heads=8, vocab=8192, seq=128, batch=8)
    if a.dynamic:
        import torch._dynamo
        torch._dynamo.config.assume_static_by_default = False  # what dynamic=True sets
    programs = []  # per tpu graph program built: name, seconds building it, seconds of XLA compile
    if SYSTEMS[a.worker][0] == "tpu":
        import torchtpu
        import torchtpu._fx_program as fx_program
        build = fx_program.Program.__init__

        def timed(self, gm, inputs, name):
            t, xla = time.perf_counter(), torchtpu.stats()["compile_seconds"]
            build(self, gm, inputs, name)
            xla = torchtpu.stats()["compile_seconds"] - xla
            programs.append((name, time.perf_counter() - t - xla, xla))
        fx_program.Program.__init__ = timed
    _, step, _ = train_step.torch_case(shape, SYSTEMS[a.worker][0])
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    from torch._dynamo.utils import compilation_time_metrics, counters
    phases = {k: sum(compilation_time_metrics.get(k, [])) for k in ("bytecode_tracing",
                                                                     "OutputGraph.call_user_compiler")}
    print(json.dumps({"first_step": first, "tracing": phases["bytecode_tracing"],
                      "backend": phases["OutputGraph.call_user_compiler"],
                      "aot_hits": counters["aot_autograd"]["autograd_cache_hit"], "programs": programs}))


def run(name, cache_root, a):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=os.path.join(cache_root, "torchtpu"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_root, "torch"), **SYSTEMS[name][1])
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", name, f"--layers={a.layers}",
                          *(["--dynamic"] if a.dynamic else [])], env=env, stdout=subprocess.PIPE, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warm-runs", type=int, default=3)
    p.add_argument("--systems", default="tpu,tpu_no_aot,inductor")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dynamic", action="store_true", help="symbolic input sizes, as dynamic=True")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a)
    names = a.systems.split(",")
    with tempfile.TemporaryDirectory() as root:
        cold = {n: run(n, os.path.join(root, n), a) for n in names}
        warm = {n: [] for n in names}
        for _ in range(a.warm_runs):  # interleaved, so drift of the machine affects all alike
            for n in names:
                warm[n].append(run(n, os.path.join(root, n), a))
    print(f"GPT of bench/train_step.py, {a.layers} layers{', dynamic=True' if a.dynamic else ''}; first training "
          f"step in seconds; warm: median of {a.warm_runs} fresh processes")
    print("| system | cold | warm | warm: Dynamo tracing | warm: backend | warm: AOTAutograd cache hits |")
    print("|---|---|---|---|---|---|")
    for n in names:
        med = {k: statistics.median(r[k] for r in warm[n]) for k in ("first_step", "tracing", "backend")}
        hits = "/".join(str(r["aot_hits"]) for r in warm[n])
        print(f"| {n} | {cold[n]['first_step']:.1f} | {med['first_step']:.1f} | {med['tracing']:.1f} | "
              f"{med['backend']:.1f} | {hits} |")
    for n in names:
        if cold[n]["programs"]:
            print(f"{n}, cold: the graphs' programs (name: seconds building / seconds of XLA compile): " +
                  ", ".join(f"{p}: {b:.2f} / {x:.2f}" for p, b, x in cold[n]["programs"]))


if __name__ == "__main__":
    main()
