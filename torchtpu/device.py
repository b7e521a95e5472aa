"""torch.tpu: the device module PyTorch looks up for the "tpu" device."""
import os

import torch

from . import _C

_initialized = False


def _lazy_init():
    global _initialized
    if not _initialized:
        _C._start()
        _initialized = True


def is_initialized():
    return _initialized


def _is_in_bad_fork():
    return False


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


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation=True):
    """XLA supports bfloat16 on every platform."""
    return True


# --- memory --------------------------------------------------------------------
# Counted as PyTorch counts CUDA memory: the bytes of live tensor storages
# (not XLA's scratch inside a program). PJRT allocates and frees device
# memory itself, so there is no cache: reserved equals allocated and
# empty_cache has nothing to release.

def memory_allocated(device=None):
    """Bytes held by tensors on the device."""
    return _C._memory(_index(device))[0]


def max_memory_allocated(device=None):
    """The peak of memory_allocated since start or reset_peak_memory_stats."""
    return _C._memory(_index(device))[1]


def memory_reserved(device=None):
    return memory_allocated(device)


def max_memory_reserved(device=None):
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None):
    _C._reset_peak_memory(_index(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def memory_stats(device=None):
    """The counters of memory_allocated under PyTorch's names."""
    current, peak = _C._memory(_index(device))
    return {"allocated_bytes.all.current": current, "allocated_bytes.all.peak": peak,
            "reserved_bytes.all.current": current, "reserved_bytes.all.peak": peak}


def empty_cache():
    """Nothing to release: freed tensors return their memory to PJRT at once."""


def _host_memory():
    """(available, total) bytes of host memory: the CPU plugin's device memory."""
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.split()[1:]}
        return info["MemAvailable"], info["MemTotal"]
    except (OSError, KeyError, ValueError):
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def mem_get_info(device=None):
    """(free, total) bytes of device memory: from the plugin's allocator
    statistics where it keeps them (CUDA, TPU), the host's available memory
    on the CPU plugin, whose device memory is host memory."""
    index = _index(device)
    stats = _C._device_memory(index)
    if stats is not None and stats[1] >= 0:
        return stats[1] - stats[0], stats[1]
    if _C._info()["platform"] == "cpu":
        return _host_memory()
    raise RuntimeError("tpu: the PJRT plugin reports no memory limit for this device")


def get_device_name(device=None):
    info = _C._info()
    return f"{info['platform']}:{info['devices'][_index(device)]}"
