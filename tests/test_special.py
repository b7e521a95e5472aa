"""torch.special functions on tpu against PyTorch on CPU: the orthogonal
polynomials (recurrences with per-element degrees, closed forms, end points),
Bessel functions and the other special functions, on random values and on
the edges of each formula (NaN, infinities, zero, empty tensors)."""
import math

import pytest
import torch

from conftest import compare

INF, NAN = math.inf, math.nan

POLYNOMIALS = [
    "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
    "laguerre_polynomial_l", "legendre_polynomial_p",
]

# x values on the end points and inside/outside [-1, 1], paired with degrees
# from negative through the closed-form range, fractional and non-finite.
# (A NaN x of degree >= 2 reads an uninitialised value in PyTorch's CPU
# kernels, so NaN x is tested at low degrees only.)
EDGE_X = [-1.0, 0.0, 1.0, 0.5, -0.3, 2.0, -1.5, 1e-9, 0.1, 0.25, 0.75, 3.0]
EDGE_N = [-1.0, 0.0, 1.0, 2.0, 3.7, 9.0, 12.0, 5.0, 4.0, NAN, INF, 200.0]


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial(name, no_fallbacks):
    fn = getattr(torch.special, name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g) * 1.5
    n = torch.randint(-2, 15, (5,), generator=g).float()
    compare(fn, x, n)
    compare(fn, torch.tensor(EDGE_X), torch.tensor(EDGE_N))
    # every pair; degree 200 takes sin/cos of large angles, where libm and XLA differ a little
    compare(fn, torch.tensor(EDGE_X).reshape(-1, 1), torch.tensor(EDGE_N), rtol=1e-4, atol=1e-5)
    compare(fn, torch.full((3,), NAN), torch.tensor([-1.0, 0.0, 1.0]))
    compare(fn, torch.tensor([0.5, 2.0, -0.3]), torch.tensor([1e20, -1e20, 3e19]))  # past int64: 0


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial_scalar_and_empty(name, no_fallbacks):
    fn = getattr(torch.special, name)
    x = torch.linspace(-2, 2, 9)
    compare(fn, x, 3)
    compare(fn, 0.5, torch.arange(-1.0, 12.0))
    compare(fn, torch.tensor(0.25), torch.tensor(7.0))
    compare(fn, torch.empty(0, 3), torch.empty(3))
    out = torch.empty(9).to("tpu")
    fn(x.to("tpu"), torch.tensor(4.0).to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), fn(x, torch.tensor(4.0)))


UNARY = [
    "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
    "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
    "spherical_bessel_j0", "i0", "i0e", "i1", "i1e",
]

# Both sides of every branch point (0, 1e-5, 0.5, 2, 5, 8), large values and
# the non-finite ones.
EDGES = [0.0, -0.0, 1e-6, -1e-6, 0.49, 0.51, 1.99, 2.0, 2.01, 4.99, 5.0, 5.01, 7.99, 8.0, 8.01, 50.0, -50.0,
         80.0, 700.0, 1e4, INF, -INF, NAN]


@pytest.mark.parametrize("name", UNARY)
def test_special_unary(name, no_fallbacks):
    fn = getattr(torch.special, name)
    compare(fn, torch.linspace(-30, 30, 601), rtol=2e-5, atol=1e-6)
    compare(fn, torch.tensor(EDGES), rtol=2e-5, atol=1e-6)
    compare(fn, torch.tensor(3.5))
    compare(fn, torch.empty(0, 2))
    compare(fn, torch.arange(-3, 4))  # integers compute in the default float type
    out = torch.empty(5).to("tpu")
    fn(torch.linspace(0.5, 9, 5).to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), fn(torch.linspace(0.5, 9, 5)))


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e"])
def test_bessel_i_bfloat16(name, no_fallbacks):
    fn = getattr(torch.special, name)
    compare(fn, torch.linspace(-12, 12, 97).bfloat16())
    compare(lambda t: torch.i0_(t.clone()), torch.tensor([-9.0, 0.0, 3.0]))


