"""One task of the OpInfo and ModuleInfo sweeps (python -m torchtpu.coverage):
an op's samples in one dtype and mode (eager or compiled, with gradients),
its error inputs, or a module's inputs, on tpu against the CPU, in the
sweep's worker process."""
import contextlib
import itertools
import os

from .referee import Mismatch, compare, compare_grads

DTYPES = ("float32", "bfloat16", "int64", "bool")
BF16_TOL = {"rtol": 1.6e-2, "atol": 1e-2}
MODULE_MODES = ("module", "module-compiled")


def _load_ops():
    os.environ.setdefault("PYTORCH_TEST_WITH_SLOW", "0")
    from torch.testing._internal.common_methods_invocations import op_db
    return {(op.name + ("." + op.variant_test_name if op.variant_test_name else "")): op for op in op_db}


def _load_modules():
    from torch.testing._internal.common_modules import module_db
    return {m.name: m for m in module_db}



def _tensors(x):
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _shape_of(x):
    import torch
    if isinstance(x, torch.Tensor):
        return ("t", x.dtype, tuple(x.shape))
    if isinstance(x, (list, tuple)):
        return tuple(_shape_of(v) for v in x)
    return type(x).__name__


def _on_tpu(fn, backward=False):
    """Runs |fn|, the tpu side of a comparison: (its result, None), or
    (None, (status, reason)) if it raised or ran anything on the CPU fallback."""
    import torchtpu
    prefix = "grad-" if backward else ""
    torchtpu.reset_stats()
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001
        return None, (prefix + "error", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    fallbacks = torchtpu.stats()["fallbacks"]
    if fallbacks:
        return None, (prefix + "fallback", ("backward runs" if backward else "runs") + " on the CPU: "
                      + ", ".join(sorted(fallbacks)))
    return out, None



class _SeededWatch:
    """A dispatch mode that notes whether an ATen op tagged
    nondeterministic_seeded ran: the op draws random numbers. (OpInfos of
    random ops pin the seed inside the op, so comparing runs under two seeds
    does not tell.)"""

    def __enter__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        watch = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if torch.Tag.nondeterministic_seeded in func.tags:
                    watch.seeded = True
                return func(*args, **(kwargs or {}))
        self.seeded = False
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        return False


def _pinned_to_cpu(op, dtype, n):
    """Per sample, the positions (in SampleInput.transform's order) of the
    tensors the OpInfo makes on the CPU whatever device it is asked for, as
    tensor_split's indices, which PyTorch requires there: found by asking
    for the samples on the meta device."""
    import torch
    try:
        metas = list(op.sample_inputs("meta", dtype))
    except Exception:  # noqa: BLE001 - a generator meta tensors break pins nothing
        metas = []
    if len(metas) != n:
        return [set()] * n
    pinned = []
    for sample in metas:
        flags = []
        sample.transform(lambda t: flags.append(isinstance(t, torch.Tensor) and t.device.type == "cpu") or t)
        pinned.append({i for i, f in enumerate(flags) if f})
    return pinned


@contextlib.contextmanager
def _rng_unfrozen():
    """Compiled runs go without wrapper_set_seed's freeze_rng_state: dynamo
    cannot trace its no_dispatch(), and it only restores the RNG state after
    the op."""
    import torch.testing._utils as testing_utils
    saved = testing_utils.freeze_rng_state
    testing_utils.freeze_rng_state = contextlib.nullcontext
    try:
        yield
    finally:
        testing_utils.freeze_rng_state = saved


def _run_sample(op, sample, dtype, compiled, grad, progress, pinned=frozenset()):
    """One sample on CPU and tpu; returns None or (status, reason)."""
    import torch

    def call(s):
        return op(s.input, *s.args, **s.kwargs)

    def to(device):
        seen = itertools.count()

        def move(t):  # SampleInput.transform also passes dtypes through here
            if next(seen) in pinned or not isinstance(t, torch.Tensor):
                return t
            if t._base is not None and t.layout == torch.strided and not t.is_conj() and not t.is_neg():
                # a view keeps its storage around it: ops such as as_strided read past the view
                whole = t.detach().new_empty(0).set_(t.untyped_storage())
                y = whole.to(device).as_strided(t.shape, t.stride(), t.storage_offset())
            else:
                y = t.detach().to(device)
            return y.requires_grad_(t.requires_grad) if t.requires_grad else y
        return move

    torch.manual_seed(0)
    try:
        with _SeededWatch() as watch:
            want = call(sample)
    except Exception:  # noqa: BLE001 - a sample CPU rejects says nothing about tpu
        return None
    random = op.has_nondeterministic_output or watch.seeded
    ref = None
    if dtype in (torch.float32, torch.bfloat16, torch.complex64) and not random:
        def wide(t):
            if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
                return t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
            return t
        try:
            ref = call(sample.transform(wide))
        except Exception:  # noqa: BLE001 - float64 is only a referee
            ref = None
    tpu_sample = sample.transform(to("tpu"))
    fn = call
    if compiled:
        import torch._dynamo
        torch._dynamo.reset()
        fn = torch.compile(lambda s: call(s), backend="tpu", fullgraph=False, dynamic=False)
    def run():
        with _rng_unfrozen() if compiled else contextlib.nullcontext():
            return fn(tpu_sample)
    got, failed = _on_tpu(run)
    if failed:
        return failed
    tol = BF16_TOL if dtype == torch.bfloat16 else {}
    try:
        if random:
            if _shape_of(got) != _shape_of(want):
                raise Mismatch(f"random op: {_shape_of(got)} vs CPU's {_shape_of(want)}")
        else:
            _compare_outputs(sample, got, want, ref, tol)
    except Mismatch as e:
        return "mismatch", str(e)[:500]
    if grad and not random:
        return _run_grad(op, sample, tpu_sample, want, got, call)
    return None


def _compare_outputs(sample, got, want, ref, tol):
    """compare, and where the outputs differ, again through the sample's
    output_process_fn_grad, as PyTorch's own device-vs-CPU test
    (test_compare_cpu) compares them: for outputs that are not unique (the
    signs of singular and eigen vectors) it makes valid answers comparable.
    Raises the first comparison's Mismatch if the second differs too."""
    try:
        compare(got, want, ref, tol)
    except Mismatch as raw:
        process = sample.output_process_fn_grad
        try:
            compare(process(got), process(want), None if ref is None else process(ref), tol)
        except Exception:  # noqa: BLE001 - a mismatch either way: the first one says more
            raise raw from None


def _run_grad(op, sample, tpu_sample, want, got, call):
    """Gradients of the outputs as PyTorch's gradient tests take them (through
    the sample's output_process_fn_grad), tpu against CPU."""
    import torch
    want, got = sample.output_process_fn_grad(want), sample.output_process_fn_grad(got)
    ins_cpu = [t for t in _tensors([sample.input, sample.args, list(sample.kwargs.values())]) if t.requires_grad]
    ins_tpu = [t for t in _tensors([tpu_sample.input, tpu_sample.args, list(tpu_sample.kwargs.values())])
               if t.requires_grad]
    outs_cpu = [t for t in _tensors(want) if t.requires_grad and t.is_floating_point()]
    outs_tpu = [t for t in _tensors(got) if t.requires_grad and t.is_floating_point()]
    if not ins_cpu or not outs_cpu or len(outs_cpu) != len(outs_tpu):
        return None
    gen = torch.Generator().manual_seed(2)
    grads = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in outs_cpu]
    try:
        g_cpu = torch.autograd.grad(outs_cpu, ins_cpu, grads, allow_unused=True)
    except Exception:  # noqa: BLE001 - CPU has no gradient here either
        return None
    g_tpu, failed = _on_tpu(lambda: torch.autograd.grad(
        outs_tpu, ins_tpu, [g.to(o.device) for g, o in zip(grads, outs_tpu)], allow_unused=True), backward=True)
    if failed:
        return failed
    return compare_grads(g_tpu, g_cpu, _grad_reference(sample, call, grads))


