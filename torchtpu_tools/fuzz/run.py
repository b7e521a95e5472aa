"""Running a fuzz program: one device's run (Env), the lockstep of tpu, the
CPU and float64 (run_program), compiled blocks, and fused eager against strict
eager bit for bit (_run_fused)."""
import contextlib
import json
import math

import torch
import torch.nn.functional as F

import torchtpu  # the device, before any program is made or run

from .compare import _SLOPES, _compare_envs, _compare_tensor, _same_error

MODES = ("eager", "compiled", "fused")
OPTIMIZERS = ("sgd", "sgd_foreach", "adamw_foreach", "adamw_fused", "adam")
FLOAT = torch.float32


def _weights(t):
    """Fixed weights shaped like |t| for a loss (t * w).sum(): a gradient with
    some structure, the same on every device."""
    n = t.numel()
    w = torch.cos(torch.arange(n, dtype=torch.float64) * 0.7).to(t.dtype)
    return w.reshape(t.shape).to(t.device)


_NS = {"torch": torch, "F": F, "math": math, "_w": _weights}
_FNS = {}


def _fn(src, n):
    """The instruction |src| over n operands as a function (cached)."""
    return _fn_named(src, n, ", ".join(f"a{i}" for i in range(n)))


class Refused(Exception):
    """The instruction raised; carries the exception."""

    def __init__(self, exc):
        super().__init__(repr(exc))
        self.exc = exc


class Env:
    """One device's run of a program: tensors by id, leaf parameters, the
    optimizer (made at its first step)."""

    def __init__(self, device, double=False):
        self.device = device
        self.double = double
        self.t = {}
        self.params = []
        self.opt = None
        self.opt_kind = None

    def float_dtype(self):
        return torch.float64 if self.double else FLOAT

    def new(self, ins):
        g = torch.Generator().manual_seed(ins["seed"])
        shape = ins["shape"]
        if ins["dtype"] == "float":
            x = torch.randn(shape, generator=g, dtype=torch.float64) * ins.get("scale", 1.0)
            x = x.to(FLOAT).to(self.float_dtype())  # the float64 run starts from the same float32 values
        elif ins["dtype"] == "int":
            x = torch.randint(ins.get("low", 0), ins["high"], shape, generator=g)
        else:
            x = torch.rand(shape, generator=g) < 0.5
        if ins.get("transposed"):  # stored the other way round: a transposed view of a contiguous tensor
            x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        x = x.to(self.device)
        if ins.get("grad"):
            x.requires_grad_()
            self.params.append(x)
        return x

    def optimizer(self, kind):
        if self.opt is None:
            params = [p for p in self.params]
            if kind == "sgd":
                self.opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, foreach=False)
            elif kind == "sgd_foreach":
                self.opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, foreach=True)
            elif kind == "adamw_foreach":
                self.opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=True)
            elif kind == "adamw_fused":
                self.opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, fused=True)
            else:
                self.opt = torch.optim.Adam(params, lr=1e-2, foreach=False)
        return self.opt

    def opt_state(self):
        """The optimizer's state tensors, in parameter order: [(name, tensor)]."""
        if self.opt is None:
            return []
        return [(k, v) for p in self.params for k, v in sorted(self.opt.state.get(p, {}).items())
                if isinstance(v, torch.Tensor)]

    def step_inputs(self):
        """Copies of the gradients and optimizer state a step reads."""
        return ([None if p.grad is None else p.grad.detach().cpu().clone() for p in self.params],
                [v.detach().cpu().clone() for _, v in self.opt_state()])

    def take_step_inputs(self, inputs):
        """Another run's step_inputs (already compared with this run's): a
        step is tested on the same inputs. Adam moves an element by about lr
        times the sign of its gradient, so rounding of a gradient near zero
        would otherwise become a difference of lr."""
        grads, state = inputs
        for p, g in zip(self.params, grads):
            p.grad = None if g is None else g.to(p.dtype).to(p.device)
        for (_, mine), theirs in zip(self.opt_state(), state):
            with torch.no_grad():
                mine.copy_(theirs.to(mine.dtype))

    def run(self, ins, random_values=None):
        """Runs one instruction; raises Refused if it raised."""
        kind = ins["k"]
        try:
            if kind == "new":
                self.t[ins["outs"][0]] = self.new(ins)
                return None
            if kind == "free":
                for i in ins["ins"]:
                    self.t.pop(i, None)
                return None
            if kind == "step":
                opt = self.optimizer(ins["opt"])
                opt.step()
                return None
            if kind == "zero_grad":
                for p in self.params:
                    p.grad = None
                return None
            args = [self.t[i] for i in ins["ins"]]
            if kind == "random":
                return self.run_random(ins, args, random_values)
            fn = _fn(ins["src"], len(args))
            # A write into its first argument that may be refused: PyTorch's
            # CPU kernel checks each index as it writes (t[idx] = -0.5 wrote
            # the elements before the one out of range, seed 60004); torchtpu
            # writes nothing, as a refused call should. The CPU run is put
            # back as it was, so that the two compare: its values only, as
            # the refused write left its version (tpu's is not bumped).
            before = args[0].detach().clone() if ins.get("undo") and self.device == "cpu" else None
            try:
                if ins.get("nograd"):
                    with torch.no_grad():
                        r = fn(*args)
                else:
                    r = fn(*args)
            except Exception:
                if before is not None:
                    with torch.autograd._unsafe_preserve_version_counter(args[0]):
                        args[0].detach().copy_(before)
                raise
            self.bind(ins, r)
            return None
        except Exception as e:  # noqa: BLE001 - compared with the other device's
            raise Refused(e) from e

    def bind(self, ins, r):
        outs = ins.get("outs", [])
        if len(outs) == 1:
            self.t[outs[0]] = r
        elif outs:
            for o, v in zip(outs, r):
                self.t[o] = v

    def run_random(self, ins, args, values):
        """tpu draws twice under the instruction's seed (the draws must
        repeat: once on a copy, once for real); the CPU runs take tpu's
        values (the streams differ by design)."""
        fn = _random_fn(ins["src"], len(args))
        if values is None:
            copy = [args[0].detach().clone()] if args else []
            first = fn(torch.Generator(device=self.device).manual_seed(ins["seed"]), self.device, *copy)
            r = fn(torch.Generator(device=self.device).manual_seed(ins["seed"]), self.device, *args)
            first, vals = (copy[0], args[0]) if args else (first, r)
            vals = vals.detach().cpu()
            if not torch.equal(first.detach().cpu(), vals):
                raise AssertionError("a random op drew other numbers under the same seed")
            if not args:
                self.t[ins["outs"][0]] = r
            return vals
        if args:  # in place: the same values through the same view
            with torch.no_grad():
                args[0].copy_(values.to(args[0].dtype))
        else:
            self.t[ins["outs"][0]] = values.to(self.float_dtype() if values.is_floating_point() else values.dtype)
        return values