def test_zeta(no_fallbacks):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 1, generator=g) * 8 + 1.01
    q = torch.randn(7, generator=g) * 5
    compare(torch.special.zeta, x, q)
    # the special cases: x == 1, x < 1, q a non-positive integer, q < 0 with x
    # integral or not, a q far below 0 (a long direct sum), NaN
    xs = torch.tensor([1.0, 0.5, 2.0, 2.0, 3.0, 2.5, 4.0, 2.0, NAN, 2.0, INF])
    qs = torch.tensor([2.0, 2.0, 0.0, -3.0, -2.5, -2.5, -40.5, 1e-3, 1.0, NAN, 2.0])
    compare(torch.special.zeta, xs, qs)
    compare(torch.special.zeta, 2.0, torch.tensor([1.0, 2.0, 10.0]))
    compare(torch.special.zeta, torch.tensor([2.0, 3.0]), 1.5)
    compare(torch.special.zeta, torch.empty(0), torch.empty(0))
    compare(torch.special.zeta, x.double(), q.double())


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_polygamma(n, dtype, no_fallbacks):
    x = torch.cat([torch.linspace(-9.7, 9.7, 40), torch.tensor([-3.0, 0.0, 0.25, 30.0, INF, NAN])]).to(dtype)
    compare(torch.polygamma, n, x, rtol=1e-4 if dtype == torch.float32 else None, atol=1e-4 if dtype == torch.float32 else None)
    compare(lambda t: torch.polygamma(n, t, out=torch.empty_like(t)), x)
    compare(lambda t: t.clone().polygamma_(n), x)