def _grad_reference(sample, call, grads):
    """The same gradients computed in float64 on the CPU (None if that fails)."""
    import torch

    def double(t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        return t.detach().double().requires_grad_(t.requires_grad)
    try:
        s64 = sample.transform(double)
        ins = [t for t in _tensors([s64.input, s64.args, list(s64.kwargs.values())]) if t.requires_grad]
        outs = [t for t in _tensors(s64.output_process_fn_grad(call(s64)))
                if t.requires_grad and t.is_floating_point()]
        if len(outs) != len(grads):
            return None
        return torch.autograd.grad(outs, ins, [g.double() for g in grads], allow_unused=True)
    except Exception:  # noqa: BLE001 - float64 is only a referee
        return None


def _moved(x, convert, memo):
    """|x| (args, kwargs, nested) with each tensor converted once: a tensor
    passed twice stays one tensor, as the module saw it on the CPU."""
    import torch
    if isinstance(x, torch.Tensor):
        if id(x) not in memo:
            y = convert(x.detach())
            memo[id(x)] = y.requires_grad_(x.requires_grad) if x.requires_grad else y
        return memo[id(x)]
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # PackedSequence and other named tuples
        return type(x)(*[_moved(v, convert, memo) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(_moved(v, convert, memo) for v in x)
    if isinstance(x, dict):
        return {k: _moved(v, convert, memo) for k, v in x.items()}
    return x


def _double(t):
    return t.double() if t.is_floating_point() else t


class _ModuleRun:
    """One module input on one device: the module (a copy of |base|), its
    forward arguments, and what the forward returned."""

    def __init__(self, base, inp, convert, module_convert):
        import copy
        memo = {}
        self.module = module_convert(copy.deepcopy(base))
        self.args = _moved(inp.forward_input.args, convert, memo)
        self.kwargs = _moved(inp.forward_input.kwargs, convert, memo)

    def forward(self, fn=None):
        self.out = (self.module if fn is None else fn)(*self.args, **self.kwargs)
        return self.out

    def grad_inputs(self):
        """The parameters, then the forward's tensor arguments that require grad."""
        args = _tensors([list(self.args), list(self.kwargs.values())])
        seen, ins = set(), []
        for t in list(self.module.parameters()) + [t for t in args if t.requires_grad]:
            if id(t) not in seen:
                seen.add(id(t))
                ins.append(t)
        return ins

    def grads(self, upstream):
        outs = [t for t in _tensors(self.out) if t.requires_grad and t.is_floating_point()]
        ins = [t for t in self.grad_inputs() if t.requires_grad]
        if not outs or not ins:
            return None
        import torch
        return torch.autograd.grad(outs, ins, [g.to(o.device, o.dtype) for g, o in zip(upstream, outs)],
                                   allow_unused=True)


def _module_base(mi, inp, training):
    """The module built on the CPU, in |training| mode; a lazy module has its
    parameters made from the inputs (on the CPU, so every copy starts from the
    same values)."""
    import torch
    torch.manual_seed(0)
    m = mi.module_cls(*inp.constructor_input.args, **inp.constructor_input.kwargs)
    if mi.is_lazy:
        import copy
        m._infer_parameters(m, copy.deepcopy(inp.forward_input.args), copy.deepcopy(inp.forward_input.kwargs))
    return m.train(training)


def _run_module_input(mi, inp, training, compiled):
    """One module input on CPU and tpu; returns None or (status, reason)."""
    import torch
    try:
        base = _module_base(mi, inp, training)
        cpu = _ModuleRun(base, inp, lambda t: t.clone(), lambda m: m)
        torch.manual_seed(0)
        with _SeededWatch() as watch:
            want = cpu.forward()
    except Exception:  # noqa: BLE001 - an input CPU rejects says nothing about tpu
        return None
    ref = None
    if not watch.seeded:
        try:
            ref = _ModuleRun(base, inp, _double, lambda m: m.double())
            ref.forward()
        except Exception:  # noqa: BLE001 - float64 is only a referee
            ref = None
    tpu = _ModuleRun(base, inp, lambda t: t.to("tpu"), lambda m: m.to("tpu"))
    fn = None
    if compiled:
        import torch._dynamo
        torch._dynamo.reset()
        fn = torch.compile(tpu.module, backend="tpu", dynamic=False)
    got, failed = _on_tpu(lambda: tpu.forward(fn))
    if failed:
        return failed
    try:
        if watch.seeded:
            if _shape_of(got) != _shape_of(want):
                raise Mismatch(f"random module: {_shape_of(got)} vs CPU's {_shape_of(want)}")
            return None
        compare(got, want, ref.out if ref else None, {})
        ref_buffers = dict(ref.module.named_buffers()) if ref else {}
        for (name, b), (_, bt) in zip(cpu.module.named_buffers(), tpu.module.named_buffers()):
            compare(bt, b, ref_buffers.get(name), {}, f"buffer {name}")
    except Mismatch as e:
        return "mismatch", str(e)[:500]
    gen = torch.Generator().manual_seed(2)
    upstream = [torch.randn(t.shape, generator=gen) for t in _tensors(want)
                if t.requires_grad and t.is_floating_point()]
    try:
        g_cpu = cpu.grads(upstream)
    except Exception:  # noqa: BLE001 - CPU has no gradient here either
        return None
    if g_cpu is None:
        return None
    g_tpu, failed = _on_tpu(lambda: tpu.grads(upstream), backward=True)
    if failed:
        return failed
    try:
        g_ref = ref.grads(upstream) if ref else None
    except Exception:  # noqa: BLE001 - float64 is only a referee
        g_ref = None
    return compare_grads(g_tpu, g_cpu, g_ref)


def _run_module_errors(mi, training):
    """The ModuleInfo's error inputs raised in the forward: tpu must raise what
    the CPU raises (_same_error)."""
    import torch
    from torch.testing._internal.common_modules import ModuleErrorEnum
    if mi.module_error_inputs_func is None:
        return None
    errors = mi.module_error_inputs_func(mi, device="cpu", dtype=torch.float32, requires_grad=False,
                                         training=training)
    for i, error in enumerate(errors):
        if error.error_on != ModuleErrorEnum.FORWARD_ERROR:
            continue  # a constructor's checks run on the CPU whatever the device
        inp = error.module_error_input
        want, got = (_raised(lambda: _ModuleRun(_module_base(mi, inp, training), inp, convert, module_convert).forward())
                     for convert, module_convert in ((lambda t: t.clone(), lambda m: m),
                                                     (lambda t: t.to("tpu"), lambda m: m.to("tpu"))))
        if want is not None and not _same_error(got, want, error):
            return "error", f"error input {i}: {_described(got)} vs CPU's {_described(want)}"
    return None


def _run_module_task(modules, name, mode, send):
    import torch
    mi = modules[name]
    if torch.float32 not in mi.supported_dtypes("cpu"):
        return {"status": "n/a"}
    compiled = mode == "module-compiled"
    result = {"status": "pass", "samples": 0}
    for training in (True, False) if mi.train_and_eval_differ else (True,):
        phase = "train" if training else "eval"
        try:
            inputs = [m for m in mi.module_inputs_func(mi, device="cpu", dtype=torch.float32, requires_grad=True,
                                                        training=training) if m.forward_input is not None]
        except Exception as e:  # noqa: BLE001
            return {"status": "n/a", "reason": f"no inputs: {type(e).__name__}"}
        for i, inp in enumerate(inputs):
            send(("progress", i))
            out = _run_module_input(mi, inp, training, compiled)
            if out is None:
                result["samples"] += 1
                continue
            status, reason = out
            result.update(status=status.replace("grad-", ""),
                          reason=f"{phase} input {i} ({inp.desc or 'default'}): {reason}")
            return result
        if not compiled:
            out = _run_module_errors(mi, training)
            if out is not None:
                result.update(status=out[0], reason=f"{phase}: {out[1]}")
                return result
    if result["samples"] == 0:
        result.update(status="n/a", reason="CPU rejects every input")
    return result


def _raised(fn):
    """The exception |fn| raises, or None (by the next cut: fused eager
    raises a data check's error there)."""
    import torch
    try:
        fn()
        torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001 - compared with what the CPU raises
        return e
    return None


def _described(e):
    if e is None:
        return "no error"
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def _matches(got, error_input):
    """|got|'s message is one the error input's regex accepts."""
    import re
    return got is not None and re.search(error_input.error_regex, str(got)) is not None


def _same_error(got, want, error_input):
    """tpu raised the CPU's exception type, with the CPU's message (first line)
    or one PyTorch's own error tests accept (the error input's regex: a
    message naming a tensor type, as embedding's, names the device's)."""
    if got is None or type(got) is not type(want):
        return False
    first = lambda e: str(e).splitlines()[0] if str(e) else ""  # noqa: E731
    return first(got) == first(want) or _matches(got, error_input)


def _run_error_task(op, send):
    """The OpInfo's error inputs, made for each device under one seed: each
    one the CPU refuses must be refused on tpu with PyTorch's exception."""
    import torch
    if op.error_inputs_func is None:
        return {"status": "n/a"}
    made = {}
    for device in ("cpu", "tpu"):
        torch.manual_seed(0)
        try:
            made[device] = list(op.error_inputs(device))
        except Exception as e:  # noqa: BLE001
            if device == "cpu":
                return {"status": "n/a", "reason": f"no error inputs: {type(e).__name__}"}
            return {"status": "error", "reason": f"making the error inputs on tpu: {type(e).__name__}: {e}"[:300]}
    paired = len(made["cpu"]) == len(made["tpu"])  # else the OpInfo adds inputs for devices other than the CPU
    result = {"status": "pass", "samples": 0}
    run = lambda e: _raised(lambda: op(e.sample_input.input, *e.sample_input.args,  # noqa: E731
                                       **e.sample_input.kwargs))
    for i, on_tpu in enumerate(made["tpu"]):
        send(("progress", i))
        if paired:
            want = run(made["cpu"][i])
            if want is None:
                continue  # the CPU takes it: a device-specific error input
            got = run(on_tpu)
            ok = _same_error(got, want, on_tpu)
        else:  # PyTorch's own criterion only: the error input's type and regex
            got, want = run(on_tpu), None
            ok = isinstance(got, on_tpu.error_type) and _matches(got, on_tpu)
        result["samples"] += 1
        if not ok:
            expected = f"CPU's {_described(want)}" if paired else f"{on_tpu.error_type.__name__} matching {on_tpu.error_regex!r}"
            result.update(status="mismatch", reason=f"error input {i}: {_described(got)} vs {expected}")
            return result
    if result["samples"] == 0:
        result.update(status="n/a", reason="the CPU takes every error input")
    return result


def _run_task(ops, name, dtype_name, mode, grad, send):
    import torch
    if mode in MODULE_MODES:
        return _run_module_task(ops, name, mode, send)
    op = ops[name]
    if mode == "errors":
        return _run_error_task(op, send)
    dtype = getattr(torch, dtype_name)
    if dtype not in op.supported_dtypes("cpu"):
        return {"status": "n/a"}
    compiled = mode == "compiled"
    want_grad = grad and dtype == torch.float32 and op.supports_autograd and not compiled
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=want_grad))
        pinned = _pinned_to_cpu(op, dtype, len(samples))
        grads = [want_grad] * len(samples)
        if want_grad:
            # Some OpInfos make fewer (or other) samples for gradients
            # (multi_head_attention_forward: 1 of 192): the forwards of the
            # samples without gradients run too where the sets differ.
            plain = list(op.sample_inputs("cpu", dtype, requires_grad=False))
            if len(plain) != len(samples):
                samples += plain
                pinned += _pinned_to_cpu(op, dtype, len(plain))
                grads += [False] * len(plain)
    except Exception as e:  # noqa: BLE001
        return {"status": "n/a", "reason": f"no samples: {type(e).__name__}"}
    result = {"status": "pass", "samples": 0, "grad": "pass" if want_grad else "n/a"}
    for i, sample in enumerate(samples):
        send(("progress", i))
        out = _run_sample(op, sample, dtype, compiled, grads[i], send, pinned[i])
        if out is None:
            result["samples"] += 1
            continue
        status, reason = out
        if status.startswith("grad-"):
            if result["grad"] == "pass":
                result["grad"] = status[5:]
                result["grad_reason"] = f"sample {i}: {reason}"
            result["samples"] += 1
            continue
        result.update(status=status, reason=f"sample {i}: {reason}")
        break
    if result["samples"] == 0 and result["status"] == "pass":
        result["status"] = "n/a"
        result["reason"] = "CPU rejects every sample"
    return result