def _random_fn(src, n):
    return _fn_named(src, n, "G, DEV" + "".join(f", a{i}" for i in range(n)))


def _fn_named(src, n, params):
    key = (src, n, params)
    f = _FNS.get(key)
    if f is None:
        f = _FNS[key] = eval(f"lambda {params}: " + src.format(*[f"a{i}" for i in range(n)]), _NS)  # noqa: S307
    return f


class Failure(Exception):
    def __init__(self, kind, step, detail):
        super().__init__(f"{kind} at instruction {step}: {detail}")
        self.kind, self.step, self.detail = kind, step, detail


def _block_function(block):
    """The instructions of |block| as one function of the tensors they read
    from outside it (|inputs|), returning every tensor they make (|made|)."""
    inputs, made = [], []
    for ins in block:
        inputs += [i for i in ins["ins"] if i not in inputs and i not in made]
        made += ins.get("outs", [])
    pos = {i: n for n, i in enumerate(inputs + made)}
    plan = [(_fn(ins["src"], len(ins["ins"])), tuple(pos[i] for i in ins["ins"]),
             tuple(pos[o] for o in ins.get("outs", []))) for ins in block]
    n_in = len(inputs)

    def block_fn(*args):
        vals = list(args) + [None] * len(made)
        for fn, reads, outs in plan:
            r = fn(*[vals[p] for p in reads])
            if len(outs) == 1:
                vals[outs[0]] = r
            elif outs:
                for o, v in zip(outs, r):
                    vals[o] = v
        return tuple(vals[n_in:])

    return block_fn, inputs, made