def test_polygamma_negative_n():
    x = torch.rand(3).to("tpu")
    with pytest.raises(RuntimeError, match="does not support negative n"):
        torch.polygamma(-1, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_digamma(dtype, no_fallbacks):
    # ±0 give ∓inf, negative integers NaN, negative non-integers reflect;
    # 10 is PyTorch's exact PSI(10) branch
    x = torch.tensor([0.0, -0.0, -1.0, -2.0, -2.5, 1e-8, -1e-8, INF, -INF, NAN, 1e30, -7.7, 0.5, 3.3, 10.0, 9.0, 123.4])
    compare(torch.digamma, x.to(dtype))
    compare(torch.digamma, (torch.randn(200, generator=torch.Generator().manual_seed(0)) * 20).to(dtype),
            rtol=1e-4, atol=1e-5)
    compare(lambda t: t.clone().digamma_(), x.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_frexp(dtype, no_fallbacks):
    # zeros, infinities, NaN, subnormals of each type, the largest finite
    x = torch.tensor([0.0, -0.0, 1.0, -3.5, INF, -INF, NAN, 1e-40, -1e-45, 3e38, 1.17549435e-38, 0.75, -1e-39])
    if dtype == torch.float64:
        x = torch.cat([x.double(), torch.tensor([5e-324, -2.5e-310, 1e-300, 1.7e308], dtype=torch.float64)])
    x = x.to(dtype)
    got = compare(torch.frexp, x)
    assert got.exponent.dtype == torch.int32
    compare(torch.frexp, torch.randn(3, 4).to(dtype) * 100)
    compare(torch.frexp, torch.empty(0, dtype=dtype))
    m, e = torch.empty(0).to(dtype).to("tpu"), torch.empty(0, dtype=torch.int32).to("tpu")
    torch.frexp(x.to("tpu"), out=(m, e))
    torch.testing.assert_close((m.cpu(), e.cpu()), tuple(torch.frexp(x)), equal_nan=True)


def test_frexp_integer_input():
    with pytest.raises(RuntimeError, match="only supports floating-point"):
        torch.frexp(torch.arange(3).to("tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_airy_ai(dtype, no_fallbacks):
    # every branch: the negative asymptotic form, the series, the positive
    # form (with and without the series run), the underflow to 0, ±inf -> NaN
    x = torch.cat([torch.linspace(-30, 30, 601),
                   torch.tensor([0.0, -2.09, 2.09, 8.3203353, 8.33, 103.8, 104.0, INF, -INF, NAN, -1e6])])
    compare(torch.special.airy_ai, x.to(dtype))
    compare(torch.special.airy_ai, torch.empty(0, 4, dtype=dtype))
    compare(torch.special.airy_ai, torch.tensor(-1.5, dtype=dtype))


def _igamma_inputs(dtype):
    """Each method's region: both series, the continued fraction, the
    asymptotic expansion (20 < a < 200 near x, and a > 200), and the edges."""
    g = torch.Generator().manual_seed(0)
    a = torch.cat([torch.rand(200, generator=g) * 10, torch.rand(100, generator=g) * 100 + 15,
                   torch.rand(60, generator=g) * 3000 + 150]).double()
    x = a * (0.5 + torch.rand(a.shape, generator=g).double())
    x[::7] = torch.rand(x[::7].shape, generator=g).double() * 2
    edge_a = torch.tensor([0.0, 0.0, 0.0, -1.0, 1.0, INF, INF, 2.0, NAN, 1.0, 25.0, 25.0, 300.0, 300.0, 0.5, 3.0])
    edge_x = torch.tensor([1.0, 0.0, -1.0, 1.0, -1.0, 1.0, INF, INF, 1.0, NAN, 25.0, 30.0, 300.0, 310.0, 1.05, 0.4])
    return torch.cat([a, edge_a.double()]).to(dtype), torch.cat([x, edge_x.double()]).to(dtype)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_igamma(upper, dtype, no_fallbacks):
    fn = torch.igammac if upper else torch.igamma
    a, x = _igamma_inputs(dtype)
    compare(fn, a, x)
    compare(fn, a.reshape(-1, 1)[:20], x[:30])  # broadcasting
    compare(fn, torch.empty(0, dtype=dtype), torch.empty(0, dtype=dtype))
    compare(lambda p, q: getattr(p.clone(), fn.__name__ + "_")(q), a, x)


def test_compiled_graph(no_fallbacks):
    """The loop-based rules inside one torch.compile graph."""
    torch._dynamo.reset()

    def f(x, n, a):
        return (torch.special.chebyshev_polynomial_t(x, n) + torch.igamma(a, x.abs())
                + torch.special.zeta(a + 1, x.abs() + 0.5) + torch.special.airy_ai(x) + torch.digamma(x)
                + torch.special.bessel_j0(x) + torch.frexp(x)[0])

    g = torch.Generator().manual_seed(0)
    x, n, a = torch.randn(6, generator=g), torch.arange(6.0), torch.rand(6, generator=g) * 3
    got = torch.compile(f, backend="tpu")(x.to("tpu"), n.to("tpu"), a.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x, n, a))
    torch._dynamo.reset()


@pytest.mark.parametrize("fn", [torch.gcd, torch.lcm])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_gcd_lcm(fn, dtype, no_fallbacks):
    g = torch.Generator().manual_seed(0)
    lo = 0 if dtype == torch.uint8 else -128
    x = torch.randint(lo, 128, (6, 40), generator=g).to(dtype)
    y = torch.randint(lo, 128, (40,), generator=g).to(dtype)
    compare(fn, x, y)  # narrow types wrap like PyTorch's int arithmetic
    compare(fn, torch.tensor([0, 0, 5, 7, 48], dtype=dtype), torch.tensor([0, 7, 0, 7, 18], dtype=dtype))
    compare(lambda a, b: getattr(a.clone(), fn.__name__ + "_")(b), x, y)
    compare(fn, torch.empty(0, dtype=dtype), torch.empty(0, dtype=dtype))


def test_gcd_lcm_extremes(no_fallbacks):
    a = torch.tensor([2**62, -2**63, -12, 10**18])
    b = torch.tensor([2**61, 6, 18, 6 * 10**17])
    compare(torch.gcd, a, b)
    compare(torch.lcm, a, b)


@pytest.mark.parametrize("fn", [torch.gcd, torch.lcm])
def test_gcd_lcm_float_input(fn):
    x = torch.rand(3).to("tpu")
    with pytest.raises(NotImplementedError, match=f'"{fn.__name__}_cpu" not implemented for \'Float\''):
        fn(x, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_erfcx_log_ndtr(dtype, no_fallbacks):
    # both sides of 0, -6.1, -26.7 (inf), 26 (the far form), 5e7, non-finite
    x = torch.cat([torch.linspace(-30, 60, 901),
                   torch.tensor([0.0, -0.0, 26.0, 25.99, -26.7, -26.6, -9.5, -6.09, -6.11, 5e7, 6e7, 1e30,
                                 INF, -INF, NAN])]).to(dtype)
    compare(torch.special.erfcx, x)
    compare(torch.special.log_ndtr, x)
    compare(torch.special.erfcx, torch.empty(0, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ndtri(dtype, no_fallbacks):
    # the middle, both tails (either side of z = 8), the ends and outside
    y = torch.cat([torch.rand(500, generator=torch.Generator().manual_seed(0)),
                   torch.tensor([0.0, 1.0, -0.1, 1.1, 1e-30, 1 - 1e-7, 0.5, 0.1353, 0.8647, 1e-14, 1e-20, NAN])])
    compare(torch.special.ndtri, y.to(dtype))
    compare(torch.special.ndtri, torch.tensor(0.3, dtype=dtype))
