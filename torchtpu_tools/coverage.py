"""python -m torchtpu.coverage ops: PyTorch's own op database, on tpu vs CPU.

Runs every OpInfo of torch.testing._internal.common_methods_invocations.op_db
(its sample inputs, generated on the CPU) on tpu and on the CPU and compares
the results with torch.testing tolerances: float32 and int64/bool exactly as
PyTorch's defaults, bfloat16 looser (rtol 1.6e-2, atol 1e-2) as PyTorch's own
reduced-precision tests. A float mismatch is arbitrated by a float64 CPU
reference (complex128 for complex64): the tpu result passes if it is at least as close to it as the CPU
result (RMSE within 2x, the rule of PyTorch's benchmark harness). Outputs
that still differ are compared once more through the sample's
output_process_fn_grad, as PyTorch's own device-vs-CPU test (test_compare_cpu)
compares them: it makes outputs that are unique only up to sign (singular and
eigen vectors) comparable; gradients are taken through it too. Samples
that draw random numbers (run an ATen op tagged nondeterministic_seeded) and
ops whose OpInfo declares a nondeterministic output (empty) are compared by
shape and dtype;
their distributions are tested in tests/test_random.py. Differentiable
float32 samples also compare gradients.

Each op runs in a worker process with a per-sample time limit, so a crash or
a hang costs that op, not the sweep. Results go to a state file as they come
(the sweep resumes where it stopped) and docs/COVERAGE.md is written from it.

    python -m torchtpu.coverage ops                       # the full sweep (eager)
    python -m torchtpu.coverage ops --compiled            # the same through torch.compile
    python -m torchtpu.coverage ops --ops add,sum,mm      # a slice
    python -m torchtpu.coverage errors                    # the OpInfos' error inputs (below)
    python -m torchtpu.coverage modules                   # nn modules (below)
    python -m torchtpu.coverage report                    # rewrite the report from the state
    python -m torchtpu.coverage models --limit 40         # Hugging Face architectures (models_sweep.py)

`errors` runs every OpInfo's error inputs, made for the CPU and for tpu under
one seed: each one the CPU refuses must raise on tpu the CPU's exception type,
with the CPU's message or one PyTorch's own error test accepts (its regex).

`modules` runs every ModuleInfo of torch.testing._internal.common_modules.
module_db the same way, in float32: each module input builds the module on
the CPU, a copy of it on tpu and one in float64 (the referee); the forward
outputs, the buffers after the forward (running statistics) and the
gradients of the parameters and the inputs are compared, in training mode
and, where the ModuleInfo says they differ, in eval mode. The module's error
inputs must raise on tpu what they raise on the CPU, type and message.
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import traceback

from .coverage_tasks import DTYPES, MODULE_MODES, _load_modules, _load_ops, _run_task

STATUSES = ("pass", "mismatch", "error", "fallback", "timeout", "crash")


def _key(name, dtype, mode):
    return f"{name}|{dtype}|{mode}"



def _worker(conn):
    os.environ.setdefault("TORCHTPU_FALLBACK", "silent")
    import warnings
    warnings.simplefilter("ignore")
    import torch  # noqa: F401
    import torchtpu  # noqa: F401
    ops, modules = _load_ops(), _load_modules()
    conn.send(("ready", (sorted(ops), sorted(modules))))
    while True:
        task = conn.recv()
        if task is None:
            return
        name, dtype, mode, grad = task
        try:
            result = _run_task(modules if mode in MODULE_MODES else ops, name, dtype, mode, grad, conn.send)
        except Exception as e:  # noqa: BLE001
            result = {"status": "error", "reason": f"{type(e).__name__}: {e}"[:300],
                      "trace": traceback.format_exc()[-800:]}
        conn.send(("done", result))


class _Worker:
    def __init__(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        kind, (self.op_names, self.module_names) = self.conn.recv()

    def run(self, task, sample_timeout):
        self.conn.send(task)
        sample = -1
        while True:
            if not self.conn.poll(sample_timeout):
                return {"status": "timeout", "reason": f"sample {sample}: over {sample_timeout:.0f} s"}, True
            try:
                kind, value = self.conn.recv()
            except EOFError:
                return {"status": "crash", "reason": f"sample {sample}: the worker process died "
                                                     f"(exit code {self.proc.exitcode})"}, True
            if kind == "progress":
                sample = value
            else:
                return value, False

    def stop(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()


# --- the sweep ------------------------------------------------------------------------------

def load_jsonl_state(path, key, value=None):
    """A sweep's saved state: one JSON object per line, as {entry[key]:
    entry[value]} (the whole entry without |value|); a missing file is empty."""
    state = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                    state[entry[key]] = entry if value is None else entry[value]
                except (ValueError, KeyError):
                    continue  # a torn last line after an interruption
    return state


def _load_state(path):
    return load_jsonl_state(path, "key", "result")


def sweep(args):
    state = {} if args.fresh else _load_state(args.state)
    worker = _Worker()
    modules = args.command == "modules"
    names = worker.module_names if modules else worker.op_names
    if args.ops:
        wanted = set(args.ops.split(","))
        names = [n for n in names if n in wanted or n.split(".")[0] in wanted]
    if modules:
        mode = MODULE_MODES[args.compiled]
        tasks = [(n, "float32", mode, True) for n in names]
    elif args.command == "errors":
        mode = "errors"
        tasks = [(n, "float32", mode, False) for n in names]
    else:
        mode = "compiled" if args.compiled else "eager"
        tasks = [(n, d, mode, not args.no_grad) for n in names for d in args.dtypes.split(",")]
    todo = [t for t in tasks if _key(t[0], t[1], mode) not in state]
    start = time.time()
    with open(args.state, "a") as out:
        for i, task in enumerate(todo):
            elapsed = time.time() - start
            eta = elapsed / i * (len(todo) - i) if i else 0
            print(f"\r[{i + 1}/{len(todo)}] {task[0]:<40.40} {task[1]:<9} eta {eta / 60:5.1f} min ",
                  end="", file=sys.stderr, flush=True)
            result, restart = worker.run(task, args.timeout)
            if restart:
                worker.stop()
                worker = _Worker()
            state[_key(task[0], task[1], mode)] = result
            out.write(json.dumps({"key": _key(task[0], task[1], mode), "result": result}) + "\n")
            out.flush()
    worker.conn.send(None)
    worker.stop()
    print(file=sys.stderr)
    return state


def _summary(state, names, dtypes, mode):
    rows = []
    for dtype in dtypes:
        counts = {s: 0 for s in STATUSES}
        total = 0
        for n in names:
            r = state.get(_key(n, dtype, mode))
            if r is None or r["status"] == "n/a":
                continue
            total += 1
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        if total:
            rows.append((dtype, total, counts))
    return rows


def _module_lines(state, names):
    """The report's section on nn modules."""
    lines = ["## Modules", "",
             "`python -m torchtpu.coverage modules` (and `--compiled`): every ModuleInfo of "
             "`torch.testing._internal.common_modules.module_db` in float32, its module inputs on tpu vs CPU: "
             "outputs, buffers after the forward and gradients of parameters and inputs (float64 copies arbitrate), "
             "in training mode and in eval mode where they differ; eager runs also check that the module's "
             "error inputs raise the CPU's exception and message.", "",
             "| mode | ModuleInfos | pass | mismatch | error | fallback | timeout | crash | pass rate |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mode in MODULE_MODES:
        for _, total, c in _summary(state, names, ("float32",), mode):
            lines.append(f"| {mode.replace('module-', '').replace('module', 'eager')} | {total} | "
                         + " | ".join(str(c.get(s, 0)) for s in STATUSES) + f" | {100 * c['pass'] / total:.1f}% |")
    lines += ["", "| module | eager | compiled | first failure |", "|---|---|---|---|"]
    for n in names:
        cells, reason = [], ""
        for mode in MODULE_MODES:
            r = state.get(_key(n, "float32", mode))
            cells.append("" if r is None else ("-" if r["status"] == "n/a" else r["status"]))
            if r and r["status"] not in ("pass", "n/a") and not reason:
                reason = ("compiled: " if mode != "module" else "") + r.get("reason", "")
        reason = reason.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{n}` | " + " | ".join(cells) + f" | {reason} |")
    return lines + [""]


def _error_lines(state, names):
    """The report's section on the OpInfos' error inputs."""
    lines = ["## Error inputs", "",
             "`python -m torchtpu.coverage errors`: every OpInfo's error inputs, made for the CPU and for tpu "
             "under one seed; each one the CPU refuses must raise on tpu the CPU's exception type with the CPU's "
             "message (first line) or one PyTorch's own error test accepts (the error input's regex).", ""]
    for _, total, c in _summary(state, names, ("float32",), "errors"):
        lines.append(f"{c['pass']}/{total} OpInfos with error inputs pass ({100 * c['pass'] / total:.1f}%).")
    failing = [(n, state[_key(n, "float32", "errors")]) for n in names]
    failing = [(n, r) for n, r in failing if r["status"] not in ("pass", "n/a")]
    if failing:
        lines += ["", "| op | status | first failure |", "|---|---|---|"]
        for n, r in failing:
            reason = r.get("reason", "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{n}` | {r['status']} | {reason} |")
    return lines + [""]


def _names(state, modes):
    return sorted({k.split("|")[0] for k in state if k.rsplit("|", 1)[1] in modes})


def report(state, out_path, names):
    modes = [m for m in ("eager", "compiled") if any(k.endswith("|" + m) for k in state)]
    lines = ["# Op coverage: PyTorch's OpInfo database on tpu", "",
             "Generated by `python -m torchtpu.coverage ops` (and `--compiled`): every OpInfo of "
             "`torch.testing._internal.common_methods_invocations.op_db`, its sample inputs on tpu vs CPU "
             "(float32 and integer/bool with torch.testing's default tolerances, bfloat16 with rtol 1.6e-2 "
             "atol 1e-2; float mismatches arbitrated by a float64 reference; outputs that still differ compared "
             "again through the sample's `output_process_fn_grad`, as PyTorch's `test_compare_cpu` does (singular "
             "and eigen vectors up to sign), and gradients taken through it; random ops by shape and dtype). "
             "An op passes a dtype when all its samples pass with nothing run on the CPU fallback.", ""]
    for mode in modes:
        lines += [f"## Summary ({mode})", "", "| dtype | OpInfos | pass | mismatch | error | fallback | timeout | crash | pass rate |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for dtype, total, c in _summary(state, names, DTYPES, mode):
            lines.append(f"| {dtype} | {total} | " + " | ".join(str(c.get(s, 0)) for s in STATUSES)
                         + f" | {100 * c['pass'] / total:.1f}% |")
        graded = [state[_key(n, 'float32', mode)] for n in names
                  if _key(n, 'float32', mode) in state and state[_key(n, 'float32', mode)].get("grad", "n/a") != "n/a"]
        if graded:
            ok = sum(1 for r in graded if r["grad"] == "pass")
            lines += ["", f"Gradients (float32, differentiable OpInfos): {ok}/{len(graded)} match CPU "
                          f"({100 * ok / len(graded):.1f}%)."]
        lines.append("")
    lines += ["## Per op", "", "| op | " + " | ".join(DTYPES) + " | grad | " +
              ("compiled f32 | " if "compiled" in modes else "") + "first failure |",
              "|---|" + "---|" * (len(DTYPES) + 2 + ("compiled" in modes))]
    for n in names:
        cells, reason = [], ""
        for d in DTYPES:
            r = state.get(_key(n, d, "eager"))
            cells.append("" if r is None else ("-" if r["status"] == "n/a" else r["status"]))
            if r and r["status"] not in ("pass", "n/a") and not reason:
                reason = f"{d}: {r.get('reason', '')}"
        r32 = state.get(_key(n, "float32", "eager"))
        grad = r32.get("grad", "n/a") if r32 else ""
        cells.append("-" if grad == "n/a" else grad)
        if r32 and r32.get("grad") not in (None, "pass", "n/a") and not reason:
            reason = f"grad: {r32.get('grad_reason', '')}"
        if "compiled" in modes:
            rc = state.get(_key(n, "float32", "compiled"))
            cells.append("" if rc is None else ("-" if rc["status"] == "n/a" else rc["status"]))
            if rc and rc["status"] not in ("pass", "n/a") and not reason:
                reason = f"compiled: {rc.get('reason', '')}"
        reason = reason.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{n}` | " + " | ".join(cells) + f" | {reason} |")
    checked = _names(state, ("errors",))
    if checked:
        lines += [""] + _error_lines(state, checked)
    modules = _names(state, MODULE_MODES)
    if modules:
        lines += [""] + _module_lines(state, modules)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["models"]:  # Hugging Face architectures: models_sweep.py
        from . import models_sweep
        return models_sweep.main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m torchtpu.coverage", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["ops", "errors", "modules", "models", "report"])
    p.add_argument("--ops", default="", help="comma-separated OpInfo (or ModuleInfo) names (default: all)")
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--compiled", action="store_true", help="run each op through torch.compile(backend='tpu')")
    p.add_argument("--no-grad", action="store_true", help="skip the gradient checks")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per sample")
    p.add_argument("--state", default=".coverage-state.jsonl", help="results so far (the sweep resumes from it)")
    p.add_argument("--fresh", action="store_true", help="ignore earlier results")
    p.add_argument("--out", default=os.path.join("docs", "COVERAGE.md"))
    args = p.parse_args(argv)
    state = _load_state(args.state) if args.command == "report" else sweep(args)
    names = _names(state, ("eager", "compiled"))
    report(state, args.out, names)
    for mode in ("eager", "compiled", "errors") + MODULE_MODES:
        for dtype, total, c in _summary(state, _names(state, (mode,)), DTYPES, mode):
            print(f"{mode:15} {dtype:9} {c['pass']:4}/{total:<4} pass ({100 * c['pass'] / total:.1f}%)")
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
