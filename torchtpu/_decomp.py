"""What torchtpu decomposes: one policy for the eager fallback and for
graphs (AOTAutograd's, torch.export's), and the decompositions it adds.

An op decomposes (decomposition()) when torchtpu has no rule for it (a rule
wins: eager lowers the op, a graph keeps it as a node for the walker) and it
is not in place (the aliasing needs a kernel), with, in this order:
- torchtpu's own (EXTRA): GradScaler's unscale and update, where PyTorch has
  none;
- a _foreach_ op's per-tensor op item by item, that op picked by the table
  eager's per-item kernels use (csrc/torch/foreach.cpp), where it has no rule;
- PyTorch's: core ATen's decomposition for an op PyTorch runs with a
  composite kernel on any device (such ops never reach tpu's fallback; a
  graph is traced to core ATen, as Inductor's are), torch._decomp's for an op
  whose kernels are per device (the CPU's and CUDA's), which tpu would
  otherwise run on the CPU.

The CPU fallback (csrc/torch/fallback.cpp) asks run() first: a
decomposition runs on tpu tensors and its pieces dispatch to lowered ops;
only otherwise does the op go to the CPU. Structured ops reach a backend as
their out= variants: those run their functional form (decomposed, lowered
by a rule, or PyTorch's composite kernel) and copy into out.
torchtpu.stats() counts decompositions and fallbacks apart. table() is the
same policy as the dict AOTAutograd and run_decompositions take.
"""
import threading

import torch
from torch._decomp import decomposition_table

from . import _C, _fx_program

_active = threading.local()
_resolved = {}


def _op(name):
    """"aten::foo.overload" -> the OpOverload (None if unknown)."""
    if name not in _resolved:
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base.split("::", 1)[1], None)
        _resolved[name] = getattr(packet, overload or "default", None) if packet is not None else None
    return _resolved[name]


def _writes(op):
    return [a for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def _functional(op):
    """The functional overload of an out= overload ("X_out"/"out"/"grad_input" -> "X"/"default")."""
    packet = getattr(torch.ops.aten, op._schema.name.split("::", 1)[1])
    name = op._schema.overload_name
    for candidate in (name[:-4] if name.endswith("_out") else None, "default" if name in ("out", "grad_input") else None):
        if candidate and candidate in packet.overloads():
            f = getattr(packet, candidate)
            if not _writes(f):
                return f
    return None


def _has_rule(op):
    base = op._schema.name.split("::", 1)[1]
    return _C._has_rule(f"{base}.{op._schema.overload_name}" if op._schema.overload_name else base)


def _opmath(dtype):
    """The type the fused CPU kernels compute a tensor of |dtype| in."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _unscale_(grads, found_inf, inv_scale):
    """_amp_foreach_non_finite_check_and_unscale_ (GradScaler.unscale_) as
    PyTorch's kernels compute it: every grad times inv_scale, in float32 for
    half grads (not through a half-rounded inv_scale); found_inf set to 1
    when any grad holds an inf or a NaN, left as it was otherwise."""
    if not grads:
        return
    wide = [g for g in grads if _opmath(g.dtype) == g.dtype]
    # The largest magnitude of each grad is inf or NaN when the grad holds one:
    # one program for the whole list. A magnitude is finite when it is below
    # inf (NaN compares False): one op, where isfinite is PyTorch's composite.
    finite = (torch.stack(torch._foreach_norm(grads, float("inf"))) < float("inf")).all()
    if wide:
        torch._foreach_mul_(wide, inv_scale)
    for g in grads:
        if _opmath(g.dtype) != g.dtype:
            g.copy_(g.float() * inv_scale)
    found_inf.copy_(torch.where(finite, found_inf, torch.ones_like(found_inf)))


def _update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """_amp_update_scale_ (GradScaler.update) as PyTorch's kernels compute
    it: after an inf the scale backs off and the tracker resets; after
    growth_interval clean steps in a row the scale grows (unless that
    overflows) and the tracker resets. The products round from float64, as
    the kernels' do. No value leaves the device."""
    found = found_inf.reshape(()) != 0
    successful = growth_tracker + 1
    grow = ~found & (successful == growth_interval)
    grown = (scale.double() * growth_factor).to(scale.dtype)
    backed_off = (scale.double() * backoff_factor).to(scale.dtype)
    scale.copy_(torch.where(found, backed_off, torch.where(grow & torch.isfinite(grown), grown, scale)))
    growth_tracker.copy_(torch.where(found | grow, torch.zeros_like(growth_tracker), successful))
    return scale


# GradScaler's steps, which run eagerly (outside compiled graphs).
EXTRA = {torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default: _unscale_,
         torch.ops.aten._amp_update_scale_.default: _update_scale_}

_COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def _composite(op):
    """Whether PyTorch runs |op| with a kernel for every device."""
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), k) for k in _COMPOSITE)