def _blocks(program):
    """Instruction index ranges run as one step: single instructions in
    eager mode; in compiled mode the runs of plain ops the generator marked
    as blocks."""
    instrs = program["instrs"]
    if program["mode"] == "eager":
        return [(i, i + 1) for i in range(len(instrs))]
    out, i = [], 0
    while i < len(instrs):
        b = instrs[i].get("blk")
        j = i + 1
        if b is not None:
            while j < len(instrs) and instrs[j].get("blk") == b:
                j += 1
        out.append((i, j))
        i = j
    return out


def _bits(t):
    """|t|'s elements as integers of their bits (NaN payloads, signed zeros)."""
    t = t.detach().cpu().contiguous().reshape(-1)
    if t.is_complex():
        t = torch.view_as_real(t).reshape(-1)
    if t.is_floating_point():
        t = t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _snapshot(env):
    """CPU copies of every live tensor, gradient and optimizer state (read
    after the whole program: fused eager records until then)."""
    out = {}
    for i, t in env.t.items():
        out[f"t{i}"] = t
        try:
            if isinstance(t, torch.Tensor) and t.is_leaf and t.grad is not None:
                out[f"t{i}.grad"] = t.grad
        except RuntimeError as e:  # a view autograd refuses to look at (its base changed): its message
            out[f"t{i}"] = str(e)
    for k, p in enumerate(env.params):
        out[f"param {k}.grad"] = p.grad
    for k, (name, v) in enumerate(env.opt_state()):
        out[f"optimizer state {k} {name}"] = v
    snap = {}
    for k, v in out.items():
        if not isinstance(v, torch.Tensor):
            snap[k] = (v, None)
            continue
        meta = (v.shape, v.dtype, v.stride(), v.storage_offset())
        try:
            snap[k] = (v.detach().cpu(), meta)
        except RuntimeError as e:  # an expanded view too large to copy out: its message
            snap[k] = (str(e).split("\n")[0], meta)
    return snap


def _run_fused(program, fault=None):
    """Fused eager against strict eager: the program runs on tpu in strict
    mode, then again with fused mode the process default (autograd's thread
    records too). Every instruction must raise the same error in both runs:
    fused raises a data check's error (an index out of range) at the next
    cut, so after an instruction strict refused, the fused run synchronizes
    (as a user who catches the error must) and takes what that raises as the
    instruction's. At the end (only then, so that the fused run records long
    traces) every live tensor, gradient and optimizer state must be equal bit
    for bit, strides included. |fault| perturbs the fused run's tensors."""
    instrs = program["instrs"]
    runs = {}
    try:
        for mode in ("strict", "fused"):
            torchtpu._C._set_default_eager_mode(torchtpu._eager_mode_number(mode))
            with torchtpu.eager_mode(mode):
                env, errs = Env("tpu"), []
                for n, ins in enumerate(instrs):
                    try:
                        env.run(ins)
                        if mode == "fused" and runs["strict"][0][n] is not None:
                            try:
                                torch.tpu.synchronize()
                            except Exception as e:  # noqa: BLE001 - compared with strict's below
                                raise Refused(e) from e
                        errs.append(None)
                    except Refused as e:
                        errs.append(e.exc)
                    except AssertionError as e:  # a random op that did not repeat
                        raise Failure("mismatch", n, f"{mode}: {e}") from e
                    if fault is not None and mode == "fused":
                        fault(n, ins, env.t)
                runs[mode] = errs, _snapshot(env)
    finally:
        torchtpu._C._set_default_eager_mode(torchtpu._default_eager_mode())
    (fused_errs, fused), (strict_errs, strict) = runs["fused"], runs["strict"]
    for n, (a, b) in enumerate(zip(fused_errs, strict_errs)):
        if (a is None) != (b is None) or (a is not None and not _same_error(a, b)):
            raise Failure("error", n, f"fused raised {a!r}, strict {b!r}")
    end = len(instrs) - 1
    for name, (want, meta) in strict.items():
        got, got_meta = fused.get(name, (None, None))
        if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
            if type(got) is not type(want) or (isinstance(want, str) and got != want):
                raise Failure("mismatch", end, f"{name}: {got!r} fused, {want!r} strict")
            continue
        if got_meta != meta:
            raise Failure("mismatch", end, f"{name}: {got_meta} fused, {meta} strict (shape, dtype, strides, offset)")
        g, w = _bits(got), _bits(want)
        if not torch.equal(g, w):
            k = int((g != w).nonzero()[0, 0])
            raise Failure("mismatch", end, f"{name}: element {k} (row-major) is "
                          f"{got.contiguous().reshape(-1)[k].item()!r} fused, {want.contiguous().reshape(-1)[k].item()!r} strict")


