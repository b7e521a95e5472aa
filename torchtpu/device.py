"""torch.tpu: the device module PyTorch looks up for the "tpu" device."""
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


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def get_device_name(device=None):
    info = _C._info()
    return f"{info['platform']}:{info['devices'][_index(device)]}"
