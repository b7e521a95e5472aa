"""python -m torchtpu.coverage models: Hugging Face architectures on tpu vs CPU.

Every model type transformers registers (its AUTO mappings) gets one class:
a head where the type has one (causal LM, masked LM, seq2seq LM, image
classification, sequence classification, CTC, audio classification, in that
order of preference), else its base model. The class is built on the CPU
from a small config and inputs made from its forward signature
(models_build.py: config recipes in models_config.py, inputs in
models_inputs.py), float32, eval mode, and run forward + backward on the
CPU: the reference, and the denominator (an architecture that no recipe
runs on the CPU is out, with its reason). Then each mode runs on tpu and is
compared with the CPU (models_modes.py: eager, compiled, bf16, generate,
train). Each architecture runs in its own process under a time limit,
--jobs of them at once.

A mode's status: pass, mismatch (ran, numbers differ), error (an exception
on tpu that the CPU did not raise), timeout or crash; fallbacks (ops run on
the CPU) are counted beside it. Results go to a state file as they come (the
sweep resumes) and docs/MODELS.md is written from it (models_report.py).

    python -m torchtpu.coverage models --cpu-only --jobs 2   # the denominator
    python -m torchtpu.coverage models --limit 40            # a sample
    python -m torchtpu.coverage models --only bert,gpt2,vit  # named types
    python -m torchtpu.coverage models --modes bf16,generate # some modes
    python -m torchtpu.coverage models                       # all of them
"""
import argparse
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import subprocess
import sys
import time

from .models_build import BuildError, architectures, build  # noqa: F401 - the sweep's API
from .models_modes import MODES

DEFAULT_MODES = ("eager", "compiled", "bf16", "generate", "train")


def run_model(model_type, class_name, modes, send):
    """In the worker: the CPU reference, then each mode; sends a result per mode."""
    import warnings
    warnings.simplefilter("ignore")
    start = time.time()
    try:
        import torch
        torch.set_num_threads(1)
        pristine, inputs, recipe, want = build(model_type, class_name)
    except Exception as e:  # noqa: BLE001
        why = str(e) if isinstance(e, BuildError) else f"{type(e).__name__}: {e}"
        send(("cpu", {"status": "cpu_error", "reason": why[:400],
                      "seconds": round(time.time() - start, 1)}))
        return
    send(("cpu", {"status": "pass", "params": sum(p.numel() for p in pristine.parameters()), "recipe": recipe,
                  "seconds": round(time.time() - start, 1)}))
    if modes:
        import torchtpu  # noqa: F401 - tpu only when a mode asks for it
        from .models_modes import run_modes
        run_modes(pristine, inputs, want, modes, class_name, send)


def _worker(model_type, class_name, modes, conn):
    os.environ.setdefault("TORCHTPU_FALLBACK", "silent")
    run_model(model_type, class_name, modes, conn.send)
    conn.send(("end", None))