def _explained_by_inputs(program, start, tpu, ref, explained):
    """For a functional op of an eager program (no write, no autograd):
    runs it again from tpu's own inputs in float32 and float64 on the CPU.
    If tpu's outputs are as close to float64-on-their-inputs as the CPU's
    float32 is, the difference came from the inputs' rounding, which the op
    amplified (a sum of 65,536 products carries each product's rounding):
    records each output's error in |explained| and says True."""
    ins = program["instrs"][start]
    if program["mode"] != "eager" or ins["k"] != "op" or not ins.get("outs") or \
            "_(" in ins["src"] or "out=" in ins["src"] or "backward" in ins["src"]:
        return False
    try:
        pre, _, _ = run_program(program, stop=start)
        mine, wide = Env("cpu"), Env("cpu", double=True)
        for i in ins["ins"]:
            x = pre.t[i]
            if not isinstance(x, torch.Tensor):
                return False
            x = x.detach().cpu()
            mine.t[i] = x.clone()
            wide.t[i] = x.double() if x.is_floating_point() else x.clone()
        with torch.no_grad():
            mine.run(ins)
            wide.run(ins)
    except (Failure, Refused, Exception):  # noqa: BLE001 - then it is not explained
        return False
    for o in ins["outs"]:
        got, want, exact = tpu.t.get(o), mine.t.get(o), wide.t.get(o)
        if not isinstance(got, torch.Tensor) or _compare_tensor(f"t{o}", got, want, exact, device=tpu.device):
            return False
    for o in ins["outs"]:
        if tpu.t[o].is_floating_point() and isinstance(ref.t.get(o), torch.Tensor):
            explained[o] = (tpu.t[o].detach().cpu().double() - ref.t[o].detach().double()).abs()
    return True


@contextlib.contextmanager
def _cpu_as_the_device():
    """The CPU run flushes subnormal floats to zero where tpu's device does
    (torchtpu.device.flushes_denormals: TPUs, XLA's CPU plugin), so that a
    program with subnormal values (the generator makes some, scale 1e-38)
    is compared with what that platform defines; where tpu keeps them, the
    CPU keeps them too and a flushed value is a difference. PyTorch's flush
    mode is its calling thread's: the CPU run keeps to one thread."""
    if not torchtpu.device.flushes_denormals():
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(threads)


def run_program(program, fault=None, stop=None):
    """Runs |program| on tpu and on the CPU (float32, float64); raises
    Failure at the first disagreement. |fault| (tests only) perturbs tpu's
    tensors after an instruction: fault(index, instruction, tensors).
    |stop|: run the instructions before it and return the three runs.
    A fused program runs in fused eager against strict eager (_run_fused).
    Subnormals: as the platform defines them (_cpu_as_the_device)."""
    with _cpu_as_the_device():
        return _run_program(program, fault, stop)


def _run_program(program, fault, stop):
    if program["mode"] == "fused":
        return _run_fused(program, fault)

    torch._dynamo.reset()
    tpu, cpu, ref = Env("tpu"), Env("cpu"), Env("cpu", double=True)
    instrs = program["instrs"]
    compiled = {}
    slopes = {}
    explained = {}  # tensor -> the error its own op's arbitration accepted
    for start, end in _blocks(program):
        if stop is not None and start >= stop:
            return tpu, cpu, ref
        block = instrs[start:end]
        for ins in block:
            if ins.get("src") in _SLOPES and len(ins["ins"]) == 1 and len(ins.get("outs", [])) == 1:
                slopes[ins["outs"][0]] = (_SLOPES[ins["src"]], ins["ins"][0])
        if program["mode"] == "compiled" and block[0].get("blk") is not None:
            try:
                _run_compiled_block(program, block, start, tpu, cpu, ref, compiled)
            except Failure as f:
                if f.kind == "error" and f.detail.startswith("compiled on tpu") and _fails_upstream(program, end):
                    raise Failure("upstream", start, f.detail) from None
                raise
        else:
            ins = block[0]
            errs = {}
            values = None
            step_inputs = tpu.step_inputs() if ins["k"] == "step" else None
            for env in (tpu, cpu, ref):
                try:
                    if step_inputs is not None and env is not tpu:
                        env.take_step_inputs(step_inputs)
                    r = env.run(ins, values)
                    if ins["k"] == "random" and values is None:
                        values = r
                except Refused as e:
                    errs[env.device + ("64" if env.double else "")] = e.exc
                except AssertionError as e:  # a random op that did not repeat
                    raise Failure("mismatch", start, str(e)) from e
            if "cpu" in errs or "tpu" in errs:
                if "cpu" not in errs:
                    raise Failure("error", start, f"tpu raised {errs['tpu']!r} where the CPU did not")
                if "tpu" not in errs:
                    raise Failure("error", start, f"the CPU raised {errs['cpu']!r}, tpu did not")
                if not _same_error(errs["tpu"], errs["cpu"]):
                    raise Failure("error", start, f"tpu raised {errs['tpu']!r}, the CPU {errs['cpu']!r}")
        if fault is not None:
            fault(start, instrs[start], tpu.t)
        why = _compare_envs(tpu, cpu, ref, slopes, explained)
        if why and fault is None and _explained_by_inputs(program, start, tpu, ref, explained):
            why = _compare_envs(tpu, cpu, ref, slopes, explained)
        if why and program["mode"] == "compiled" and block[0].get("blk") is not None and _fails_upstream(program, end):
            raise Failure("upstream", start, f"aot_eager on the CPU differs too: {why}")
        if why:
            raise Failure("mismatch", start, why)


