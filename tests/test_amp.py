"""Mixed precision on tpu: torch.autocast("tpu") follows PyTorch's shared
policy (the one CUDA registers), in eager and compiled graphs, and
torch.amp.GradScaler("tpu") scales, unscales and updates as on the CPU,
without falling back."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torchtpu

from conftest import to_cpu, to_tpu
from models import MLP

LOW = [torch.bfloat16, torch.float16]


def low(x, dtype):
    return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def f32(x, dtype=None):
    return x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def cast(fn, how):
    """|fn| on the CPU with the policy's casts made by hand: |how| applied to
    every input."""
    return lambda inputs, dtype: fn(*[how(x, dtype) for x in inputs])


def cross_entropy_by_hand(inputs, dtype):
    # cross_entropy passes log_softmax its input's dtype explicitly, which
    # the policy keeps (it sets float32 only where no dtype is given); the
    # nll_loss then runs in float32
    x, y = inputs
    return F.nll_loss(f32(F.log_softmax(x, -1, dtype=x.dtype)) if dtype != torch.float64 else
                      F.log_softmax(x, -1), y)


# (name, function, inputs, the function with the policy's casts on the CPU)
CASES = [
    ("linear", F.linear, lambda: [torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)], low),
    ("matmul", torch.matmul, lambda: [torch.randn(2, 4, 8), torch.randn(8, 5)], low),
    ("addmm", torch.addmm, lambda: [torch.randn(5), torch.randn(4, 8), torch.randn(8, 5)], low),
    ("baddbmm", torch.baddbmm, lambda: [torch.randn(2, 4, 5), torch.randn(2, 4, 8), torch.randn(2, 8, 5)], low),
    ("conv2d", F.conv2d, lambda: [torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)], low),
    ("sdpa", F.scaled_dot_product_attention, lambda: [torch.randn(2, 2, 6, 8) for _ in range(3)], low),
    ("softmax", lambda x: torch.softmax(x, -1), lambda: [torch.randn(4, 16)], f32),
    ("log_softmax", lambda x: torch.log_softmax(x, -1), lambda: [torch.randn(4, 16)], f32),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (16,), w, b),
     lambda: [torch.randn(4, 16), torch.randn(16), torch.randn(16)], f32),
    ("exp", torch.exp, lambda: [torch.randn(4, 16)], f32),
    ("sum", torch.sum, lambda: [torch.randn(4, 16)], f32),
    ("mse_loss", F.mse_loss, lambda: [torch.randn(4, 16), torch.randn(4, 16)], f32),
    ("cross_entropy", F.cross_entropy, lambda: [torch.randn(4, 16), torch.randint(0, 16, (4,))], None),
    # float32 as PyTorch's CPU policy has it: no kernel takes half types
    ("ctc_loss", lambda lp, tg, il, tl: F.ctc_loss(lp, tg, il, tl),
     lambda: [torch.randn(10, 2, 5).log_softmax(2), torch.tensor([[1, 2, 2], [3, 1, 4]]), torch.tensor([10, 9]),
              torch.tensor([3, 2])], f32),
]


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("name,fn,make,how", CASES, ids=[c[0] for c in CASES])
def test_autocast_policy(no_fallbacks, dtype, name, fn, make, how):
    """Inside autocast, each op computes in the dtype PyTorch's policy gives
    it (inputs come in as float32 and as the low dtype): the result's dtype
    and value are the CPU's with those casts made by hand."""
    by_hand = cross_entropy_by_hand if how is None else cast(fn, how)
    torch.manual_seed(0)
    for inputs in (make(), [low(x, dtype) for x in make()]):
        expected = by_hand(inputs, dtype)
        with torch.autocast("tpu", dtype=dtype):
            got = fn(*to_tpu(inputs))
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        try:
            torch.testing.assert_close(got.cpu(), expected)
        except AssertionError:
            # Roundings in the low dtype may differ from the CPU's by an ulp
            # (ours round once from float32): then the result must be within
            # the low dtype's tolerance of the float64 result of the same
            # rounded inputs.
            ref = by_hand([low(x, dtype).double() if x.is_floating_point() else x for x in inputs], torch.float64)
            tol = {torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5), torch.float16: dict(rtol=1e-3, atol=1e-5)}[dtype]
            torch.testing.assert_close(got.cpu().double(), ref, **tol)


def test_autocast_leaves_other_ops_and_devices_alone(no_fallbacks):
    """Ops outside the lists keep their input dtype; CPU tensors inside a tpu
    region and tpu ops in a disabled region are not cast; mixed inputs of a
    promoting op compute at the widest."""
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert (x.to("tpu") + 1).relu().dtype == torch.float32
        assert (x @ w).dtype == torch.float32  # on the CPU
        with torch.autocast("tpu", enabled=False):
            assert (x.to("tpu") @ w.to("tpu")).dtype == torch.float32
        half = x.to("tpu", torch.bfloat16)
        got = torch.addcmul(half, half, x.to("tpu"))
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), torch.addcmul(half.cpu().float(), half.cpu().float(), x))


def test_autocast_refuses_binary_cross_entropy():
    """As on CUDA: binary_cross_entropy is unsafe to autocast, PyTorch's
    error and message."""
    p, t = torch.rand(4, device="tpu"), torch.rand(4, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, t)
        F.binary_cross_entropy_with_logits(p, t)  # the safe form runs


