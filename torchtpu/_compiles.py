"""What torchtpu compiled: torchtpu.compiles(), the compile limit and
TORCHTPU_LOG=compiles. The log itself is C's (csrc/base/compiles.c): every
XLA program is built for an owner (an eager op, a fused eager trace, a
torch.compile'd function) and one signature (its arguments' dtypes, shapes,
layouts and the Python numbers baked into it)."""
import warnings

from . import _C


class CompileReport(dict):
    """owner -> {"kind": "op" | "fused" | "compiled" | "other",
    "signatures": distinct signatures built, "compiled": programs XLA
    compiled, "loaded": programs loaded from the disk cache instead,
    "seconds": time spent compiling and loading, "examples": the first
    signatures (up to 16)}. str() is a table, most signatures first."""

    def total(self, key="signatures"):
        return sum(v[key] for v in self.values())

    def __str__(self):
        rows = sorted(self.items(), key=lambda kv: (-kv[1]["signatures"], kv[0]))
        lines = [f"{'owner':<44} {'kind':<8} {'signatures':>10} {'compiled':>8} {'loaded':>6} {'seconds':>8}"]
        for name, v in rows:
            lines.append(f"{name[:44]:<44} {v['kind']:<8} {v['signatures']:>10} {v['compiled']:>8} "
                         f"{v['loaded']:>6} {v['seconds']:>8.3f}")
        return "\n".join(lines)


def _kind(owner):
    if owner.startswith("aten::") or "::" in owner:
        return "op"
    if owner.startswith("fused_"):
        return "fused"
    if owner.startswith("compiled "):
        return "compiled"
    return "other"


def compiles():
    """What was compiled since start (or reset_compiles()), per eager op,
    fused eager trace and compiled function: a CompileReport. In a steady
    state (a training loop after its first steps) the totals stop growing."""
    report = CompileReport()
    for owner, signatures, compiled, loaded, seconds, examples in _C._compiles():
        report[owner] = {"kind": _kind(owner), "signatures": signatures, "compiled": compiled, "loaded": loaded,
                         "seconds": seconds, "examples": list(examples)}
    return report


def reset_compiles():
    """Forgets the report's numbers; an owner warns again past the limit."""
    _C._compiles_reset()


def set_compile_limit(n):
    """The signatures one op or compiled function may compile before the
    warning (default 8, or TORCHTPU_COMPILE_LIMIT), as Dynamo's
    recompile_limit."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_compile_limit: expected a positive int, got {n!r}")
    _C._compiles_set_limit(n)


def get_compile_limit():
    return _C._compiles_limit()


def warn_pending(stacklevel=3):
    """Raises the compile log's warnings not raised yet (compiled functions':
    eager ops raise theirs from the op)."""
    for text in _C._compiles_warnings():
        warnings.warn(text, stacklevel=stacklevel)


def _configure_log(setting):
    """TORCHTPU_LOG (|setting|): comma-separated topics; "compiles" logs
    every program built, compiled or loaded on stderr as it happens."""
    topics = {t.strip() for t in setting.split(",") if t.strip()}
    unknown = topics - {"compiles"}
    if unknown:
        raise ValueError(f"TORCHTPU_LOG={setting!r}: unknown topic(s) "
                         f"{', '.join(sorted(unknown))}; expected: compiles")
    _C._compiles_log("compiles" in topics)
