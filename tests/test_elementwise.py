"""Elementwise results bit for bit against the CPU where PyTorch's kernels pin
them down: the type an in-place op computes in, division with a rounding mode
in half types (which the CPU kernels compute in half-type steps), signed
zeros, nextafter, abs of unsigned integers."""
import pytest
import torch

import torchtpu  # noqa: F401

SPECIAL = [0.0, -0.0, 1.0, -1.0, 5.0, float("inf"), float("nan"), 3.0, -3.0, 0.0]
SPECIAL_DIVISORS = [1.0, 1.0, 0.0, 0.0, -0.0, 2.0, 1.0, float("inf"), float("-inf"), -2.0]


def assert_identical(got, want):
    """Equal values, equal signs of zeros, NaN where NaN."""
    got = got.cpu()
    assert got.dtype == want.dtype
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan], want[~nan])
    assert torch.equal(torch.signbit(got[~nan]), torch.signbit(want[~nan]))


def operands(dtype, n=20000):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor(SPECIAL), torch.randn(n, generator=g) * 10]).to(dtype)
    y = torch.cat([torch.tensor(SPECIAL_DIVISORS), torch.randn(n, generator=g)]).to(dtype)
    return x, y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_rounding_division(dtype, mode):
    """Half types: the quotient rounds to the half type before it is
    truncated, and floor division rounds each step (5% of bfloat16 trunc
    quotients differed by one before)."""
    x, y = operands(dtype)
    assert_identical(torch.div(x.to("tpu"), y.to("tpu"), rounding_mode=mode), torch.div(x, y, rounding_mode=mode))
    assert_identical(x.to("tpu").div_(y.to("tpu"), rounding_mode=mode), x.clone().div_(y, rounding_mode=mode))
    if mode == "floor":
        assert_identical(x.to("tpu") // 3, x // 3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_nextafter_steps_in_its_own_type(dtype):
    x, y = operands(dtype)
    assert_identical(torch.nextafter(x.to("tpu"), y.to("tpu")), torch.nextafter(x, y))


@pytest.mark.parametrize("name,fn", [
    ("lt_", lambda d: torch.tensor([-0.5, 0.5, 1.5], device=d).lt_(torch.tensor([0, 0, 1], device=d))),
    ("eq_", lambda d: torch.tensor([0.5, 1.0, -0.0], device=d).eq_(torch.tensor([0, 1, 0], device=d))),
    ("ge_", lambda d: torch.tensor([1, 2], device=d).ge_(1.5)),
    ("clamp_u8_int32_bound", lambda d: torch.tensor([6, 250], dtype=torch.uint8, device=d).clamp_(
        min=torch.tensor([-7, 3], dtype=torch.int32, device=d))),
    ("clamp_i64_int32_bound", lambda d: torch.tensor([2 ** 40, -5], device=d).clamp_(
        max=torch.tensor([5, 5], dtype=torch.int32, device=d))),
    ("clamp_bf16_f32_bound", lambda d: torch.tensor([1.5, 5.0], dtype=torch.bfloat16, device=d).clamp_(
        min=torch.tensor([2.1, 2.1], device=d))),
    ("clamp_u8_number", lambda d: torch.tensor([5, 250], dtype=torch.uint8, device=d).clamp_(min=-1)),
])
def test_in_place_ops_compute_in_the_promoted_type(name, fn):
    """An in-place op computes in the promotion of self and its operands,
    then casts into self (a float self compared with an int tensor compared
    in int before)."""
    want, got = fn("cpu"), fn("tpu")
    assert got.dtype == want.dtype
    assert torch.equal(got.cpu(), want)


def test_abs_of_unsigned_and_bool():
    x = torch.tensor([0, 3, 200], dtype=torch.uint8)
    assert torch.equal(x.to("tpu").abs().cpu(), x.abs())
    assert torch.equal(x.to("tpu").abs_().cpu(), x.clone().abs_())
    for device in ["cpu", "tpu"]:
        with pytest.raises(NotImplementedError, match="\"abs_cpu\" not implemented for 'Bool'"):
            torch.tensor([True, False], device=device).abs()
