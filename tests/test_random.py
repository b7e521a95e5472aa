"""Random ops (csrc/lower/random.c) on the tpu generator: reproducible under
torch.manual_seed, drawn from the device's generator (never the CPU's), and
distributed as PyTorch documents. The streams differ from CPU's (as CUDA's
do), so values are tested by their distribution: Kolmogorov-Smirnov
distance to the exact CDF for continuous ones, mean and variance for the
rest. Every test seeds, so a result is the same on every run; the bounds
are what a correct sampler meets except with probability ~1e-4, and a
wrong distribution (a missing scale, a shifted range) fails them."""
import math

import pytest
import torch

import torchtpu  # noqa: F401

N = 20000
# The KS distance a correct sampler of N draws exceeds with probability 1e-4.
KS_BOUND = math.sqrt(-0.5 * math.log(1e-4 / 2) / N)


def ks_distance(x, cdf):
    """Largest gap between the empirical CDF of |x| and |cdf|."""
    x = x.double().flatten().sort().values
    n = x.numel()
    f = cdf(x)
    hi = torch.arange(1, n + 1, dtype=torch.float64) / n
    return float(torch.maximum(hi - f, f - (hi - 1 / n)).max())


def normal_cdf(mean, std):
    return lambda x: torch.special.ndtr((x - mean) / std)


def assert_mean_var(x, mean, var, sigmas=5):
    """Sample mean and variance within |sigmas| standard errors (the
    variance's from the sample's own fourth moment, plus the second-order
    term of a mean estimated from the same sample: it dominates when the
    fourth moment pins the variance, as for a fair coin)."""
    x = x.double().flatten()
    n = x.numel()
    assert abs(float(x.mean()) - mean) <= sigmas * math.sqrt(var / n), (float(x.mean()), mean)
    m4 = float(((x - mean) ** 4).mean())
    bound = sigmas * math.sqrt(max(m4 - var * var, 0) / n) + sigmas ** 2 * var / n
    assert abs(float(x.var()) - var) <= bound, (float(x.var()), var)


@pytest.fixture(autouse=True)
def seeded(no_fallbacks):
    torch.manual_seed(1234)


# --- reproducibility and the device generator -------------------------------------

FACTORIES = {
    "rand": lambda: torch.rand(64, device="tpu"),
    "randn": lambda: torch.randn(64, device="tpu"),
    "randint": lambda: torch.randint(0, 1000, (64,), device="tpu"),
    "rand_like": lambda: torch.rand_like(torch.zeros(64, device="tpu")),
    "randn_like": lambda: torch.randn_like(torch.zeros(64, device="tpu")),
    "randint_like": lambda: torch.randint_like(torch.zeros(64, device="tpu"), 1000),
    "uniform_": lambda: torch.empty(64, device="tpu").uniform_(-2, 3),
    "normal_": lambda: torch.empty(64, device="tpu").normal_(1, 2),
    "normal": lambda: torch.normal(torch.zeros(64, device="tpu"), torch.ones(64, device="tpu")),
    "bernoulli": lambda: torch.bernoulli(torch.full((64,), 0.5, device="tpu")),
    "bernoulli_": lambda: torch.empty(64, device="tpu").bernoulli_(0.5),
    "multinomial": lambda: torch.multinomial(torch.ones(1000, device="tpu"), 64, replacement=True),
    "randperm": lambda: torch.randperm(64, device="tpu"),
    "exponential_": lambda: torch.empty(64, device="tpu").exponential_(),
    "geometric_": lambda: torch.empty(64, device="tpu").geometric_(0.1),
    "log_normal_": lambda: torch.empty(64, device="tpu").log_normal_(),
    "cauchy_": lambda: torch.empty(64, device="tpu").cauchy_(),
    "random_": lambda: torch.empty(64, device="tpu").random_(0, 1000),
    "rrelu": lambda: torch.nn.functional.rrelu(-torch.ones(64, device="tpu"), training=True),
}


@pytest.mark.parametrize("name", FACTORIES)
def test_reproducible_under_manual_seed(name):
    make = FACTORIES[name]
    torch.manual_seed(7)
    a, b = make().cpu(), make().cpu()
    torch.manual_seed(7)
    assert torch.equal(make().cpu(), a)
    assert torch.equal(make().cpu(), b)
    assert not torch.equal(a, b)  # the generator advances
    torch.manual_seed(8)
    assert not torch.equal(make().cpu(), a)