def _run_compiled_block(program, block, start, tpu, cpu, ref, compiled):
    fn, inputs, made = _block_function(block)
    # One compiled function per block of the same instructions over the same
    # wiring: a repeated block runs the programs compiled for the first one.
    names = {i: n for n, i in enumerate(inputs + made)}
    key = json.dumps([[ins["src"], [names[i] for i in ins["ins"]], [names[o] for o in ins.get("outs", [])]]
                      for ins in block])
    cfn = compiled.get(key)
    if cfn is None:
        cfn = compiled[key] = _compile(fn, "tpu", program)
    results = {}
    for env, f in ((tpu, cfn), (cpu, fn), (ref, fn)):
        try:
            results[env] = f(*[env.t[i] for i in inputs])
        except Exception as e:  # noqa: BLE001 - reported below
            results[env] = e
    if isinstance(results[cpu], Exception):  # the generator keeps refused ops out of compiled blocks
        raise Failure("error", start, f"the CPU refused a compiled block: {results[cpu]!r}")
    if isinstance(results[tpu], Exception):
        raise Failure("error", start, f"compiled on tpu: {results[tpu]!r}")
    for env in (tpu, cpu, ref):
        for i, v in zip(made, results[env]):
            env.t[i] = v


def _fails_upstream(program, end):
    """Whether PyTorch's own compile stack gets the same program wrong on the
    CPU: its blocks up to |end| compiled with backend="aot_eager" (no
    torchtpu) raise, or give values other than the CPU's eager ones."""
    aot, cpu, ref = Env("cpu"), Env("cpu"), Env("cpu", double=True)
    torch._dynamo.reset()
    try:
        for start, stop in _blocks(dict(program, instrs=program["instrs"][:end])):
            block = program["instrs"][start:stop]
            if block[0].get("blk") is None:
                values = _cpu_random(block[0], cpu) if block[0]["k"] == "random" else None
                for env in (aot, cpu, ref):
                    try:
                        env.run(block[0], values)
                    except Refused:
                        pass
                continue
            fn, inputs, made = _block_function(block)
            cfn = _compile(fn, "aot_eager", program)
            for env, f in ((aot, cfn), (cpu, fn), (ref, fn)):
                for i, v in zip(made, f(*[env.t[i] for i in inputs])):
                    env.t[i] = v
            if _compare_envs(aot, cpu, ref):
                return True
    except Exception:  # noqa: BLE001 - that is the answer
        return True
    finally:
        torch._dynamo.reset()
    return False


def _compile(fn, backend, program):
    """torch.compile as the program asks: static shapes, or PyTorch's
    default (a dim that changes becomes dynamic) for a quarter of them."""
    return torch.compile(fn, backend=backend, dynamic=None if program.get("dynamic") else False)


def _cpu_random(ins, env):
    g = torch.Generator().manual_seed(ins["seed"])
    args = [env.t[i].detach().clone() for i in ins["ins"]]
    r = _random_fn(ins["src"], len(args))(g, "cpu", *args)
    return (args[0] if args else r).detach()
