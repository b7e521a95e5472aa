"""Shared test helpers: run a function on CPU and on tpu, compare the results
with torch.testing tolerances, and make sure nothing fell back to the CPU."""
import pytest
import torch

import torchtpu


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().to("tpu")
        return y.requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else y
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(v) for v in x)
    if isinstance(x, dict):
        return {k: to_tpu(v) for k, v in x.items()}
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def compare(fn, *args, rtol=None, atol=None, equal_nan=True, check_dtype=True, **kwargs):
    """fn(*args) on CPU vs on tpu (args moved there); returns the tpu result."""
    expected = fn(*args, **kwargs)
    got = fn(*to_tpu(args), **to_tpu(kwargs))
    torch.testing.assert_close(to_cpu(got), expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                               check_dtype=check_dtype)
    if isinstance(got, torch.Tensor):
        assert got.device.type == "tpu"
    return got


@pytest.fixture
def no_fallbacks():
    """Fails the test if any op ran through the CPU fallback."""
    torchtpu.reset_stats()
    yield
    fallbacks = torchtpu.stats()["fallbacks"]
    assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"