class _Job:
    """One architecture in a process of its own."""

    def __init__(self, ctx, model_type, class_name, modes, timeout):
        self.model_type, self.class_name, self.modes = model_type, class_name, modes
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(model_type, class_name, modes, child), daemon=True)
        self.proc.start()
        child.close()
        self.deadline = time.time() + timeout
        self.timeout = timeout
        self.results = {}
        self.done = False

    def receive(self):
        """Takes what the process sent; sets done when it finished or died."""
        try:
            while self.conn.poll():
                kind, value = self.conn.recv()
                if kind == "end":
                    self.done = True
                    return
                self.results[kind] = value
                if kind == "cpu" and value["status"] != "pass":
                    self.done = True
                    return
        except (EOFError, OSError):
            self.proc.join(1)
            self._fail("crash", f"the process died (exit code {self.proc.exitcode})")

    def expire(self):
        if not self.done and time.time() >= self.deadline:
            self._fail("timeout", f"over {self.timeout:.0f} s")

    def _fail(self, status, reason):
        for mode in ("cpu",) + tuple(self.modes):
            if mode not in self.results:
                self.results[mode] = {"status": status, "reason": reason}
                break  # the modes after it did not run
        self.done = True

    def close(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()


def run_many(archs, modes, timeout, jobs, on_result, start_method):
    """Runs each (model type, class) in its own process, |jobs| at once;
    on_result(model_type, class_name, results) as each finishes."""
    ctx = mp.get_context(start_method)
    todo, running = list(archs), []
    while todo or running:
        while todo and len(running) < jobs:
            t, cls = todo.pop(0)
            running.append(_Job(ctx, t, cls, modes, timeout))
        wait_for = min(j.deadline for j in running) - time.time()
        multiprocessing.connection.wait([j.conn for j in running] + [j.proc.sentinel for j in running],
                                        max(0.05, wait_for))
        for job in list(running):
            job.receive()
            if not job.done and not job.proc.is_alive():
                job.receive()
                if not job.done:
                    job._fail("crash", f"the process died (exit code {job.proc.exitcode})")
            job.expire()
            if job.done:
                job.close()
                running.remove(job)
                on_result(job.model_type, job.class_name, job.results)


def _run_one(model_type, class_name, modes, timeout, start_method="spawn"):
    """{mode: result} (with "cpu"), the model in a process of its own."""
    out = {}
    run_many([(model_type, class_name)], modes, timeout, 1, lambda t, c, r: out.update(r), start_method)
    return out


def _load_state(path):
    from .coverage import load_jsonl_state
    return load_jsonl_state(path, "model_type")


def _commit():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "?"
    except Exception:  # noqa: BLE001
        return "?"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m torchtpu.coverage models", description=__doc__.split("\n")[0])
    p.add_argument("--only", default="", help="comma-separated model types (default: all)")
    p.add_argument("--limit", type=int, default=0, help="the first N model types (after --only, --skip)")
    p.add_argument("--skip", type=int, default=0, help="skip the first N model types")
    p.add_argument("--every", type=int, default=1, help="every Nth model type (a spread-out sample)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES), help=f"some of {','.join(MODES)}")
    p.add_argument("--cpu-only", action="store_true",
                   help="only build and run each model on the CPU (the denominator; no tpu)")
    p.add_argument("--jobs", type=int, default=1, help="architectures at once, each in its own process")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per architecture")
    p.add_argument("--state", default=".models-state.jsonl", help="results so far (the sweep resumes from it)")
    p.add_argument("--fresh", action="store_true", help="ignore earlier results")
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the state")
    p.add_argument("--out", default=os.path.join("docs", "MODELS.md"))
    args = p.parse_args(argv)
    modes = () if args.cpu_only else tuple(m for m in args.modes.split(",") if m)
    unknown = set(modes) - set(MODES)
    if unknown:
        p.error(f"unknown modes {sorted(unknown)}; the modes are {', '.join(MODES)}")
    state = {} if args.fresh else _load_state(args.state)
    if not args.report_only:
        archs = architectures()
        if args.only:
            wanted = set(args.only.split(","))
            archs = [a for a in archs if a[0] in wanted]
        archs = archs[args.skip::args.every]
        if args.limit:
            archs = archs[:args.limit]
        todo = [a for a in archs if a[0] not in state]
        commit, start, count = _commit(), time.time(), [0]
        if args.cpu_only:  # the parent's imports are the children's (fork): seconds, not minutes
            import torch
            import transformers.generation  # noqa: F401
            import transformers.modeling_utils  # noqa: F401
            torch.set_num_threads(1)
        with open(args.state, "a") as out:
            def on_result(t, cls, results):
                count[0] += 1
                entry = {"model_type": t, "class_name": cls, "results": results, "commit": commit,
                         "modes": list(modes) or ["cpu"]}
                state[t] = entry
                out.write(json.dumps(entry) + "\n")
                out.flush()
                print(f"[{count[0]}/{len(todo)}] {t} ({cls}): "
                      + ", ".join(f"{m}: {r['status']}" for m, r in results.items()), file=sys.stderr, flush=True)
            run_many(todo, modes, args.timeout, max(1, args.jobs), on_result,
                     "fork" if args.cpu_only else "spawn")
        print(f"{len(todo)} architectures in {time.time() - start:.0f} s", file=sys.stderr)
    from .models_report import report
    command = "python -m torchtpu.coverage models " + " ".join(argv if argv is not None else sys.argv[2:])
    report(state, args.out, command.strip())
    print(f"report: {args.out}")
    return 0
