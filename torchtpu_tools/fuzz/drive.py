"""Driving the fuzzer: the worker process programs run in (a crash or a hang
is a finding), listings and saved failures, and the command line."""
import argparse
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time
import traceback

import torch

from .generate import generate
from .run import MODES, Failure, run_program
from .shrink import shrink


def render(program):
    """The program as readable Python over a dict t of tensors (one device's view)."""
    lines = [f"# torchtpu.fuzz program: seed {program['seed']}, mode {program['mode']}"]
    blk = None
    for n, ins in enumerate(program["instrs"]):
        k = ins["k"]
        if program["mode"] == "compiled" and ins.get("blk") != blk:
            blk = ins.get("blk")
            if blk is not None:
                lines.append(f"# -- block {blk} (one torch.compile'd function on tpu) --")
        if k == "new":
            g = "torch.Generator().manual_seed(%d)" % ins["seed"]
            if ins["dtype"] == "float":
                v = f"torch.randn({ins['shape']}, generator={g}, dtype=torch.float64).float()"
                if "scale" in ins:
                    v = f"({v} * {ins['scale']!r})"
            elif ins["dtype"] == "int":
                v = f"torch.randint({ins.get('low', 0)}, {ins['high']}, {ins['shape']}, generator={g})"
            else:
                v = f"(torch.rand({ins['shape']}, generator={g}) < 0.5)"
            if ins.get("transposed"):
                v += ".transpose(-1, -2).contiguous().transpose(-1, -2)"
            v += ".to(dev)"
            if ins.get("grad"):
                v += ".requires_grad_()  # a parameter"
            s = f"t[{ins['outs'][0]}] = {v}"
        elif k == "free":
            s = f"del t[{ins['ins'][0]}]"
        elif k == "step":
            s = f"opt.step()  # {ins['opt']} over the parameters"
        elif k == "zero_grad":
            s = "for p in params: p.grad = None"
        else:
            args = [f"t[{i}]" for i in ins["ins"]]
            expr = ins["src"].format(*args).replace("G,", f"torch.Generator(dev).manual_seed({ins.get('seed')}),") \
                .replace("G)", f"torch.Generator(dev).manual_seed({ins.get('seed')}))").replace("DEV", "dev")
            outs = ins.get("outs", [])
            s = (", ".join(f"t[{o}]" for o in outs) + (", = " if len(outs) > 1 else " = ") if outs else "") + expr
            if ins.get("nograd"):
                s = "with torch.no_grad(): " + s
            if k == "random":
                s += "  # the CPU takes tpu's values"
        lines.append(f"{s}  # [{n}]")
    return "\n".join(lines)


def _describe(program):
    try:
        run_program(program)
    except Failure as f:
        ins = program["instrs"][f.step] if f.step < len(program["instrs"]) else {}
        return {"status": f.kind, "step": f.step, "detail": f.detail, "op": _op_name(ins)}
    except Exception as e:  # noqa: BLE001 - a bug of the fuzzer or of the runtime beneath it
        return {"status": "internal", "detail": "".join(traceback.format_exception(e))[-2000:]}
    return {"status": "ok"}


def _op_name(ins):
    src = ins.get("src") or ins.get("k", "")
    for token in ("torch.", "F.", "{0}."):
        if token in src:
            return src.split(token, 1)[1].split("(")[0]
    return src[:20]


def worker_main():
    """Reads JSON requests on stdin, answers each with one JSON line."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed goes to stderr
    import warnings
    warnings.simplefilter("ignore")
    torch._dynamo.config.recompile_limit = 1 << 20
    torch._dynamo.config.accumulated_recompile_limit = 1 << 20
    for line in sys.stdin:
        req = json.loads(line)
        program = req.get("program") or generate(req["seed"], req["mode"], req.get("steps", 40))
        res = _describe(program)
        res["program"] = program
        out.write(json.dumps(res) + "\n")
        out.flush()


class Worker:
    """A worker process; a crash or a hang is that program's result."""

    def __init__(self, env):
        self.env = env
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "torchtpu_tools.fuzz", "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env, text=True)

    def ask(self, req, timeout):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        hung = self.proc.poll() is None
        self.proc.kill()
        self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        program = req.get("program") or generate(req["seed"], req["mode"], req.get("steps", 40))
        return {"status": "hang" if hung else "crash", "detail": f"exit code {code}" if not hung else
                f"no answer in {timeout:.0f} s", "program": program}

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def _worker_env():
    env = dict(os.environ)
    base = os.path.join(tempfile.gettempdir(), f"torchtpu-fuzz-{os.getuid()}")
    # Random programs make thousands of one-off executables: keep them out of the user's caches.
    env.setdefault("TORCHTPU_CACHE_DIR", os.path.join(base, "xla"))
    env.setdefault("TORCHTPU_CACHE_MAX_MB", "512")
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(base, "inductor"))
    env.setdefault("TORCHTPU_FALLBACK", "silent")
    return env


