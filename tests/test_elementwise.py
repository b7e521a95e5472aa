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


@pytest.mark.parametrize("op", [torch.complex, torch.polar])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complex_and_polar(op, dtype):
    """One program each (they went through the decomposition, several), the
    CPU's values, the layout its TensorIterator gives (a transposed pair
    makes a transposed result; it was contiguous), out= and gradients."""
    torchtpu.reset_stats()
    a = torch.rand(64, 48, dtype=dtype).t() + 0.5
    b = torch.randn(48, dtype=dtype)[:, None] * 3  # broadcast
    want = op(a, b)
    got = op(a.to("tpu"), b.to("tpu"))
    assert got.dtype == want.dtype and got.stride() == want.stride() == (1, 48)
    torch.testing.assert_close(got.cpu(), want)
    out = torch.empty(0, dtype=want.dtype, device="tpu")
    op(a.to("tpu"), b.to("tpu"), out=out)
    assert out.stride() == want.stride()
    torch.testing.assert_close(out.cpu(), want)
    assert torchtpu.stats()["decompositions"] == {} and torchtpu.stats()["fallbacks"] == {}
    grads = []
    for d in ("cpu", "tpu"):
        x, y = a.detach().to(d).requires_grad_(), b.detach().to(d).requires_grad_()
        (op(x, y) * (1 + 2j)).real.sum().backward()
        grads.append((x.grad.cpu(), y.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("case", [
    lambda d: torch.complex(torch.ones(2, dtype=torch.long, device=d), torch.ones(2, dtype=torch.long, device=d)),
    lambda d: torch.complex(torch.ones(2, device=d), torch.ones(2, dtype=torch.float64, device=d)),
    lambda d: torch.polar(torch.ones(3, device=d), torch.ones(5, device=d)),
    lambda d: torch.polar(torch.ones(2, device=d), torch.ones(2, device=d), out=torch.empty(0, device=d)),
], ids=["long", "mixed", "broadcast", "out_dtype"])
def test_complex_and_polar_errors(case):
    """The CPU kernel's checks and messages (the meta function cast a mixed
    pair and accepted it)."""
    msgs = []
    for d in ("cpu", "tpu"):
        with pytest.raises(RuntimeError) as info:
            case(d)
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1]


_X = torch.tensor([1 + 2j, -0.5 + 0.25j, 3 - 1j, 0j])
_M = torch.tensor([True, False, True, False])
COMPLEX_NUMBER_CASES = {
    "full": lambda x, m: torch.full((2,), 1j, device=x.device),
    "full_complex128": lambda x, m: torch.full((2,), 1 - 1j, dtype=torch.complex128, device=x.device),
    "fill_": lambda x, m: x.clone().fill_(1 + 1j),
    "masked_fill": lambda x, m: x.masked_fill(m, 2j),
    "where": lambda x, m: torch.where(m, x, 1j),
    "pow": lambda x, m: x ** (0.5 + 1j),
    "pow_other_imaginary_part": lambda x, m: x ** (0.5 + 1j) - x ** (0.5 + 2j),
    "pow_of_real": lambda x, m: x.real ** (0.5 + 1j),
    "rsub": lambda x, m: 1j - x,
    "eq": lambda x, m: x == 1 + 2j,
    "addcmul": lambda x, m: torch.addcmul(x, x, x, value=1j),
    "add_alpha": lambda x, m: torch.add(x, x, alpha=1 + 1j),
    "mul_Scalar": lambda x, m: torch.ops.aten.mul.Scalar(x, 1j) + torch.ops.aten.mul.Scalar(x.real, 2j),
    "foreach_mul": lambda x, m: torch._foreach_mul([x, x * 2], 1j)[1],
    "linspace": lambda x, m: torch.linspace(-2 + 1j, 5 - 0.5j, 101, device=x.device),
    "logspace": lambda x, m: torch.logspace(0, 1j, 5, device=x.device),
    "lerp": lambda x, m: torch.lerp(x, x * 2, 0.3 + 0.6j) + torch.lerp(x, x * 3, 0.75),
}


@pytest.mark.parametrize("case", COMPLEX_NUMBER_CASES, ids=list(COMPLEX_NUMBER_CASES))
def test_complex_numbers(case):
    """A complex Python number where the schema says Scalar (what C++ code,
    autograd formulas and the Scalar overloads pass) raised "complex Python
    scalars are not supported"; linspace and logspace with complex ends
    gave zeros and ones, lerp of complex values an internal error."""
    fn = COMPLEX_NUMBER_CASES[case]
    want = fn(_X, _M)
    got = fn(_X.to("tpu"), _M.to("tpu"))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want)
    compiled = torch.compile(fn, backend="tpu", dynamic=False)(_X.to("tpu"), _M.to("tpu"))
    torch.testing.assert_close(compiled.cpu(), want)


