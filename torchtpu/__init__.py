"""torchtpu: an XLA device (through PJRT) as the ordinary PyTorch device "tpu".

    import torch, torchtpu
    x = torch.randn(4, 4, device="tpu")

Environment: every TORCHTPU_* variable is read once, at import, by
torchtpu/_settings.py; docs/configuration.md lists them (TORCHTPU_PLATFORM,
TORCHTPU_EAGER, TORCHTPU_FALLBACK, TORCHTPU_CACHE_DIR, TORCHTPU_KERNELS, ...).
"""
import atexit
import os

# XLA logs an INFO line per client at start-up; keep stderr for warnings.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import torch  # noqa: E402

from . import _plugin  # noqa: E402
from . import _settings  # noqa: E402
from . import _C  # noqa: E402

# The environment, read once: the runtime's options come from here.
settings = _settings.read()
_platform, _plugin_path, _plugin_error = _plugin.resolve(settings.platform)
_C._configure(settings, _plugin_path, _platform, _plugin_error)

torch.utils.rename_privateuse1_backend("tpu")
from . import device as _device_module  # noqa: E402

torch._register_device_module("tpu", _device_module)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)

_C._set_fallback_mode(settings.fallback)
from . import _decomp  # noqa: E402
from . import _meta  # noqa: E402
from . import _flex  # noqa: E402
from . import _reductions  # noqa: E402
from . import _distributed  # noqa: E402
from . import _dlpack  # noqa: E402
from . import _rng_hops  # noqa: E402,F401

_C._set_decomposer(_decomp.run)


def _route_inductor():
    """torch.compile(model) on tpu tensors compiles with backend="tpu":
    Inductor's own "tpu" target is another runtime's (compile.inductor_or_tpu).
    The hook sits in the wrapper torch.compile makes for Inductor, so that
    importing torchtpu imports neither dynamo nor Inductor."""
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is None:  # a PyTorch without it: torch.compile(fn) is Inductor's alone
        return
    inductor = wrapper.__call__

    def __call__(self, model_, inputs_, **kwargs):
        from .compile import inductor_or_tpu
        return inductor_or_tpu(lambda *a, **k: inductor(self, *a, **k), model_, inputs_, **kwargs)

    wrapper.__call__ = __call__


_route_inductor()
_meta.enable()
_flex.enable()
_reductions.enable()
_distributed.enable()
_dlpack.enable()
if settings.dump_dir:
    _C._set_dump_dir(settings.dump_dir)


def _start_progress():
    """The progress line of long compiles (progress.cpp), when TORCHTPU_PROGRESS
    or a terminal on stderr asks for it."""
    setting = settings.progress
    tty = os.isatty(2)
    try:
        delay = 1.0 if setting in ("", "1") else float(setting)
    except ValueError:
        raise ValueError(f"TORCHTPU_PROGRESS={setting!r}: expected 0, 1 or a number of seconds") from None
    if delay <= 0 or (setting == "" and not tty):
        return
    _C._progress_start(delay, tty)
    atexit.register(_C._progress_finish)


_start_progress()

from ._compiles import compiles, get_compile_limit, reset_compiles, set_compile_limit  # noqa: E402
from ._compiles import _configure_log  # noqa: E402

_configure_log(settings.log)


def _settle_autograd_threads():
    """At exit: one empty backward through each device's autograd thread.
    PyTorch 2.13 stashes a Python object (a copy of the contextvars) in the
    state every backward's graph task carries, and a tpu backward's task can
    be released by the device's autograd thread after backward() returned;
    when that release falls in interpreter shutdown it needs the GIL, the
    thread is made to exit inside a destructor, and the process aborts
    ("terminate called without an active exception", exit code 134). The
    thread takes this backward only after releasing the last one, and this
    one carries no Python object."""
    if not _C._started() or _C._is_in_bad_fork():
        return
    engine = torch.autograd.Variable._execution_engine
    try:
        for index in range(_C._device_count()):
            leaf = torch.tensor(0.0).to(f"tpu:{index}").requires_grad_()
            engine.run_backward((leaf.view(()),), (torch.tensor(1.0).to(f"tpu:{index}"),), False, False, (),
                                allow_unreachable=True, accumulate_grad=True)
    except Exception:  # noqa: BLE001 - at exit (a device gone bad, say) there is nothing left to report to
        pass