def _save(res, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    p = res["program"]
    stem = os.path.join(out_dir, f"fuzz-{p['mode']}-{p['seed']}")
    with open(stem + ".json", "w") as f:
        json.dump(p, f)
    with open(stem + ".py", "w") as f:
        f.write(render(p) + f"\n# {res['status']} at instruction {res.get('step')}: {res.get('detail')}\n")
    return stem


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torchtpu.fuzz", description=sys.modules[__package__].__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=None, help="run until this much time has passed")
    ap.add_argument("--programs", type=int, default=None, help="run this many programs (per mode)")
    ap.add_argument("--seed", type=int, default=0, help="the first program's seed")
    ap.add_argument("--mode", choices=MODES + ("both", "all"), default="both",
                    help="both: eager and compiled; fused: fused eager against strict eager, bit for bit")
    ap.add_argument("--steps", type=int, default=40, help="instructions per program")
    ap.add_argument("--replay", help="run a saved program (JSON) and print it")
    ap.add_argument("--out", default="fuzz-failures", help="where failing programs are written")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one program may take")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main()
    worker = Worker(_worker_env())
    modes = {"both": ("eager", "compiled"), "all": MODES}.get(args.mode, (args.mode,))
    if args.replay or (args.minutes is None and args.programs is None):
        if args.replay:
            with open(args.replay) as f:
                program = json.load(f)
        else:
            program = generate(args.seed, modes[0], args.steps)
        print(render(program))
        res = worker.ask({"program": program}, args.timeout)
        print(f"{res['status']}" + (f" at instruction {res.get('step')}: {res.get('detail')}" if res["status"] != "ok" else ""))
        worker.close()
        return 0 if res["status"] == "ok" else 1
    t_end = time.monotonic() + args.minutes * 60 if args.minutes is not None else math.inf
    count = {m: 0 for m in modes}
    failures, upstream = [], []
    seed = args.seed
    t0 = time.monotonic()
    while time.monotonic() < t_end and (args.programs is None or min(count.values()) < args.programs):
        for mode in modes:
            res = worker.ask({"seed": seed, "mode": mode, "steps": args.steps}, args.timeout)
            count[mode] += 1
            if res["status"] == "upstream":  # PyTorch's compile stack refuses it on the CPU too
                upstream.append((seed, mode))
                print(f"seed {seed} {mode}: PyTorch's aot_eager fails or differs too (not counted): "
                      f"{str(res.get('detail'))[:300]}", flush=True)
                _save(res, args.out)
            elif res["status"] != "ok":
                print(f"seed {seed} {mode}: {res['status']} at instruction {res.get('step')}: "
                      f"{str(res.get('detail'))[:500]}", flush=True)
                if not args.no_shrink and res["status"] != "internal":
                    want = (res["status"], res.get("op"))

                    def fails(cand):
                        r = worker.ask({"program": cand}, args.timeout)
                        return (r["status"], r.get("op")) == want

                    small = shrink(res["program"], fails)
                    res = worker.ask({"program": small}, args.timeout)
                    res["program"] = small
                stem = _save(res, args.out)
                print(f"  -> {stem}.json ({len(res['program']['instrs'])} instructions), {stem}.py", flush=True)
                failures.append((seed, mode, res["status"]))
        seed += 1
        if seed % 10 == 0:
            print(f"{time.monotonic() - t0:.0f} s: {sum(count.values())} programs, {len(failures)} failures",
                  flush=True)
    worker.close()
    total = sum(count.values())
    print(f"{total} programs ({', '.join(f'{c} {m}' for m, c in count.items())}), seeds {args.seed}..{seed - 1}, "
          f"{time.monotonic() - t0:.0f} s: {len(failures)} failures "
          f"({sum(1 for f in failures if f[2] == 'mismatch')} mismatches, "
          f"{sum(1 for f in failures if f[2] in ('crash', 'hang'))} crashes or hangs); "
          f"{len(upstream)} that PyTorch's own aot_eager refuses too")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