_core = None


def _core_table():
    global _core
    if _core is None:
        from torch._decomp import core_aten_decompositions
        table = core_aten_decompositions()
        _core = dict(table.items() if hasattr(table, "items") else table)
    return _core


def _per_item(op):
    """A _foreach_ op as its per-tensor op on each item of its lists (the
    op and where each of its arguments comes from: foreach.cpp's table,
    rule or not), or None."""
    schema = op._schema
    found = _C._foreach_item(schema.name, schema.overload_name, lowered=False)
    if found is None:
        return None
    name, overload, source = found
    per = getattr(getattr(torch.ops.aten, name.split("::", 1)[1]), overload or "default")
    per_names = [a.name for a in per._schema.arguments]
    lists = [a.type.kind() == "ListType" for a in schema.arguments]

    def decomposed(*args, **kwargs):
        values = [args[j] if j < len(args) else kwargs.get(a.name, a.default_value)
                  for j, a in enumerate(schema.arguments)]
        n = len(next(v for v, is_list in zip(values, lists) if is_list))
        return [per(**{per_names[i]: values[j][k] if lists[j] else values[j]
                       for i, j in enumerate(source) if j >= 0}) for k in range(n)]
    return decomposed


def _ends_on_result_device(ref):
    """linspace/logspace with tensor ends: PyTorch's decomposition computes
    with the ends where they lie, which fails for tpu ends of a CPU result
    (eager reads them as numbers); the ends go to the result's device first."""
    def decomposed(start, end, *args, device=None, **kwargs):
        if device is not None:
            start, end = (v.to(device) if isinstance(v, torch.Tensor) else v for v in (start, end))
        return ref(start, end, *args, device=device, **kwargs)
    return decomposed


_TENSOR_ENDS = {getattr(getattr(torch.ops.aten, name), overload) for name in ("linspace", "logspace")
                for overload in ("Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor")}


def _choose(op):
    if op in EXTRA:
        return EXTRA[op]
    if not isinstance(op, torch._ops.OpOverload):
        return _core_table().get(op)
    if _fx_program.rule_name(op) is not None or _fx_program.foreach_item(op) is not None:
        return None
    if any(not a.kwarg_only for a in _writes(op)):
        return None
    if op.__name__.startswith("_foreach_") and (fn := _per_item(op)) is not None:
        return fn
    fn = _core_table().get(op) if _composite(op) else decomposition_table.get(op)
    if fn is not None and op in _TENSOR_ENDS:
        fn = _ends_on_result_device(fn)
    return fn


_chosen = {}


def decomposition(op):
    """The function torchtpu decomposes OpOverload |op| with, or None (the
    policy above)."""
    if op not in _chosen:
        _chosen[op] = _choose(op)
    return _chosen[op]


_table = None


def table():
    """{op: decomposition} of every op that decomposes: what AOTAutograd
    and torch.export's run_decompositions take."""
    global _table
    if _table is None:
        ops = {*_core_table(), *decomposition_table, *EXTRA}
        for name in dir(torch.ops.aten):
            if name.startswith("_foreach_"):
                packet = getattr(torch.ops.aten, name)
                ops.update(getattr(packet, o) for o in packet.overloads())
        _table = {op: fn for op in ops if (fn := decomposition(op)) is not None}
    return _table


def _decomposed(op, args, kwargs):
    fn = decomposition(op)
    if fn is not None:
        return fn(*args, **kwargs)
    writes = _writes(op)
    if not writes or any(not a.kwarg_only for a in writes):
        return NotImplemented
    functional = _functional(op)
    if functional is None:
        return NotImplemented
    fn = decomposition(functional) or (functional if _has_rule(functional) or _composite(functional) else None)
    if fn is None:
        return NotImplemented
    outs = [kwargs.pop(a.name) for a in writes]
    result = fn(*args, **kwargs)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for out, value in zip(outs, results):
        if out.shape != value.shape:
            out.resize_(value.shape)
        out.copy_(value)
    return outs[0] if len(outs) == 1 else tuple(outs)


def run(name, args, kwargs):
    """The op decomposed on these arguments, or NotImplemented."""
    op = _op(name)
    stack = getattr(_active, "ops", None)
    if stack is None:
        stack = _active.ops = set()
    if op is None or name in stack:  # unknown, or a decomposition calling itself
        return NotImplemented
    stack.add(name)
    try:
        return _decomposed(op, args, kwargs)
    finally:
        stack.discard(name)
