"""torch.tpu: the device module PyTorch looks up for the "tpu" device."""

import contextlib

import torch

from . import _C, _settings

_initialized = False


def _lazy_init():
    """Starts the runtime (PyTorch calls this before a tpu factory). In a
    child forked after the runtime started, raises RuntimeError: "Cannot
    re-initialize tpu in forked subprocess..." (the PJRT client's threads
    stayed in the parent)."""
    global _initialized
    if not is_initialized():
        _C._start()
        _initialized = True


def is_initialized():
    return _initialized and not _is_in_bad_fork()


def _is_in_bad_fork():
    """True in a process forked after its parent started the tpu runtime:
    nothing there may use tpu (PyTorch then skips seeding tpu, too)."""
    return _C._is_in_bad_fork()


def is_available():
    """True when the PJRT plugin loads and reports at least one device."""
    return _C._device_count() > 0


def device_count():
    return _C._device_count()


def current_device():
    return _C._current_device()


def _index(device):
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"expected a tpu device, got {device}")
    return current_device() if device.index is None else device.index


def set_device(device):
    _C._set_device(_index(device))


def synchronize(device=None):
    """Waits for all work launched on the device (all devices when None)."""
    _C._synchronize(-1 if device is None else _index(device))


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device):
        self.index = _index(device)
        self.prev = -1

    def __enter__(self):
        self.prev = current_device()
        if self.index != self.prev:
            set_device(self.index)

    def __exit__(self, *exc):
        if self.prev != self.index:
            set_device(self.prev)
        return False


def default_generator(index=None):
    return _C._default_generator(_index(index))


def manual_seed(seed):
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed):
    for i in range(max(device_count(), 1)):
        _C._default_generator(i).manual_seed(int(seed))


def seed():
    return default_generator().seed()


def seed_all():
    s = seed()
    manual_seed_all(s)


def initial_seed():
    return default_generator().initial_seed()


def get_rng_state(device=None):
    return default_generator(device).get_state()


def set_rng_state(new_state, device=None):
    default_generator(device).set_state(new_state)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def Event(enable_timing=False, blocking=False, interprocess=False):
    """torch.Event on the tpu device (torch.cuda.Event's counterpart): it
    is reached when the work launched before it has finished, and with
    enable_timing its elapsed_time is milliseconds between two of them."""
    return torch.Event("tpu", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


# --- streams -------------------------------------------------------------------
# One in-order queue per device (PJRT orders work by data dependencies):
# every stream is the device's default stream, so code written for CUDA's
# streams runs, in order.

def Stream(device=None, priority=0):
    return torch.Stream(f"tpu:{_index(device)}", priority=priority)


def current_stream(device=None):
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None):
    return current_stream(device)


def set_stream(stream):
    torch.accelerator.set_stream(stream)


def stream(stream):
    """Context manager that makes |stream| current (None: no change)."""
    return contextlib.nullcontext() if stream is None else stream


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation=True):
    """XLA supports bfloat16 on every platform."""
    return True


# --- memory --------------------------------------------------------------------
# Counted as PyTorch counts CUDA memory: the bytes of live tensor storages
# (not XLA's scratch inside a program), kept by the tpu allocator, which is
# PyTorch's DeviceAllocator for tpu: torch.accelerator's memory functions and
# these read the same statistics. PJRT allocates and frees device memory
# itself, so there is no cache: reserved equals allocated and empty_cache has
# nothing to release.