@pytest.mark.parametrize("name", FACTORIES)
def test_draws_from_the_device_generator(name):
    make = FACTORIES[name]
    cpu_state = torch.get_rng_state()
    torch.tpu.manual_seed(11)
    a = make().cpu()
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU generator is untouched
    torch.rand(3)  # moving the CPU generator changes nothing on tpu
    torch.tpu.manual_seed(11)
    assert torch.equal(make().cpu(), a)
    state = torch.tpu.get_rng_state()
    b = make().cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(make().cpu(), b)


# --- continuous distributions: KS distance to the exact CDF --------------------------

CONTINUOUS = {
    "rand": (lambda: torch.rand(N, device="tpu"), lambda x: x.clamp(0, 1)),
    "uniform_": (lambda: torch.empty(N, device="tpu").uniform_(-2, 3), lambda x: ((x + 2) / 5).clamp(0, 1)),
    "randn": (lambda: torch.randn(N, device="tpu"), normal_cdf(0, 1)),
    "normal_": (lambda: torch.empty(N, device="tpu").normal_(1.5, 0.5), normal_cdf(1.5, 0.5)),
    "normal.Tensor_Tensor": (lambda: torch.normal(torch.full((N,), -1.0, device="tpu"), torch.full((N,), 3.0, device="tpu")),
                             normal_cdf(-1, 3)),
    "normal.float_float": (lambda: torch.normal(2.0, 0.25, (N,), device="tpu"), normal_cdf(2, 0.25)),
    "exponential_": (lambda: torch.empty(N, device="tpu").exponential_(2.5), lambda x: 1 - torch.exp(-2.5 * x)),
    "cauchy_": (lambda: torch.empty(N, device="tpu").cauchy_(1.0, 2.0), lambda x: 0.5 + torch.atan((x - 1) / 2) / math.pi),
    "log_normal_": (lambda: torch.empty(N, device="tpu").log_normal_(0.5, 0.75),
                    lambda x: torch.special.ndtr((x.clamp_min(1e-300).log() - 0.5) / 0.75)),
}


@pytest.mark.parametrize("name", CONTINUOUS)
def test_continuous_distribution(name):
    make, cdf = CONTINUOUS[name]
    x = make()
    assert x.device.type == "tpu" and x.dtype == torch.float32
    assert ks_distance(x.cpu(), cdf) < KS_BOUND


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_continuous_dtypes(dtype):
    x = torch.rand(N, device="tpu", dtype=dtype).cpu()
    assert x.dtype == dtype and 0 <= x.min() and x.max() < 1  # bfloat16 rounding never reaches 1
    assert ks_distance(x, lambda v: v.clamp(0, 1)) < KS_BOUND + (2 ** -8 if dtype == torch.bfloat16 else 0)
    y = torch.randn(N, device="tpu", dtype=dtype).cpu()
    assert ks_distance(y, normal_cdf(0, 1)) < KS_BOUND + (2 ** -7 if dtype == torch.bfloat16 else 0)
    z = torch.empty(N, device="tpu", dtype=dtype).uniform_(5, 6).cpu()
    assert 5 <= z.min() and z.max() < 6


def test_moments():
    assert_mean_var(torch.randn(N, device="tpu").cpu(), 0, 1)
    assert_mean_var(torch.empty(N, device="tpu").exponential_(4).cpu(), 0.25, 1 / 16)
    assert_mean_var(torch.empty(N, device="tpu").uniform_(1, 3).cpu(), 2, 4 / 12)
    assert_mean_var(torch.normal(torch.arange(N, device="tpu") * 0.0 + 3, 2.0).cpu(), 3, 4)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_draws_fill_the_real_view(dtype):
    # PyTorch fills view_as_real(self): real and imaginary parts each drawn,
    # a normal's parts with std / sqrt(2) (the imaginary parts were zeros)
    z = torch.randn(N, device="tpu", dtype=dtype).cpu()
    assert z.dtype == dtype
    assert_mean_var(z.real, 0, 0.5)
    assert_mean_var(z.imag, 0, 0.5)
    assert abs(float(torch.corrcoef(torch.stack([z.real, z.imag]).double())[0, 1])) < 5 / math.sqrt(N)
    z = torch.empty(N, device="tpu", dtype=dtype).normal_(2, 3).cpu()
    assert_mean_var(z.real, 2, 4.5)
    assert_mean_var(z.imag, 2, 4.5)
    for z, lo, hi in ((torch.rand(N, device="tpu", dtype=dtype), 0, 1),
                      (torch.empty(N, device="tpu", dtype=dtype).uniform_(-1, 3), -1, 3)):
        for part in (z.cpu().real, z.cpu().imag):
            assert lo <= part.min() and part.max() < hi
            assert ks_distance(part, lambda v: ((v - lo) / (hi - lo)).clamp(0, 1)) < KS_BOUND


