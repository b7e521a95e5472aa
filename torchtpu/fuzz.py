"""Differential fuzzer: random short programs run on the CPU and on tpu, every
live tensor and gradient compared after every step.

    python -m torchtpu.fuzz --minutes 30            # eager and compiled, until time is up
    python -m torchtpu.fuzz --seed 17 --mode eager  # one program, printed, then run
    python -m torchtpu.fuzz --replay failure.json   # a saved (shrunk) program

A program is a list of instructions over numbered tensors: fresh tensors
(some at the sizes where XLA's CPU plugin takes library paths: products with
k = 128..1024), views (transpose, slice, narrow, expand, permute, diagonal,
as_strided ...), elementwise ops out of place, in place and with out=,
products in every layout, reductions, indexing, _foreach_ ops, random ops on
a seeded generator, backward, optimizer steps, frees; and the patterns that
run a cached program again on changed data: a block of instructions repeated
after its inputs were mutated, a tensor freed and another made in its place,
training steps. Each instruction is Python source over its operands ("{0}
.add_({1}, alpha=0.5)"), so a program prints as the code it runs.

The program runs three times in lockstep: on tpu, on the CPU in float32 and
on the CPU in float64 (the referee). After every instruction (eager) or
block (compiled: runs of instructions become one function, compiled with
torch.compile(backend="tpu") on tpu and run eagerly on the CPU) every live
tensor and every gradient is compared: sizes, strides, dtype, values with
torch.testing's tolerances; float values that differ more pass when tpu's
are as close to the float64 run as the CPU's (summation order differs).
An instruction the CPU refuses must be refused on tpu with the same
exception type and message. Random ops are checked for reproducibility under
their seed and their values handed to the CPU runs (tpu's streams differ from
the CPU's by design).

Programs run in a worker process, so a crash or a hang costs one program and
is reported as such. A failing program is shrunk (instructions removed while
it fails the same way) and written as JSON (replayable) and as a listing.
"""
import argparse
import json
import math
import os
import random
import re
import select
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.nn.functional as F

MODES = ("eager", "compiled", "fused")
OPTIMIZERS = ("sgd", "sgd_foreach", "adamw_foreach", "adamw_fused", "adam")
FLOAT = torch.float32

# --- running programs -----------------------------------------------------------


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


def _first_line(exc):
    msg = str(exc).strip().splitlines()
    return msg[0] if msg else ""


def _same_error(a, b):
    """tpu refused as the CPU did: the same exception type and first line
    (device names aside)."""
    if type(a) is not type(b):
        return False
    # autograd names a tensor's type "tpuFloatType" where the CPU's is "torch.FloatTensor"
    norm = [re.sub(r"\btpu(\w+)Type\b", r"torch.\1Tensor", _first_line(e)) for e in (a, b)]
    norm = [m.replace("tpu:0", "cpu").replace("tpu", "cpu").replace("CPU", "cpu") for m in norm]
    return norm[0] == norm[1]


# Elementwise ops of one input and the most their output's error grows by
# per unit of their input's error (the largest slope).
_SLOPES = {"torch.tanh({0})": 1.0, "torch.sigmoid({0})": 0.25, "torch.sin({0})": 1.0, "torch.atan({0})": 1.0,
           "torch.erf({0})": 1.13, "F.gelu({0})": 1.13, "F.silu({0})": 1.1, "F.softplus({0})": 1.0,
           "F.relu({0})": 1.0, "torch.relu({0})": 1.0, "-{0}": 1.0, "{0}.abs()": 1.0, "{0} * 2": 2.0,
           "{0} * -0.5": 0.5, "{0} + 1.5": 1.0, "{0} - 3": 1.0, "{0}.clamp(-0.5, 0.7)": 1.0}


