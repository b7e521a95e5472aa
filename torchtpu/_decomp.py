"""PyTorch's own decompositions, run on tpu for ops that have no rule, and
the few torchtpu adds where PyTorch has none (EXTRA: GradScaler's unscale
and update).

The CPU fallback (csrc/torch/fallback.cpp) asks here first: when
torch._decomp (or EXTRA) has a decomposition for the op, it runs on tpu
tensors and its pieces dispatch to lowered ops; only otherwise does the op go
to the CPU. Structured ops reach a backend as their out= variants: those run
their functional form (decomposed, or lowered by a rule) and copy into out.
torchtpu.stats() counts decompositions and fallbacks apart.
"""
import threading

import torch
from torch._decomp import decomposition_table

from . import _C

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


# GradScaler's steps run eagerly (outside compiled graphs).
EXTRA = {torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default: _unscale_,
         torch.ops.aten._amp_update_scale_.default: _update_scale_}


def _decomposed(op, args, kwargs):
    if op in EXTRA:  # these write their in-place arguments themselves
        return EXTRA[op](*args, **kwargs)
    writes = _writes(op)
    if any(not a.kwarg_only for a in writes):  # in place: the aliasing needs a real kernel
        return NotImplemented
    fn = decomposition_table.get(op)
    if fn is not None:
        return fn(*args, **kwargs)
    if not writes:
        return NotImplemented
    functional = _functional(op)
    if functional is None:
        return NotImplemented
    fn = decomposition_table.get(functional) or (functional if _has_rule(functional) else None)
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