# --- discrete distributions ---------------------------------------------------------

def test_randint():
    x = torch.randint(-3, 7, (N,), device="tpu").cpu()
    assert x.dtype == torch.int64 and x.min() == -3 and x.max() == 6
    assert_mean_var(x, 1.5, (10 ** 2 - 1) / 12)
    counts = torch.bincount(x + 3, minlength=10).double()
    expected = N / 10
    assert ((counts - expected).abs() <= 5 * math.sqrt(expected * 0.9)).all(), counts


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.float32, torch.bfloat16, torch.bool])
def test_random_dtypes(dtype):
    x = torch.empty(N, device="tpu", dtype=dtype).random_().cpu()
    hi = {torch.int8: 127, torch.int32: 2 ** 31 - 1, torch.float32: 2 ** 24, torch.bfloat16: 2 ** 8, torch.bool: 1}[dtype]
    assert x.dtype == dtype and x.min() >= 0 and x.double().max() <= hi
    assert_mean_var(x, hi / 2, ((hi + 1) ** 2 - 1) / 12)
    y = torch.empty(N, device="tpu", dtype=dtype).random_(0, 2).cpu()
    assert set(y.double().unique().tolist()) == {0.0, 1.0}


def test_bernoulli():
    p = torch.rand(N)
    x = torch.bernoulli(p.to("tpu")).cpu()
    assert x.dtype == torch.float32 and set(x.unique().tolist()) <= {0.0, 1.0}
    # sum of independent Bernoulli(p_i): mean sum p, variance sum p(1-p)
    assert abs(float(x.sum() - p.sum())) <= 5 * math.sqrt(float((p * (1 - p)).sum()))
    y = torch.empty(N, device="tpu").bernoulli_(0.3).cpu()
    assert_mean_var(y, 0.3, 0.21)
    z = torch.zeros(N, dtype=torch.bool, device="tpu").bernoulli_(torch.full((N,), 0.8, device="tpu")).cpu()
    assert z.dtype == torch.bool
    assert_mean_var(z.double(), 0.8, 0.16)
    assert torch.bernoulli(torch.tensor([0.0, 1.0, 0.0, 1.0], device="tpu")).cpu().tolist() == [0, 1, 0, 1]


def test_geometric():
    x = torch.empty(N, device="tpu").geometric_(0.2).cpu()
    assert x.min() >= 1 and torch.equal(x, x.floor())
    assert_mean_var(x, 1 / 0.2, 0.8 / 0.04)
    assert abs(float((x == 1).double().mean()) - 0.2) <= 5 * math.sqrt(0.16 / N)  # P(X = 1) = p
    assert torch.empty(100, device="tpu", dtype=torch.int64).geometric_(0.5).cpu().min() >= 1


def test_multinomial_with_replacement():
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [2.0, 2.0, 2.0, 0.0]])  # unnormalised rows, zero-probability tail
    x = torch.multinomial(p.to("tpu"), N, replacement=True).cpu()
    assert x.shape == (2, N) and x.dtype == torch.int64
    for row in range(2):
        freq = torch.bincount(x[row], minlength=4).double() / N
        q = p[row].double() / p[row].sum()
        assert ((freq - q).abs() <= 5 * (q * (1 - q) / N).sqrt() + 1e-12).all(), (freq, q)