def _compare_tensor(name, got, want, ref, inherited=None, device="tpu"):
    """None if |got| (tpu's, or |device|'s) agrees with CPU's |want| (float64
    run's |ref| referee), else the reason. |inherited|: the error, element
    by element, that |got| may carry from its input (an elementwise op of
    slope at most L passes on L times its input's error)."""
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        if (got is None) != (want is None):
            return f"{name}: {type(got).__name__} on {device}, {type(want).__name__} on the CPU"
        return None
    if got.device.type != device:
        return f"{name}: on {got.device}, not {device}"
    if got.shape != want.shape:
        return f"{name}: shape {tuple(got.shape)} on {device}, {tuple(want.shape)} on the CPU"
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype} on {device}, {want.dtype} on the CPU"
    # a dim of size 1 may have any stride (is_contiguous() looks past it)
    if [st for st, n in zip(got.stride(), got.shape) if n > 1] != \
            [st for st, n in zip(want.stride(), want.shape) if n > 1] and got.numel() > 1:
        return f"{name}: strides {got.stride()} on {device}, {want.stride()} on the CPU"
    g = got.detach().cpu()
    w = want.detach()
    if not g.is_floating_point():
        if torch.equal(g, w):
            return None
        bad = (g != w).nonzero()[0].tolist()
        return f"{name}: differs at {bad}: {g[tuple(bad)].item()} on {device}, {w[tuple(bad)].item()} on the CPU"
    if torch.allclose(g, w, rtol=1.3e-6, atol=1e-5, equal_nan=True):
        return None
    r = ref.detach().double() if isinstance(ref, torch.Tensor) else None
    if r is not None and r.shape == g.shape:
        gd, wd = g.double(), w.double()
        same_nan = torch.equal(gd.isnan(), wd.isnan())
        finite = ~(gd.isnan() | wd.isnan() | r.isnan())
        e_t = (gd - r).abs()[finite]
        e_c = (wd - r).abs()[finite]
        tiny = 1e-6 * (r[finite].abs().max().item() if finite.any() else 0.0) + 1e-12
        inf_ok = torch.equal(gd.isinf() & finite, wd.isinf() & finite)
        e_t, e_c = e_t.nan_to_num(posinf=0), e_c.nan_to_num(posinf=0)
        if same_nan and inf_ok and e_t.numel():
            if inherited is not None and inherited.shape == g.shape:
                carried = inherited.double()[finite].nan_to_num(nan=0, posinf=0)
                ok = bool((e_t <= carried + 4 * e_c.max() + tiny).all()) and \
                    e_t.mean() <= carried.mean() + 2 * e_c.mean() + tiny
            else:
                # the mean's test is for a bias over many elements: for a few
                # (a sum's one number) it would be the max's on one sample
                ok = e_t.max() <= 4 * e_c.max() + tiny and (e_t.numel() < 16 or e_t.mean() <= 2 * e_c.mean() + tiny)
            if ok:
                return None
    diff = (g.double() - w.double()).abs().nan_to_num(nan=math.inf)
    idx = tuple(int(v) for v in torch.unravel_index(diff.argmax(), g.shape)) if g.dim() else ()
    return (f"{name}: max difference {diff.max().item():.3g} at {list(idx)}: "
            f"{g[idx].item():.8g} on {device}, {w[idx].item():.8g} on the CPU"
            + (f", {r[idx].item():.8g} in float64" if r is not None and r.shape == g.shape else ""))


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


def _carried_error(i, tpu, ref, slopes):
    """The error tensor |i| may carry from its input (None if unknown)."""
    if i not in slopes:
        return None
    slope, j = slopes[i]
    a, b = tpu.t.get(j), ref.t.get(j)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != tpu.t[i].shape:
        return None
    return slope * (a.detach().cpu().double() - b.detach().double()).abs()


def _compare_envs(tpu, cpu, ref, slopes=None, explained=None):
    """The first disagreement of |tpu|'s tensors, gradients and optimizer
    state with |cpu|'s, or None. |slopes|: {tensor: (slope, input)} of the
    elementwise ops that made them; |explained|: {tensor: error} accepted
    for tensors whose op was arbitrated on tpu's own inputs."""
    slopes = slopes or {}
    explained = explained or {}
    for i in sorted(cpu.t):
        if i not in tpu.t:
            return f"t{i}: missing on {tpu.device}"
        carried = explained.get(i)
        if carried is None:
            carried = _carried_error(i, tpu, ref, slopes)
        why = _compare_tensor(f"t{i}", tpu.t[i], cpu.t[i], ref.t.get(i), carried, tpu.device)
        if why:
            return why
    for n, (p, q, r) in enumerate(zip(tpu.params, cpu.params, ref.params)):
        why = _compare_tensor(f"param {n} .grad", p.grad, q.grad, r.grad, device=tpu.device)
        if why:
            return why
    for n, (a, b, c) in enumerate(zip(*(e.opt_state() for e in (tpu, cpu, ref)))):
        why = _compare_tensor(f"optimizer state {a[0]} of param {n}", a[1], b[1], c[1],
                              device=a[1].device.type)
        if why:
            return why
    return None


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
    import torchtpu

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


def run_program(program, fault=None, stop=None):
    """Runs |program| on tpu and on the CPU (float32, float64); raises
    Failure at the first disagreement. |fault| (tests only) perturbs tpu's
    tensors after an instruction: fault(index, instruction, tensors).
    |stop|: run the instructions before it and return the three runs.
    A fused program runs in fused eager against strict eager (_run_fused)."""
    import torchtpu  # noqa: F401 - the device

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


# --- generating programs -------------------------------------------------------------

_SMALL = [1, 2, 3, 4, 5, 7, 8, 16, 31]
_WIDE = [128, 256, 384, 512, 768, 1024]