def memory_stats(device=None):
    """PyTorch's allocator statistics ("allocated_bytes.all.current" and the
    rest) for the device."""
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None):
    """Bytes held by tensors on the device."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None):
    """The peak of memory_allocated since start or reset_peak_memory_stats."""
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None):
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None):
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None):
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def _format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 10240 or unit == "TiB":
            return f"{n:6d} {unit:<3}"
        n //= 1024


def _format_count(n):
    return f"{n:6d}    " if abs(n) < 750_000 else f"{n // 1000:6d} K  "


def memory_summary(device=None, abbreviated=False):
    """A printable table of the device's allocator statistics, laid out as
    torch.cuda.memory_summary's: current, peak, total allocated and freed
    bytes and counts of live tensor storages, per pool (small: under 1 MiB)
    unless |abbreviated|. Every storage is its own PJRT buffer and nothing is
    cached, so reserved equals allocated and no memory is non-releasable."""
    index = _index(device)
    stats = memory_stats(index)
    rule = "=" * 75
    lines = [rule, f"{f'torchtpu memory summary, device ID {index}':^75}", rule,
             "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    metrics = [("allocated_bytes", "Allocated memory", _format_bytes),
               ("active_bytes", "Active memory", _format_bytes),
               ("requested_bytes", "Requested memory", _format_bytes),
               ("reserved_bytes", "Reserved memory", _format_bytes),
               ("allocation", "Allocations", _format_count),
               ("active", "Active allocs", _format_count),
               ("segment", "Device buffers", _format_count)]
    pools = [("all", None), ("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
    for key, name, fmt in metrics:
        lines.append("-" * 75)
        for pool, label in pools[:1] if abbreviated else pools:
            cells = [fmt(stats.get(f"{key}.{pool}.{field}", 0)) for field in ("current", "peak", "allocated", "freed")]
            lines.append(f" {(label or name)[:21]:<21} | " + " | ".join(cells) + " ")
    lines.append(rule)
    return "|" + "|\n|".join(lines) + "|\n"


def memory_snapshot(device=None):
    """The live tensor storages, as torch.cuda.memory_snapshot() lists its
    segments: one dict per storage (each is one PJRT buffer: one segment, one
    active block), oldest first, with "device", "address" (the storage's
    data_ptr), "total_size", "allocated_size", "active_size",
    "requested_size", "stream" (0), "segment_type" ("small" under 1 MiB,
    else "large") and "blocks". A storage whose buffer has not been written
    yet counts its bytes, as memory_allocated does; its segment's
    "materialized" is False. All devices when |device| is None."""
    segments = []
    for index in (range(device_count()) if device is None else [_index(device)]):
        for address, nbytes, has_buffer in _C._live_storages(index):
            block = {"address": address, "size": nbytes, "requested_size": nbytes, "frames": [],
                     "state": "active_allocated"}
            segments.append({"device": index, "address": address, "total_size": nbytes,
                             "allocated_size": nbytes, "active_size": nbytes, "requested_size": nbytes,
                             "stream": 0, "segment_type": "small" if nbytes < 2**20 else "large",
                             "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                             "blocks": [block], "materialized": has_buffer})
    return segments


def empty_cache():
    """Nothing to release: freed tensors return their memory to PJRT at once."""


def set_per_process_memory_fraction(fraction, device=None):
    """Caps the memory tensors on the device may hold at |fraction| (0 to 1)
    of its capacity (get_device_properties().total_memory), as
    torch.cuda.set_per_process_memory_fraction does: an op whose outputs
    would pass the cap raises torch.OutOfMemoryError before it runs."""
    index = _index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(index, fraction)


def get_per_process_memory_fraction(device=None):
    """The cap set_per_process_memory_fraction set (1.0 until then)."""
    return _C._memory_fraction(_index(device))


def mem_get_info(device=None):
    """(free, total) bytes of device memory: from the plugin's allocator
    statistics where it keeps them (CUDA, TPU), the host's available memory
    on the CPU plugin, whose device memory is host memory."""
    return torch.accelerator.get_memory_info(_index(device))


def get_device_name(device=None):
    info = _C._info()
    return f"{info['platform']}:{info['devices'][_index(device)]}"


class _DeviceProperties:
    """What get_device_properties reports: the name (platform:kind), the
    PJRT platform and device kind, total_memory in bytes, and peak_flops
    (TORCHTPU_PEAK_FLOPS, else None)."""

    def __init__(self, index):
        info = _C._info()
        self.name = get_device_name(index)
        self.platform = info["platform"]
        self.device_kind = info["devices"][index]
        self.total_memory = mem_get_info(index)[1]
        self.peak_flops = _settings.peak_flops()

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"device_kind='{self.device_kind}', total_memory={self.total_memory // 2**20}MB, "
                f"peak_flops={self.peak_flops})")


_FLUSHES = {}


def flushes_denormals(device=None):
    """Whether the device's float arithmetic flushes subnormal numbers to
    zero (results, and inputs read as zero): TPUs do, and XLA's CPU plugin
    does (it sets the processor's flush-to-zero and denormals-are-zero modes
    around every program; docs/errors.md). PyTorch's CPU and CUDA kernels
    keep them unless torch.set_flush_denormal(True). Measured once per
    device: 1e-38 * 0.01 in float32."""
    index = _index(device)
    if index not in _FLUSHES:
        x = torch.tensor([1e-38], device=f"tpu:{index}")
        _FLUSHES[index] = bool((x * 0.01).cpu()[0] == 0)
    return _FLUSHES[index]


def get_device_properties(device=None):
    return _DeviceProperties(_index(device))