@pytest.mark.parametrize("op", [lambda a: torch.polar(a, a * 2), lambda a: torch.complex(a, a).angle()],
                         ids=["polar", "angle"])
def test_gradients_whose_formulas_take_complex_numbers(op):
    """polar's and angle's backward formulas multiply by a complex Scalar."""
    grads = []
    for d in ("cpu", "tpu"):
        a = torch.tensor([0.5, 1.5, -2.0], device=d, requires_grad=True)
        op(a).abs().sum().backward() if op(a).is_complex() else op(a).sum().backward()
        grads.append(a.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


def test_a_real_tensor_refuses_a_complex_fill():
    for d in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="value cannot be converted to type float without overflow"):
            torch.zeros(2, device=d).fill_(1j)



@pytest.mark.parametrize("case", [
    lambda r: torch.addcmul(r, r, r, value=1j),
    lambda r: torch.addcdiv(r, r, r, value=1j),
    lambda r: torch.lerp(r, r, 1j),
    lambda r: torch.nn.functional.threshold(r, 1j, 2.0),
    lambda r: torch.addcmul(r.half(), r.half(), r.half(), value=1j),
    lambda r: torch._foreach_addcdiv([r], [r], [r], [1j]),
    lambda r: torch._foreach_addcmul([r], [r], [r], 1j),
    lambda r: torch._foreach_lerp([r], [r], 1j),
    lambda r: torch.clamp(r, min=1j),
    lambda r: torch.add(r, r, alpha=1j),
    lambda r: torch.rsub(r, r, alpha=1j),
    lambda r: torch._foreach_add([r], [r], alpha=1j),
    lambda r: torch.add(r.long(), r.long(), alpha=0.5),
    lambda r: torch.add(r, r, alpha=True),
    lambda r: torch.clamp_min(r, 1j),
    lambda r: torch.clamp(r.long(), min=2 + 0j),
    lambda r: torch.clamp(r.to(torch.complex64), min=1),
    lambda r: torch._foreach_clamp_min([r], [2 + 0j]),
    lambda r: torch._foreach_maximum([r.to(torch.complex64)], 1.0),
])
def test_complex_numbers_a_real_computation_refuses(case):
    """A CPU kernel converts a value, weight or bound to its real compute
    type with a check (the imaginary part must be 0), and refuses complex
    alphas and clamps; tpu computed with the real part, or a complex
    result."""
    r = torch.tensor([0.5, -1.5, 2.0])
    with pytest.raises(Exception) as want:
        case(r)
    for mode in ("strict", "fused"):
        with torchtpu.eager_mode(mode), pytest.raises(type(want.value)) as got:
            case(r.to("tpu"))
        assert str(got.value).split("\n")[0] == str(want.value).split("\n")[0]


def test_complex_numbers_without_an_imaginary_part_are_real_enough():
    r = torch.tensor([0.5, -1.5, 2.0])
    for case in (lambda r: torch.addcmul(r, r, r, value=2 + 0j), lambda r: torch.lerp(r, r, 0.5 + 0j),
                 lambda r: torch._foreach_addcdiv([r], [r], [r], [2 + 0j])[0]):
        want, got = case(r), case(r.to("tpu"))
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)

def test_complex_logaddexp_and_logsumexp():
    """Both raised internal errors on complex inputs (a comparison of a
    complex maximum with a real infinity). The CPU's kernels shift by the
    larger real part; equal infinite real parts and NaNs as the CPU."""
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([1 + 2j, -3 + 0.5j, complex(inf, 1), complex(-inf, 2), complex(nan, 0), 20 + 1j, complex(inf, 0)])
    b = torch.tensor([0.5 - 1j, 2 + 2j, complex(inf, -1), complex(-inf, 0.5), 1 + 1j, -20 + 1j, 1 + 0j])
    want, got = torch.logaddexp(a, b), torch.logaddexp(a.to("tpu"), b.to("tpu")).cpu()
    torch.testing.assert_close(got, want, equal_nan=True)
    x = torch.randn(6, 40, dtype=torch.complex64) * 5
    x[1, 3] = complex(inf, 0)
    for dim in (0, 1, (0, 1)):
        torch.testing.assert_close(torch.logsumexp(x.to("tpu"), dim).cpu(), torch.logsumexp(x, dim), equal_nan=True)