class Gen:
    """Makes a program instruction by instruction, running each on a CPU
    shadow to know the tensors' shapes and to keep what the CPU accepts."""

    def __init__(self, seed, mode, steps):
        self.rng = random.Random(seed)
        self.seed, self.mode, self.steps = seed, mode, steps
        self.shadow = Env("cpu")
        self.instrs = []
        self.next_id = 0
        self.exact = {}  # id -> the value is bit-identical across devices (no rounding-order differences)
        self.opt = self.rng.choice(OPTIMIZERS)
        self.blk = 0
        self.in_block = 0

    # tensors
    def live(self, pred=lambda t: True):
        return [i for i, t in self.shadow.t.items() if isinstance(t, torch.Tensor) and _holds(pred, t)]

    def floats(self, pred=lambda t: True):
        return self.live(lambda t: t.is_floating_point() and pred(t))

    def pick(self, ids):
        return self.rng.choice(ids) if ids else None

    def fresh(self):
        self.next_id += 1
        return self.next_id - 1

    def emit(self, ins, exact=None, allow_error=False):
        """Runs |ins| on the shadow; keeps it if the CPU accepts it (or,
        sometimes in eager and fused modes, as an error both must raise)."""
        if self.mode == "compiled" and ins["k"] == "op" and not ins.get("nograd"):
            if self.in_block <= 0:
                self.blk += 1
                self.in_block = self.rng.randint(1, 6)
            ins["blk"] = self.blk
        try:
            self.shadow.run(ins, None if ins["k"] != "random" else self._shadow_random(ins))
        except Refused:
            for o in ins.get("outs", []):
                self.shadow.t.pop(o, None)
            if not (allow_error and self.mode in ("eager", "fused") and ins["k"] == "op" and self.rng.random() < 0.3):
                if "blk" in ins:
                    self.in_block = 0
                return False
            ins.pop("blk", None)
            self.instrs.append(ins)
            return False
        if "blk" in ins:
            self.in_block -= 1
        elif self.mode == "compiled":
            self.in_block = 0
        self.instrs.append(ins)
        for o in ins.get("outs", []):
            self.exact[o] = bool(exact)
        return True

    def _shadow_random(self, ins):
        """Numbers of the right kind for the shadow (the CPU's own draws)."""
        return _cpu_random(ins, self.shadow)

    def shape(self, rank=None, big=False):
        rank = self.rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4]) if rank is None else rank
        if big and rank <= 2:
            return [self.rng.choice(_WIDE + _SMALL) for _ in range(rank)]
        shape = [self.rng.choice(_SMALL) for _ in range(rank)]
        while math.prod(shape) > 1 << 16:
            shape[self.rng.randrange(rank)] = 2
        return shape

    def new(self, shape=None, dtype="float", grad=False, scale=1.0, transposed=False, **kw):
        o = self.fresh()
        ins = {"k": "new", "ins": [], "outs": [o], "shape": self.shape() if shape is None else list(shape),
               "dtype": dtype, "seed": self.rng.randrange(1 << 30)}
        if grad:
            ins["grad"] = True
        if scale != 1.0:
            ins["scale"] = scale
        if transposed and len(ins["shape"]) >= 2:
            ins["transposed"] = True
        ins.update(kw)
        self.emit(ins, exact=True)
        return o

    def op(self, src, ins, n_out=1, exact=False, nograd=False, allow_error=True, undo=False):
        outs = [self.fresh() for _ in range(n_out)]
        d = {"k": "op", "src": src, "ins": list(ins), "outs": outs}
        if nograd:
            d["nograd"] = True
        if undo:
            d["undo"] = True
        ok = self.emit(d, exact=exact, allow_error=allow_error)
        return outs if ok else None

    def taint(self, i):
        """|i| was written with rounding that may differ by device: it and
        every tensor sharing its storage are no longer exact."""
        ptr = self.shadow.t[i].untyped_storage().data_ptr()
        for j, t in self.shadow.t.items():
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr:
                self.exact[j] = False

    def is_exact(self, i):
        return self.exact.get(i, False) or not self.shadow.t[i].is_floating_point()

    def shape_of(self, i):
        return list(self.shadow.t[i].shape)

    # the instruction mix
    def generate(self):
        for _ in range(self.rng.randint(1, 3)):
            self.new(grad=True, shape=self.shape(rank=self.rng.choice([1, 2, 2])))
        for _ in range(self.rng.randint(1, 3)):
            self.new()
        makers = [
            (8, self.g_new), (14, self.g_view), (10, self.g_unary), (10, self.g_binary),
            (10, self.g_inplace), (4, self.g_out), (8, self.g_matmul), (8, self.g_reduce),
            (5, self.g_index), (3, self.g_foreach), (3, self.g_random), (4, self.g_backward),
            (3, self.g_step), (4, self.g_free), (5, self.g_repeat), (3, self.g_train), (3, self.g_shape_ops),
        ]
        weights = [w for w, _ in makers]
        while len(self.instrs) < self.steps:
            maker = self.rng.choices([m for _, m in makers], weights)[0]
            maker()
        program = {"seed": self.seed, "mode": self.mode, "instrs": self.instrs}
        if self.mode == "compiled" and self.rng.random() < 0.25:
            program["dynamic"] = True
        return program

    def g_new(self):
        o = self.new(grad=self.rng.random() < 0.15)
        if self.rng.random() < 0.2:
            self.new(dtype="int", high=self.rng.choice([3, 10, 1000]), shape=self.shape_of(o))

    def g_view(self):
        i = self.pick(self.live(lambda t: t.dim() > 0))
        if i is None:
            return self.g_new()
        t = self.shadow.t[i]
        r = self.rng
        d = t.dim()
        sz = list(t.shape)
        choices = []
        if d >= 2:
            a, b = r.sample(range(d), 2)
            choices += [f"{{0}}.transpose({a}, {b})", f"{{0}}.permute({r.sample(range(d), d)})",
                        f"{{0}}.diagonal({r.randint(-1, 1)}, {a}, {b})", f"{{0}}.movedim({a}, {b})",
                        f"{{0}}.flatten({min(a, b)}, {max(a, b)})"]
        if d == 2:
            choices.append("{0}.t()")
        k = r.randrange(d)
        n = sz[k]
        if n > 0:
            start = r.randrange(n)
            # A window of a few elements or of nearly all: an unfold's view has
            # about n * size elements, and the end of a program compares
            # every live tensor (a window of 61595 over 131072 was 17 GB).
            size = r.randint(1, min(n, 16))
            size = size if r.random() < 0.5 else n + 1 - size
            choices += [f"{{0}}.narrow({k}, {start}, {r.randint(0, n - start)})",
                        f"{{0}}[{':, ' * k}{start}::{r.randint(1, 3)}]", f"{{0}}.select({k}, {start})",
                        f"{{0}}.unfold({k}, {size}, {r.randint(1, 2)})"]
        exp = list(sz)
        ones = [j for j, s in enumerate(sz) if s == 1]
        if ones:
            exp[r.choice(ones)] = r.choice([2, 3, 5])
        choices += [f"{{0}}.expand({[r.choice([2, 3])] + exp})", f"{{0}}.expand({exp})",
                    f"{{0}}.unsqueeze({r.randint(0, d)})", "{0}.squeeze()",
                    f"{{0}}.view({[-1]})", f"{{0}}.reshape({list(reversed(sz))})",
                    f"{{0}}.view({sz[:k] + [1] + sz[k:]})"]
        numel = t.untyped_storage().nbytes() // t.element_size()
        if numel > 0:
            rank = r.randint(1, 3)
            size = [r.randint(1, 4) for _ in range(rank)]
            stride = [r.randint(0, 5) for _ in range(rank)]
            span = sum((s - 1) * st for s, st in zip(size, stride))
            if span < numel:
                off = r.randint(0, numel - 1 - span)
                choices.append(f"{{0}}.as_strided({size}, {stride}, {off})")
        self.op(r.choice(choices), [i], exact=self.is_exact(i))

    _EXACT_UNARY = ["-{0}", "{0}.abs()", "torch.relu({0})", "{0} * 2", "{0} * -0.5", "{0} + 1.5", "{0} - 3",
                    "{0}.clamp(-0.5, 0.7)", "torch.sqrt({0}.abs())", "{0} / ({0}.abs() + 1)",
                    "torch.floor({0})", "torch.sign({0})", "{0}.clone()", "{0}.contiguous()",
                    "torch.where({0} > 0, {0}, 0.25)", "({0} > 0.3)", "{0}.to(torch.int64)", "{0}.square()",
                    "torch.maximum({0}, {0} * 0.5)", "{0}.flip(0)", "{0}.roll(1, 0)"]
    _INEXACT_UNARY = ["torch.tanh({0})", "torch.sigmoid({0})", "torch.exp({0}.clamp(-8, 8))", "torch.sin({0})",
                      "torch.log({0}.abs() + 1)", "F.gelu({0})", "F.silu({0})", "torch.erf({0})",
                      "{0}.pow(3)", "torch.rsqrt({0}.abs() + 0.5)", "F.softplus({0})", "torch.atan({0})"]

    def g_unary(self):
        i = self.pick(self.floats())
        if i is None:
            return self.g_new()
        exact = self.is_exact(i)
        pool = self._EXACT_UNARY if exact else [s for s in self._EXACT_UNARY if not any(
            c in s for c in (">", "floor", "sign", "int64", "where"))]
        if self.rng.random() < 0.5:
            self.op(self.rng.choice(self._INEXACT_UNARY), [i])
        else:
            src = self.rng.choice(pool)
            self.op(src, [i], exact=exact and "{0} / (" not in src)

    def partner(self, i):
        """A tensor broadcastable with |i|: an existing one of its shape, or a new one."""
        shape = self.shape_of(i)
        same = [j for j in self.floats(lambda t: list(t.shape) == shape) if j != i]
        if same and self.rng.random() < 0.5:
            return self.pick(same)
        b = [s if self.rng.random() < 0.7 else 1 for s in shape]
        if b and self.rng.random() < 0.3:
            b = b[self.rng.randrange(len(b)):]
        return self.new(shape=b)

    def g_binary(self):
        i = self.pick(self.floats(lambda t: t.dim() > 0))
        if i is None:
            return self.g_new()
        j = self.partner(i)
        exact = self.is_exact(i) and self.is_exact(j)
        src, keep_exact = self.rng.choice([
            ("{0} + {1}", True), ("{0} - {1}", True), ("{0} * {1}", True), ("{0} / ({1}.abs() + 1)", False),
            ("torch.maximum({0}, {1})", True), ("torch.minimum({0}, {1})", True),
            ("torch.add({0}, {1}, alpha=0.5)", False), ("torch.lerp({0}, {1}, 0.3)", False),
            ("torch.addcmul({0}, {1}, {1}, value=0.5)", False),
            # atan2 and hypot away from (0, 0), where their gradients blow up
            # the inputs' rounding (seed 7008: a weight's gradient through hypot)
            ("torch.atan2({0}, {1}.abs() + 0.5)", False),
            ("torch.where({1} > 0, {0}, {1})", True), ("torch.hypot({0}, {1}.abs() + 0.5)", False),
            ("{0} + 2.5 * {1}", False), ("torch.cat([{0}, {0} * {1}], 0)", True)])
        if "where" in src and not self.is_exact(j):
            src = "torch.where({1}.abs() >= 0, {0}, {1})"
        self.op(src, [i, j], exact=exact and keep_exact)

    def g_inplace(self):
        i = self.pick(self.floats(lambda t: t.dim() > 0 and _writable(t)))
        if i is None:
            return self.g_new()
        t = self.shadow.t[i]
        leaf_param = _holds(_is_leaf_param, t)
        r = self.rng
        j = self.partner(i)
        k = r.randrange(t.dim())
        n = t.shape[k]
        idx = self.new(dtype="int", high=max(n, 1), shape=[r.randint(1, max(1, min(n, 6)))]) if n else None
        choices = [("{0}.mul_(%s)" % r.choice([0.9, -1.1, 0.5, 1.25]), [i]), ("{0}.add_({1})", [i, j]),
                   ("{0}.add_({1}, alpha=-0.25)", [i, j]), ("{0}.copy_({1})", [i, j]), ("{0}.zero_()", [i]),
                   ("{0}.fill_(%s)" % r.choice([0.5, -2.0, 3]), [i]), ("{0}.clamp_(-1, 1)", [i]),
                   ("{0}.masked_fill_({1} > 0.2, -0.75)", [i, j]), ("{0}.sub_({1}).div_(2)", [i, j]),
                   ("{0}.tanh_()", [i]), ("{0}.lerp_({1}, 0.25)", [i, j]), ("{0}.addcmul_({1}, {1}, value=-0.1)", [i, j]),
                   ("{0}.relu_()", [i]), ("{0}.neg_()", [i]), ("{0}.exp_().sub_(1)", [i])]
        if idx is not None:
            choices += [(f"{{0}}.index_fill_({k}, {{1}}, -1.5)", [i, idx]),
                        (f"{{0}}.index_add_({k}, {{1}}, {{0}}.index_select({k}, {{1}}) * 0.5)", [i, idx]),
                        (f"{{0}}.index_copy_({k}, {{1}}.unique(), {{0}}.index_select({k}, {{1}}.unique()) + 1)", [i, idx])]
        src, ins = r.choice(choices)
        nograd = leaf_param or r.random() < 0.2
        exact = all(self.is_exact(x) for x in ins) and not any(
            s in src for s in ("tanh", "lerp", "addcmul", "exp", "alpha", "index_add", "div"))
        outs = self.op(src, ins, exact=exact, nograd=nograd)
        if outs is not None and not exact:
            self.taint(i)

    def g_out(self):
        i = self.pick(self.floats(lambda t: t.dim() > 0))
        if i is None:
            return self.g_new()
        shape = self.shape_of(i)
        # not a tensor sharing the input's storage: a reduction's out= that
        # overlaps its input gives what the CPU's order of work leaves there
        ptr = self.shadow.t[i].untyped_storage().data_ptr()
        target = self.pick([j for j in self.floats(lambda t: list(t.shape) == shape and not t.requires_grad
                                                   and t.untyped_storage().data_ptr() != ptr and _writable(t))])
        if target is None or self.rng.random() < 0.3:
            target = self.new(shape=shape if self.rng.random() < 0.8 else [0])
        src = self.rng.choice(["torch.add({0}, {0}, out={1})", "torch.tanh({0}, out={1})",
                               "torch.mul({0}, 3, out={1})", "torch.abs({0}, out={1})",
                               "torch.sum({0}, -1, keepdim=True, out={1})", "torch.clamp({0}, 0, out={1})"])
        if self.op(src, [i, target], n_out=0) is not None:
            self.taint(target)

    def g_matmul(self):
        r = self.rng
        m = r.choice([1, 7, 64, 128, 256, 512, 1024])
        k = r.choice(_WIDE)
        n = r.choice([1, 16, 64, 128, 256, 512, 1024])
        while m * k * n > 1 << 28:
            m = max(1, m // 2)
        kind = r.choice(["mm", "matmul", "addmm", "einsum", "linear", "bmm", "baddbmm", "mv", "linear_param"])
        s = 1 / math.sqrt(k)
        ta, tb = r.random() < 0.4, r.random() < 0.4
        if kind in ("bmm", "baddbmm"):
            bsz = r.choice([2, 3])
            m, n = min(m, 256), min(n, 256)
            a = self.new(shape=[bsz, m, k], transposed=ta)
            b = self.new(shape=[bsz, k, n], scale=s, transposed=tb)
            self.op("torch.bmm({0}, {1})" if kind == "bmm" else
                    "torch.baddbmm({0}[:, :, :1].expand(-1, -1, %d), {0}, {1}, beta=0.5)" % n, [a, b])
            return
        if kind == "mv":
            a = self.new(shape=[m, k], transposed=ta)
            v = self.new(shape=[k], scale=s)
            self.op("torch.mv({0}, {1})", [a, v])
            return
        a = self.new(shape=[m, k], transposed=ta)
        if kind in ("linear", "linear_param"):
            w = self.new(shape=[n, k], scale=s, transposed=tb, grad=kind == "linear_param")
            bias = self.new(shape=[n]) if r.random() < 0.5 else None
            self.op("F.linear({0}, {1}, {2})" if bias is not None else "F.linear({0}, {1})",
                    [a, w] + ([bias] if bias is not None else []))
            return
        b = self.new(shape=[k, n], scale=s, transposed=tb, grad=r.random() < 0.2)
        src = {"mm": "torch.mm({0}, {1})", "matmul": "{0} @ {1}", "einsum": "torch.einsum('ik,kj->ij', {0}, {1})",
               "addmm": "torch.addmm({0}[:1, :1].expand(%d, %d), {0}, {1})" % (m, n)}[kind]
        if r.random() < 0.3:  # an operand that is a view of a larger tensor
            src = src.replace("{0}, {1})", "{0}, {1}.narrow(1, 0, %d))" % max(1, n // 2))
        self.op(src, [a, b])

    def nonempty_and_dim(self):
        """A non-empty float tensor with a dim of it, (None, None, None) if
        there is none."""
        i = self.pick(self.floats(lambda t: t.dim() > 0 and t.numel() > 0))
        if i is None:
            return None, None, None
        t = self.shadow.t[i]
        return i, t, self.rng.randrange(t.dim())

    def g_reduce(self):
        i, t, d = self.nonempty_and_dim()
        if i is None:
            return self.g_new()
        r = self.rng
        keep = r.random() < 0.5
        dims = sorted(r.sample(range(t.dim()), r.randint(1, t.dim())))
        exact = self.is_exact(i)
        choices = [(f"{{0}}.sum({dims}, keepdim={keep})", False), (f"{{0}}.mean({d}, keepdim={keep})", False),
                   (f"{{0}}.amax({dims}, keepdim={keep})", exact), (f"{{0}}.amin({d})", exact),
                   (f"{{0}}.var({d}, correction={r.randint(0, 1)})", False), (f"{{0}}.std({dims})", False),
                   (f"{{0}}.norm(dim={d})", False), (f"torch.logsumexp({{0}}, {d})", False),
                   (f"torch.softmax({{0}}, {d})", False), (f"F.log_softmax({{0}}, {d})", False),
                   (f"{{0}}.cumsum({d})", False), ("{0}.sum()", False), (f"{{0}}.max({d})[0]", exact),
                   (f"F.layer_norm({{0}}, {list(t.shape[-1:])})", False), (f"{{0}}.norm(p=1, dim={d})", False)]
        if t.numel() <= 64:
            choices.append((f"{{0}}.prod({d})", False))
        if exact:
            choices += [(f"{{0}}.argmax({d})", True), (f"{{0}}.argmin()", True),
                        (f"{{0}}.sort({d}, stable=True)[1]", True), (f"{{0}}.sort({d}, stable=True)[0]", True),
                        (f"{{0}}.topk(1, {d})[0]", True), ("({0} > 0).sum()", True), ("({0} > 0).any()", True)]
        src, ex = r.choice(choices)
        # Which of tied elements topk picks is PyTorch's to choose (the CPU's
        # nth_element picked the 6th of 7 equal values, seed 31020): its
        # gradient is not compared.
        self.op(src, [i], exact=ex, nograd=".topk(" in src)

    def g_index(self):
        i, t, d = self.nonempty_and_dim()
        if i is None:
            return self.g_new()
        r = self.rng
        n = t.shape[d]
        # Now and then an index out of range: a data check's error, which
        # eager raises at the call and fused eager at the next cut.
        high = 2 * n + 1 if r.random() < 0.3 else n
        idx = self.new(dtype="int", high=high, shape=[r.randint(1, 8)])
        exact = self.is_exact(i)
        choices = [(f"{{0}}.index_select({d}, {{1}})", [i, idx], exact), (f"{{0}}[{':, ' * d}{{1}}]", [i, idx], exact),
                   ("torch.take({0}, {1})", [i, idx], exact)]
        if exact:
            choices += [("{0}[{0} > 0]", [i], True), ("({0} > 0.5).nonzero()", [i], True),
                        ("torch.masked_select({0}, {0} < 0)", [i], True)]
        if t.dim() == 2 or t.dim() == 1:
            g = self.new(dtype="int", high=n, shape=self.shape_of(i))
            choices += [(f"torch.gather({{0}}, {d}, {{1}})", [i, g], exact),
                        (f"{{0}}.scatter_add({d}, {{1}}, {{0}})", [i, g], False)]
        if not _holds(_is_leaf_param, t):
            i0 = self.new(dtype="int", high=t.shape[0], shape=[r.randint(1, 8)])
            choices += [(f"{{0}}.__setitem__(({'slice(None), ' * d}{{1}}), -0.5)", [i, idx], exact),
                        ("{0}.index_put_(({1},), {0}[{1}] * 0.5, accumulate=True)", [i, i0], False)]
        src, ins, ex = r.choice(choices)
        n_out = 0 if "__setitem__" in src else 1
        outs = self.op(src, ins, n_out=n_out, exact=ex, undo="__setitem__" in src and high > n)
        if outs is not None and ("__setitem__" in src or "index_put_" in src) and not ex:
            self.taint(i)

    def g_foreach(self):
        r = self.rng
        # no item that overlaps itself: the CPU's per-item kernel raises at
        # that item after writing the ones before it, tpu writes none
        pool = self.floats(lambda t: not _is_leaf_param(t) and t.dim() > 0
                           and torch._debug_has_internal_overlap(t) == 0)
        if len(pool) < 2:
            return self.g_new()
        xs = r.sample(pool, min(len(pool), r.randint(2, 5)))
        ys = [self.new(shape=self.shape_of(x)) for x in xs]
        nx = len(xs)
        lx = "[" + ", ".join(f"{{{j}}}" for j in range(nx)) + "]"
        ly = "[" + ", ".join(f"{{{j + nx}}}" for j in range(nx)) + "]"
        src, n_out = r.choice([
            (f"torch._foreach_add_({lx}, {ly}, alpha=0.5)", 0), (f"torch._foreach_mul_({lx}, 0.75)", 0),
            (f"torch._foreach_addcmul_({lx}, {ly}, {ly}, value=0.1)", 0), (f"torch._foreach_lerp_({lx}, {ly}, 0.2)", 0),
            (f"torch._foreach_mul_({lx}, [%s])" % ", ".join(str(round(r.uniform(-2, 2), 3)) for _ in xs), 0),
            (f"torch._foreach_sqrt([x.abs() for x in {lx}])", nx), (f"torch._foreach_add({lx}, {ly})", nx),
            (f"torch._foreach_norm({lx})", nx)])
        outs = self.op(src, xs + ys, n_out=n_out, exact=False)
        if outs is not None and n_out == 0:
            for x in xs:
                self.taint(x)

    def g_random(self):
        r = self.rng
        seed = r.randrange(1 << 30)
        shape = self.shape()
        if r.random() < 0.5:
            src = r.choice([f"torch.randn({shape}, generator=G, device=DEV)",
                            f"torch.rand({shape}, generator=G, device=DEV)",
                            f"torch.randint(0, 7, {shape}, generator=G, device=DEV)",
                            f"torch.randperm({r.randint(1, 50)}, generator=G, device=DEV)"])
            o = self.fresh()
            self.emit({"k": "random", "src": src, "ins": [], "outs": [o], "seed": seed}, exact=True)
            return
        i = self.pick(self.floats(lambda t: not t.requires_grad and t.dim() > 0 and _writable(t)))
        if i is None:
            return self.g_new()
        src = r.choice(["{0}.normal_(generator=G)", "{0}.uniform_(-1, 1, generator=G)",
                        "{0}.bernoulli_(0.3, generator=G)", "{0}.exponential_(generator=G)"])
        if self.emit({"k": "random", "src": src, "ins": [i], "outs": [], "seed": seed}):
            self.taint(i)

    def g_backward(self):
        pool = self.floats(lambda t: t.requires_grad and t.numel() > 0)
        i = self.pick(pool)
        if i is None:
            return self.g_train()
        self.op("({0} * _w({0})).sum().backward()", [i], n_out=0)

    def g_step(self):
        if not self.shadow.params:
            return self.g_new()
        if self.rng.random() < 0.25:
            self.emit({"k": "zero_grad", "ins": []})
        self.emit({"k": "step", "ins": [], "opt": self.opt})
        self.refresh_exact_params()

    def refresh_exact_params(self):
        for i, t in list(self.shadow.t.items()):
            if isinstance(t, torch.Tensor) and any(t is p for p in self.shadow.params):
                self.taint(i)

    def g_free(self):
        i = self.pick([j for j in self.live() if not any(self.shadow.t[j] is p for p in self.shadow.params)])
        if i is None:
            return self.g_new()
        shape, dtype = self.shape_of(i), self.shadow.t[i].dtype
        self.emit({"k": "free", "ins": [i]})
        self.exact.pop(i, None)
        if self.rng.random() < 0.6:  # another tensor where it was: the allocator may hand the memory back
            self.new(shape=shape, dtype="float" if dtype.is_floating_point else "int", high=5)

    def g_repeat(self):
        """The last few instructions again on the (changed) tensors they read:
        the same programs run on new values."""
        n = self.rng.randint(2, 6)
        window = [ins for ins in self.instrs[-n:] if ins["k"] in ("op", "random", "new", "step")]
        if not window:
            return self.g_new()
        mapping = {}
        for ins in window:
            c = json.loads(json.dumps(ins))
            c.pop("blk", None)
            c["ins"] = [mapping.get(i, i) for i in c["ins"]]
            if any(i not in self.shadow.t for i in c["ins"]):
                return
            outs = [self.fresh() for _ in c.get("outs", [])]
            for a, b in zip(ins.get("outs", []), outs):
                mapping[a] = b
            c["outs"] = outs
            if c["k"] == "new":
                if c.get("grad"):
                    continue
                c["seed"] = self.rng.randrange(1 << 30)
            exact = all(self.exact.get(o, False) for o in ins.get("outs", [])) if ins.get("outs") else None
            self.emit(c, exact=exact)
            if c["k"] == "step":
                self.refresh_exact_params()

    def g_train(self):
        """A few steps of a linear layer's training: forward, backward,
        optimizer step (in-place updates of a weight the next product reads)."""
        r = self.rng
        k, n, m = r.choice([128, 256, 512, 1024]), r.choice([64, 128, 256, 512]), r.choice([16, 64, 256, 512])
        w = self.new(shape=[n, k] if r.random() < 0.5 else [k, n], scale=1 / math.sqrt(k), grad=True)
        wt = self.shape_of(w) == [n, k]
        x = self.new(shape=[m, k])
        self.opt_params_changed = True
        for _ in range(r.randint(2, 4)):
            y = self.op("F.linear({0}, {1})" if wt else "{0} @ {1}", [x, w])
            if y is None:
                return
            h = self.op(r.choice(["torch.tanh({0})", "F.relu({0})", "F.gelu({0})"]), y)
            if h is None:
                return
            self.op("({0} * _w({0})).sum().backward()", h, n_out=0)
            self.emit({"k": "step", "ins": [], "opt": self.opt})
            self.refresh_exact_params()
            if r.random() < 0.5:
                self.emit({"k": "zero_grad", "ins": []})

    def g_shape_ops(self):
        i = self.pick(self.floats(lambda t: t.dim() > 0))
        if i is None:
            return self.g_new()
        t = self.shadow.t[i]
        r = self.rng
        d = r.randrange(t.dim())
        exact = self.is_exact(i)
        choices = [(f"torch.stack([{{0}}, {{0}} * 2], {r.randint(0, t.dim())})", 1),
                   (f"{{0}}.repeat({[r.randint(1, 2) for _ in range(t.dim())]})", 1),
                   (f"torch.tril({{0}}, {r.randint(-1, 1)})" if t.dim() >= 2 else "{0}.clone()", 1),
                   (f"F.pad({{0}}, [1, 2])", 1), (f"{{0}}.chunk(2, {d})[0]", 1),
                   (f"{{0}}.split(1, {d})[-1]", 1), (f"{{0}}.flip({d})", 1),
                   (f"{{0}}.roll({r.randint(-3, 3)}, {d})", 1), ("{0}.T.contiguous()" if t.dim() == 2 else "{0}.t()", 1)]
        src, n_out = r.choice(choices)
        self.op(src, [i], n_out=n_out, exact=exact)


def _is_leaf_param(t):
    return t.requires_grad and t.is_leaf


def _holds(pred, t):
    """pred(t), False where asking raises (a split's output view whose base
    changed in place refuses even .is_leaf)."""
    try:
        return bool(pred(t))
    except RuntimeError:
        return False


def _writable(t):
    """Whether a write to |t| has one answer: not a view whose elements may
    share memory in a way PyTorch cannot tell (an unfold with a step below
    its size, some as_strided views). PyTorch refuses a view it knows
    overlaps (an expanded one) and writes one it cannot tell about in its
    kernel's order, a result no other order reproduces."""
    return torch._debug_has_internal_overlap(t) != 2


def generate(seed, mode="eager", steps=40):
    """The program of |seed| (deterministic). A fused program is the eager
    program of the same seed."""
    if mode == "fused":
        return dict(Gen(seed, "eager", steps).generate(), mode="fused")
    return Gen(seed, mode, steps).generate()


# --- listing ------------------------------------------------------------------------


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


# --- shrinking ------------------------------------------------------------------------


def _dependents(instrs, drop):
    """Indices to drop with |drop|: every instruction reading a tensor that a
    dropped one makes."""
    gone_ids = set()
    out = set(drop)
    for n, ins in enumerate(instrs):
        if n in out or any(i in gone_ids for i in ins.get("ins", [])):
            out.add(n)
            gone_ids.update(ins.get("outs", []))
    return out


def shrink(program, fails, budget_s=180.0, log=None):
    """Removes instructions while fails(candidate) still says True: chunks
    first, then single instructions."""
    t0 = time.monotonic()
    best = program
    chunk = max(1, len(best["instrs"]) // 2)
    while chunk >= 1 and time.monotonic() - t0 < budget_s:
        changed = False
        start = len(best["instrs"]) - chunk
        while start >= 0 and time.monotonic() - t0 < budget_s:
            instrs = best["instrs"]
            drop = _dependents(instrs, range(start, min(start + chunk, len(instrs))))
            cand = dict(best, instrs=[ins for n, ins in enumerate(instrs) if n not in drop])
            if cand["instrs"] and fails(cand):
                best = cand
                changed = True
                if log:
                    log(f"shrunk to {len(best['instrs'])} instructions")
            start -= chunk
        if not changed:
            chunk //= 2
    return best


# --- worker and driver ------------------------------------------------------------------


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
        self.proc = subprocess.Popen([sys.executable, "-m", "torchtpu.fuzz", "--worker"], stdin=subprocess.PIPE,
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
    ap = argparse.ArgumentParser(prog="python -m torchtpu.fuzz", description=__doc__.split("\n\n")[0])
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