def test_multinomial_without_replacement():
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    draws = torch.stack([torch.multinomial(p.to("tpu"), 2) for _ in range(2000)]).cpu()
    assert (draws[:, 0] != draws[:, 1]).all() and (draws != 1).all()
    first = torch.bincount(draws[:, 0], minlength=4).double() / 2000
    assert ((first - p.double()).abs() <= 5 * (p * (1 - p) / 2000).double().sqrt() + 1e-12).all(), first
    # the second draw follows p renormalised without the first: P(2nd = 3) = .1*.3/.9 + .6*.3/.4
    second3 = float((draws[:, 1] == 3).double().mean())
    assert abs(second3 - 0.4833) <= 5 * math.sqrt(0.25 / 2000)
    full = torch.multinomial(torch.rand(3, 6, device="tpu"), 6).cpu()
    assert torch.equal(full.sort(1).values, torch.arange(6).expand(3, 6))


def test_randperm():
    for n in [0, 1, 5, 1000]:
        x = torch.randperm(n, device="tpu").cpu()
        assert x.dtype == torch.int64 and torch.equal(x.sort().values, torch.arange(n))
    firsts = torch.stack([torch.randperm(10, device="tpu")[0] for _ in range(500)]).cpu()
    assert_mean_var(firsts, 4.5, 99 / 12)


# --- shapes, views, out= ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rrelu(dtype):
    """In training, negative inputs are scaled by slopes uniform on [lower,
    upper] that noise records (1 for the rest), the gradient is the slope;
    in eval, leaky_relu with the mean slope, noise untouched; rrelu_ writes
    its input."""
    lower, upper = 0.1, 0.4
    x = torch.cat([-torch.rand(N) - 0.5, torch.rand(8) + 0.5]).to(dtype).to("tpu").requires_grad_()
    noise = torch.empty_like(x.detach())
    y = torch.ops.aten.rrelu_with_noise(x, noise, lower, upper, True)
    slopes = noise.cpu().float()
    assert (slopes[N:] == 1).all()
    u = (slopes[:N].double() - lower) / (upper - lower)
    assert ks_distance(u, lambda v: v.clamp(0, 1)) <= KS_BOUND + (0.01 if dtype == torch.bfloat16 else 0)
    torch.testing.assert_close(y.detach().cpu(), (x.detach().cpu() * noise.cpu()))
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), noise.cpu())
    before = noise.clone()
    x_cpu = x.detach().cpu()
    want = torch.nn.functional.rrelu(x_cpu, lower, upper, training=False)
    torch.testing.assert_close(torch.ops.aten.rrelu_with_noise(x.detach(), noise, lower, upper, False).cpu(), want)
    assert torch.equal(noise.cpu(), before.cpu())
    z = x.detach().clone()
    torch.nn.functional.rrelu_(z, lower, upper, training=False)
    torch.testing.assert_close(z.cpu(), want)
    # bounds the wrong way round matter only where a slope is drawn, as on CPU
    positive = torch.ones(3, device="tpu")
    torch.ops.aten.rrelu_with_noise(positive, torch.empty_like(positive), upper, lower, True)


def test_shapes_and_views():
    assert torch.rand(0, 3, device="tpu").shape == (0, 3)
    assert torch.randn((), device="tpu").shape == ()
    assert torch.multinomial(torch.ones(0, 3, device="tpu"), 2, replacement=True).shape == (0, 2)
    assert torch.multinomial(torch.tensor([2.0], device="tpu"), 3, True).cpu().tolist() == [0, 0, 0]
    assert torch.multinomial(torch.tensor([[0.0, 1.0], [1.0, 0.0]], device="tpu"), 1).cpu().tolist() == [[1], [0]]
    assert torch.bernoulli(torch.tensor(1.0, device="tpu")).cpu().item() == 1.0
    assert torch.bernoulli(torch.empty(0, device="tpu")).shape == (0,)
    assert torch.empty(3, device="tpu").uniform_(2, 2).cpu().tolist() == [2.0, 2.0, 2.0]
    x = torch.zeros(4, 6, device="tpu")
    x.t()[1:3].normal_()  # a strided view: only its elements change
    cpu = x.cpu()
    assert (cpu[:, 1:3] != 0).all() and (cpu[:, [0, 3, 4, 5]] == 0).all()
    out = torch.empty(5, dtype=torch.int64, device="tpu")
    torch.randint(3, (2, 3), out=out, device="tpu")
    assert out.shape == (2, 3) and out.cpu().max() < 3
    m = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.multinomial(torch.ones(4, device="tpu"), 3, out=m)
    assert m.shape == (3,) and m.cpu().unique().numel() == 3