@pytest.mark.parametrize("dtype", LOW)
def test_autocast_training_step_eager_and_compiled(no_fallbacks, dtype):
    """An MLP's step under autocast: eager and compiled tpu agree with each
    other and with CPU doing the policy's casts by hand (matmuls in the low
    dtype, the loss in float32); gradients reach the float32 weights."""
    torch.manual_seed(0)
    model, x, y = MLP(), torch.randn(8, 32), torch.randint(0, 10, (8,))

    def by_hand(m, x, y):
        h = x
        for layer in m.net:
            if isinstance(layer, torch.nn.Linear):
                h = F.linear(h.to(dtype), layer.weight.to(dtype), layer.bias.to(dtype))
            else:
                h = layer(h)
        loss = F.cross_entropy(h.float(), y)
        loss.backward()
        return loss

    def step(m, x, y):
        with torch.autocast("tpu", dtype=dtype):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        return loss

    ref = by_hand(model, x, y)
    results = []
    for compiled in (False, True):
        m = copy.deepcopy(model).to("tpu")
        m.zero_grad(set_to_none=True)
        run = torch.compile(step, backend="tpu") if compiled else step
        loss = run(m, *to_tpu([x, y]))
        assert loss.dtype == torch.float32
        results.append([loss.cpu()] + [p.grad.cpu() for p in m.parameters()])
    expected = [ref.detach()] + [p.grad for p in model.parameters()]
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=2e-3, atol=2e-3)
    for eager, compiled, cpu in zip(*results, expected):
        assert eager.dtype == cpu.dtype == torch.float32
        torch.testing.assert_close(eager, cpu, **tol)
        torch.testing.assert_close(compiled, eager, **tol)


def test_grad_scaler_matches_cpu(no_fallbacks):
    """GradScaler on tpu against GradScaler on the CPU over steps that
    overflow (a NaN, later an inf, in one grad: the step is skipped and the
    scale backs off) and clean runs long enough to grow: grads after
    unscale_, parameters, scale and growth tracker agree every step."""
    torch.manual_seed(0)
    model = MLP()
    runs = {}
    for device in ("cpu", "tpu"):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=2)
        history = []
        for step in range(7):
            x = torch.randn(8, 32, generator=torch.Generator().manual_seed(step))
            opt.zero_grad(set_to_none=True)
            scaler.scale(m(x.to(device)).square().mean()).backward()
            if step in (1, 4):
                m.net[0].weight.grad[0, 0] = float("nan") if step == 1 else float("inf")
            scaler.unscale_(opt)
            grads = [p.grad.cpu() for p in m.parameters()]
            scaler.step(opt)
            scaler.update()
            history.append((scaler.get_scale(), int(scaler._growth_tracker.item()), grads,
                            [p.detach().cpu().clone() for p in m.parameters()]))
        runs[device] = history
    scales = [h[0] for h in runs["cpu"]]
    assert any(b < a for a, b in zip(scales, scales[1:])) and any(b > a for a, b in zip(scales, scales[1:]))
    for (cs, ct, cg, cp), (ts, tt, tg, tp) in zip(runs["cpu"], runs["tpu"]):
        assert (cs, ct) == (ts, tt)
        for a, b in zip(cg + cp, tg + tp):
            torch.testing.assert_close(b, a, equal_nan=True)


@pytest.mark.parametrize("bad", [None, "inf", "nan"])
def test_unscale_kernel_mixed_dtypes(no_fallbacks, bad):
    """The unscale op itself on grads of every float dtype (GradScaler
    refuses half grads, a direct call does not): half grads unscale in
    float32, found_inf is set by any inf or NaN and never cleared."""
    grads = [torch.randn(5, 3) * 1000, torch.randn(7).to(torch.float16) * 1000,
             torch.randn(4, 4).to(torch.bfloat16) * 1000, torch.randn(3).double()]
    if bad:
        grads[2][1, 1] = float(bad)
    inv_scale = torch.tensor(1 / 3.0)
    for found in (0.0, 1.0):
        cpu = [g.clone() for g in grads]
        cpu_found = torch.tensor(found)
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, cpu_found, inv_scale)
        tpu, tpu_found = to_tpu([g.clone() for g in grads]), torch.tensor(found, device="tpu")
        torch._amp_foreach_non_finite_check_and_unscale_(tpu, tpu_found, inv_scale.to("tpu"))
        assert tpu_found.item() == cpu_found.item() == (1.0 if bad or found else 0.0)
        for a, b in zip(cpu, to_cpu(tpu)):
            assert b.dtype == a.dtype
            torch.testing.assert_close(b, a, equal_nan=True, rtol=0, atol=0)


def test_unscale_is_a_few_programs_for_any_number_of_grads(no_fallbacks):
    """The finite check and the unscale take one program each for the whole
    list (PyTorch's kernel is one launch too), not one per grad."""
    for n in (4, 40):
        grads = [torch.randn(3, 5, device="tpu") for _ in range(n)]
        found, inv_scale = torch.zeros(1, device="tpu"), torch.tensor(0.5, device="tpu")
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale)
        before = torchtpu.stats()["ops"]
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale)
        assert torchtpu.stats()["ops"] - before <= 8, n
