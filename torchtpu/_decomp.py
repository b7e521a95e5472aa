"""PyTorch's own decompositions, run on tpu for ops that have no rule.

The CPU fallback (csrc/torch/fallback.cpp) asks here first: when
torch._decomp has a decomposition for the op, it runs on tpu tensors and its
pieces dispatch to lowered ops; only otherwise does the op go to the CPU.
Structured ops reach a backend as their out= variants: those run their
functional form (decomposed, or lowered by a rule) and copy into out.
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


def _decomposed(op, args, kwargs):
    fn = decomposition_table.get(op)
    if fn is not None:
        return fn(*args, **kwargs)
    writes = _writes(op)
    if not writes or any(not a.kwarg_only for a in writes):
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
