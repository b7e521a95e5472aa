"""The one reader of torchtpu's environment: every TORCHTPU_* variable the
package and its C runtime use (docs/configuration.md is the list), read here
and passed in. `read()` runs once at `import torchtpu`; its Settings fill
the runtime's options (`_C._configure`: csrc/torch/common.cpp's Config and
the eager options struct in csrc/eager/eager.h), so C reads no environment.
Settings changeable at run time have their own calls (set_compile_limit,
eager_mode); `dist_check()` is read each time a tpu_dist group is made.
Malformed numbers fall back to the default, as C's strtol/atoi readers did.
"""
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    platform: str             # TORCHTPU_PLATFORM: cpu | cuda | tpu | a plugin's path
    cpu_devices: int          # LOCAL_WORLD_SIZE / LOCAL_RANK (torchrun): devices the CPU plugin makes
    fallback: str             # TORCHTPU_FALLBACK: warn | error | silent
    eager: str                # TORCHTPU_EAGER: strict | fused | blocking (checked by eager_mode)
    fused_max_ops: int        # TORCHTPU_FUSED_MAX_OPS (0: C's default, 512)
    fused_exact: bool         # TORCHTPU_FUSED_EXACT (off only for "0")
    cache_dir: str            # TORCHTPU_CACHE_DIR, resolved ("" = off)
    cache_max_bytes: int      # TORCHTPU_CACHE_MAX_MB in bytes
    max_cached_programs: int  # TORCHTPU_MAX_CACHED_PROGRAMS (0: C's default, 4096)
    kernels: str              # TORCHTPU_KERNELS (names checked by C's tpu_kernels_select)
    matmul_isa_cap: int       # TORCHTPU_MATMUL_ISA: 0 any, 1 avx512, 2 avx2 (tpu_matmul_isa_cap)
    dump_dir: str             # TORCHTPU_DUMP_DIR ("" = off)
    progress: str             # TORCHTPU_PROGRESS, parsed by __init__._start_progress
    log: str                  # TORCHTPU_LOG, parsed by _compiles._configure_log
    compile_limit: int        # TORCHTPU_COMPILE_LIMIT (0: C's default, 8)
    xla_flags: object         # XLA_FLAGS (str or None): part of the compile cache's key


def _positive_int(text):
    """C's strtol/atoi reading of a count: its leading integer, 0 when there
    is none or it is not positive."""
    text = (text or "").strip()
    end = 1 if text[:1] in "+-" else 0
    while end < len(text) and text[end].isdigit():
        end += 1
    try:
        n = int(text[:end])
    except ValueError:
        return 0
    return n if n > 0 else 0


def _cache_dir(env):
    setting = env.get("TORCHTPU_CACHE_DIR")
    if setting is not None:
        return "" if setting.lower() in ("", "0", "off", "none") else os.path.expanduser(setting)
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torchtpu")


_MATMUL_ISA_CAPS = {"avx512": 1, "avx2": 2}


def read(env=None):
    env = os.environ if env is None else env
    return Settings(
        platform=env.get("TORCHTPU_PLATFORM", "cpu") or "cpu",
        # Under torchrun the CPU plugin makes one device per local process
        # (tpu:LOCAL_RANK is the process's, as CUDA's processes do: trainers
        # and DeviceMesh call set_device(LOCAL_RANK)); a launcher that sets
        # LOCAL_RANK alone gets devices up to it.
        cpu_devices=max(1, int(env.get("LOCAL_WORLD_SIZE", "1") or 1), int(env.get("LOCAL_RANK", "0") or 0) + 1),
        fallback=env.get("TORCHTPU_FALLBACK", "warn"),
        eager=env.get("TORCHTPU_EAGER", "strict").strip().lower() or "strict",
        fused_max_ops=_positive_int(env.get("TORCHTPU_FUSED_MAX_OPS")),
        fused_exact=env.get("TORCHTPU_FUSED_EXACT") != "0",
        cache_dir=_cache_dir(env),
        cache_max_bytes=int(float(env.get("TORCHTPU_CACHE_MAX_MB", "2048")) * 2**20),
        max_cached_programs=_positive_int(env.get("TORCHTPU_MAX_CACHED_PROGRAMS")),
        kernels=env.get("TORCHTPU_KERNELS", "1"),
        matmul_isa_cap=_MATMUL_ISA_CAPS.get(env.get("TORCHTPU_MATMUL_ISA", ""), 0),
        dump_dir=env.get("TORCHTPU_DUMP_DIR", ""),
        progress=env.get("TORCHTPU_PROGRESS", "").strip(),
        log=env.get("TORCHTPU_LOG", ""),
        compile_limit=_positive_int(env.get("TORCHTPU_COMPILE_LIMIT")),
        xla_flags=env.get("XLA_FLAGS"),
    )


def dist_check(env=None):
    """TORCHTPU_DIST_CHECK: the agreement check before each tpu_dist
    collective, on unless "0"; read when a group is made, so one process
    can make checked and unchecked groups (bench/distributed.py)."""
    env = os.environ if env is None else env
    return env.get("TORCHTPU_DIST_CHECK") != "0"


def peak_flops(env=None):
    """TORCHTPU_PEAK_FLOPS: the device's peak (dense bf16 FLOP/s) a user
    gives, for MFU (no plugin reports one); None when unset. Read when the
    device's properties are asked, as dist_check is."""
    env = os.environ if env is None else env
    value = env.get("TORCHTPU_PEAK_FLOPS", "")
    if not value:
        return None
    try:
        peak = float(value)
    except ValueError:
        peak = -1.0
    if not peak > 0 or peak == float("inf"):
        raise ValueError(f"TORCHTPU_PEAK_FLOPS must be a positive number of FLOP/s, got {value!r}")
    return peak