atexit.register(_settle_autograd_threads)


def stats():
    """Counters since start (or reset_stats()): ops, cache_hits (programs
    found in memory), cache_misses (programs XLA compiled), cache_loads
    (programs loaded from the disk cache instead), compile_seconds (spent
    compiling and loading: the totals of compiles()' "compiled", "loaded" and
    "seconds", per owner there), executions, h2d_bytes, d2h_bytes, fallbacks
    and decompositions (op name -> count) and cached_programs; fused eager's
    fused_ops (calls recorded), fused_programs (runs of them launched as one
    program), trace_hits / trace_misses (those programs found in memory or
    built), fused_max_ops (the most calls in one), fused_replays (fused
    programs that failed to build, compile or run, whose ops then ran one by
    one as in strict mode) and cuts (reason -> count: why recorded calls
    ran)."""
    return _C._stats()


_EAGER_MODES = {"strict": 0, "fused": 1, "blocking": 2}


def _eager_mode_number(mode):
    if mode not in _EAGER_MODES:
        raise ValueError(f"eager mode must be one of {', '.join(_EAGER_MODES)}, got {mode!r}")
    return _EAGER_MODES[mode]


def _carry_eager_mode(number):
    """Stashes this thread's mode (-1: the default) where autograd's engine
    carries it to the threads that run a backward started here
    (csrc/torch/dispatch.cpp reads it there)."""
    for mode, n in _EAGER_MODES.items():
        key = "torchtpu.eager_mode." + mode
        if n == number:
            torch._C._stash_obj_in_tls(key, True)
        elif torch._C._is_key_in_tls(key):
            torch._C._remove_obj_from_tls(key)


class eager_mode:
    """How tpu ops run on this thread, in a with block (or as a decorator):

    - "strict" (the default): each op runs at once as its own cached program;
    - "fused": ops are recorded, and runs of them become one program, run when
      something needs their results (printing, .item(), .cpu(), a sync, a
      compiled graph), at a size cap, or at a loop's iteration; results are
      bit-identical to strict's; an index out of range raises at that next
      cut, the tensors as strict leaves them;
    - "blocking": each op runs and waits for its results, so a device error is
      reported by the op that caused it (CUDA_LAUNCH_BLOCKING's role).

    TORCHTPU_EAGER sets the process default (every thread, autograd's too);
    a backward started in the block runs in its mode on autograd's threads.
    Leaving a fused block runs what it recorded."""

    def __init__(self, mode):
        self._mode = _eager_mode_number(mode)
        self._old = []

    def __enter__(self):
        self._old.append(_C._set_thread_eager_mode(self._mode))
        _carry_eager_mode(self._mode)
        return self

    def __exit__(self, *exc):
        old = self._old.pop()
        _C._set_thread_eager_mode(old)
        _carry_eager_mode(old)
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with eager_mode(next(k for k, v in _EAGER_MODES.items() if v == self._mode)):
                return fn(*args, **kwargs)
        return wrapped


def current_eager_mode():
    """This thread's eager mode: "strict", "fused" or "blocking"."""
    number = _C._eager_mode()
    return next(k for k, v in _EAGER_MODES.items() if v == number)


def _default_eager_mode():
    """The process default from TORCHTPU_EAGER (strict when unset)."""
    return _eager_mode_number(settings.eager)


_C._set_default_eager_mode(_default_eager_mode())


def reset_stats():
    _C._reset_stats()


def synchronize(device=None):
    _device_module.synchronize(device)


def export_stablehlo(program, args=(), kwargs=None, *, dynamic_shapes=None, strict=False):
    """A torch.export program (or a module and example inputs) as a
    StableHLO module through torchtpu's lowering rules (torchtpu/export.py)."""
    from .export import export_stablehlo as export
    return export(program, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)


def load_stablehlo(path):
    """A StableHLO export saved with .save(path), ready to call through PJRT."""
    from .export import load_stablehlo as load
    return load(path)


__all__ = ["stats", "reset_stats", "compiles", "reset_compiles", "set_compile_limit", "get_compile_limit",
           "synchronize", "eager_mode", "current_eager_mode", "export_stablehlo", "load_stablehlo"]
