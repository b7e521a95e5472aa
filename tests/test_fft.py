"""torch.fft (the _fft_c2c / _fft_r2c / _fft_c2r rules) against PyTorch on CPU."""
import pytest
import torch

from conftest import compare, make

TOL = dict(rtol=1e-4, atol=1e-4)


REAL_IN = [
    lambda x: torch.fft.rfft(x),
    lambda x: torch.fft.rfft(x, n=9, dim=0, norm="ortho"),
    lambda x: torch.fft.fft(x, dim=-2),                   # a real input's full spectrum
    lambda x: torch.fft.rfft2(x, s=(3, 8), norm="forward"),
    lambda x: torch.fft.rfftn(x),
    lambda x: torch.fft.ihfft(x),
    lambda x: torch.fft.ihfftn(x, dim=(0, 2)),
    lambda x: torch.fft.fftn(x.reshape(2, 1, 2, 6, 5), norm="ortho"),  # 5 dims: two groups
    lambda x: torch.fft.rfftn(x.reshape(2, 1, 2, 6, 5)),
]
COMPLEX_IN = [
    lambda x: torch.fft.fft(x),
    lambda x: torch.fft.ifft(x, n=3, dim=1),
    lambda x: torch.fft.fft2(x, norm="ortho"),
    lambda x: torch.fft.ifftn(x, norm="forward"),
    lambda x: torch.fft.irfft(x),
    lambda x: torch.fft.irfft(x, n=7, dim=0, norm="ortho"),
    lambda x: torch.fft.irfftn(x, s=(4, 6)),
    lambda x: torch.fft.hfft(x),
    lambda x: torch.fft.hfftn(x, dim=(0, 2)),
    lambda x: torch.fft.irfftn(x.reshape(2, 1, 2, 6, 5)),  # 5 dims: complex then real group
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("i", range(len(REAL_IN)))
def test_real_input(no_fallbacks, i, dtype):
    compare(REAL_IN[i], make((4, 6, 5), dtype), **TOL)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("i", range(len(COMPLEX_IN)))
def test_complex_input(no_fallbacks, i, dtype):
    compare(COMPLEX_IN[i], make((4, 6, 5), dtype), **TOL)


def test_empty_batch(no_fallbacks):
    # (PyTorch's CPU kernel (MKL) rejects an empty batch, so only the result's metadata is checked.)
    got = torch.fft.rfft(make((0, 8), torch.float32).to("tpu"))
    assert got.shape == (0, 5) and got.dtype == torch.complex64 and got.device.type == "tpu"
    got = torch.fft.ifft(make((8, 0), torch.complex64).to("tpu"), dim=0)
    assert got.shape == (8, 0) and got.dtype == torch.complex64


def test_nan_spreads_over_the_transformed_dim_only(no_fallbacks):
    x = make((3, 4), torch.float32)
    x[1, 2] = float("nan")
    got = compare(lambda v: torch.fft.rfft(v), x)
    assert got.cpu()[1].isnan().all() and not got.cpu()[[0, 2]].isnan().any()


def test_conj_physical(no_fallbacks):
    compare(torch.conj_physical, make((3, 4), torch.complex64))
    compare(torch.conj_physical, make((3,), torch.float32))
    compare(lambda x: x.clone().conj_physical_(), make((2, 2), torch.complex64))