# --- bad input: PyTorch's exception and message ---------------------------------------

BAD = {
    "uniform_ from > to": lambda d: torch.empty(3, device=d).uniform_(2, 1),
    "rand of integers": lambda d: torch.rand(3, device=d, dtype=torch.long),
    "random_ from >= to": lambda d: torch.empty(3, device=d).random_(3, 3),
    "random_ bool to": lambda d: torch.empty(3, device=d, dtype=torch.bool).random_(0, 3),
    "random_ int8 from": lambda d: torch.empty(3, device=d, dtype=torch.int8).random_(200, None),
    "randint high <= low": lambda d: torch.randint(5, 5, (3,), device=d),
    "bernoulli_ p > 1": lambda d: torch.empty(3, device=d).bernoulli_(1.5),
    "bernoulli p tensor > 1": lambda d: torch.bernoulli(torch.tensor([0.5, 1.5], device=d)),
    "bernoulli p tensor NaN": lambda d: torch.empty(2, device=d).bernoulli_(torch.tensor([float("nan"), 0.5], device=d)),
    "geometric_ p = 1.5": lambda d: torch.empty(3, device=d).geometric_(1.5),
    "multinomial 0 samples": lambda d: torch.multinomial(torch.ones(3, device=d), 0),
    "multinomial too many": lambda d: torch.multinomial(torch.ones(3, device=d), 4),
    "multinomial negative": lambda d: torch.multinomial(torch.tensor([1.0, -1.0], device=d), 1),
    "multinomial inf": lambda d: torch.multinomial(torch.tensor([1.0, float("inf")], device=d), 1, True),
    "multinomial zero row": lambda d: torch.multinomial(torch.tensor([[1.0, 1.0], [0.0, 0.0]], device=d), 1, True),
    "multinomial integers": lambda d: torch.multinomial(torch.ones(3, dtype=torch.long, device=d), 1),
    "multinomial 3-d": lambda d: torch.multinomial(torch.ones(2, 2, 2, device=d), 1),
    "rrelu noise shape": lambda d: torch.ops.aten.rrelu_with_noise(torch.ones(3, 4, device=d),
                                                                   torch.ones(2, device=d), 0.1, 0.3, True),
    "rrelu noise dtype": lambda d: torch.ops.aten.rrelu_with_noise(torch.ones(3, device=d),
                                                                   torch.ones(3, device=d).double(), 0.1, 0.3, True),
    "rrelu lower > upper": lambda d: torch.ops.aten.rrelu_with_noise(torch.tensor([1.0, -1.0], device=d),
                                                                     torch.ones(2, device=d), 0.5, 0.3, True),
    "rrelu of integers": lambda d: torch.ops.aten.rrelu_with_noise(torch.ones(3, device=d).int(),
                                                                   torch.ones(3, device=d).int(), 0.1, 0.3, True),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input(name):
    fn = BAD[name]
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(Exception) as tpu:
        fn("tpu")
    assert type(tpu.value) is type(cpu.value), (tpu.value, cpu.value)
    if name != "multinomial 3-d":  # its shape error is the meta function's wording
        assert str(tpu.value) == str(cpu.value)


def test_rng_higher_order_ops_on_tpu():
    """run_and_save_rng_state / run_with_rng_state (torch.compile's
    partitioner puts them around random ops that activation checkpointing
    recomputes): the replay draws what the first run drew, as on the CPU."""
    save = torch.ops.higher_order.run_and_save_rng_state
    replay = torch.ops.higher_order.run_with_rng_state
    for device in ("cpu", "tpu"):
        state, first = save(torch.ops.aten.rand.default, [5], device=device)
        torch.rand(3, device=device)  # moves the generator on
        again = replay(state, torch.ops.aten.rand.default, [5], device=device)
        assert first.device.type == device
        torch.testing.assert_close(again.cpu(), first.cpu(), rtol=0, atol=0)
        assert not torch.equal(torch.rand(5, device=device).cpu(), first.cpu())
