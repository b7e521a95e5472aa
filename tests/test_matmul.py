"""The matrix product kernel (csrc/kernels/matmul.c) through PyTorch: mm,
bmm, addmm, baddbmm, linear and matmul in every operand layout, eager and
compiled, against CPU and a float64 reference; the programs hand it
transposed operands as they lie; bfloat16 products in every layout where the
CPU has AVX-512 BF16; what stays with XLA (plain float32 layouts, other
dtypes, small products). The numeric cases run again without the kernel
(TORCHTPU_KERNELS=attention) in a subprocess."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from conftest import compare_compiled_step, dumped_programs

KERNEL = os.environ.get("TORCHTPU_KERNELS", "1") not in ("0", "attention")
BF16_KERNEL = KERNEL and "BF16" in torchtpu._C._info()["kernels"]


def layout(x, transposed):
    """|x| with the same values, its last two dims stored the other way round
    when |transposed| (a transpose view of a contiguous tensor)."""
    return x.transpose(-1, -2).contiguous().transpose(-1, -2) if transposed else x


def check(got, cpu, exact):
    """|got| agrees with PyTorch CPU's result and is as close to the float64
    result as CPU's is (within a factor 2: both round every step of the sum,
    in a different order)."""
    got = got.cpu()
    torch.testing.assert_close(got, cpu, rtol=1e-4, atol=1e-4)
    ours, theirs = (got.double() - exact).abs(), (cpu.double() - exact).abs()
    assert ours.max() <= 2 * theirs.max() + 1e-7, (ours.max().item(), theirs.max().item())
    assert ours.mean() <= 2 * theirs.mean() + 1e-8, (ours.mean().item(), theirs.mean().item())


SIZES = [(128, 256, 96), (130, 257, 67), (300, 40, 500), (1, 2048, 1024)]  # M, K, N: all >= 2^21


@pytest.mark.parametrize("m,k,n", SIZES)
@pytest.mark.parametrize("lt", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("rt", [False, True], ids=["b", "bT"])
def test_mm_in_every_layout(m, k, n, lt, rt):
    torch.manual_seed(m + k + n)
    a, b = layout(torch.randn(m, k), lt), layout(torch.randn(k, n), rt)
    check(a.to("tpu") @ b.to("tpu"), a @ b, a.double() @ b.double())


@pytest.mark.parametrize("lt", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("rt", [False, True], ids=["b", "bT"])
def test_bmm_and_baddbmm(lt, rt):
    torch.manual_seed(1)
    a, b, c = layout(torch.randn(3, 70, 100), lt), layout(torch.randn(3, 100, 110), rt), torch.randn(3, 70, 110)
    check(torch.bmm(a.to("tpu"), b.to("tpu")), torch.bmm(a, b), torch.bmm(a.double(), b.double()))
    got = torch.baddbmm(c.to("tpu"), a.to("tpu"), b.to("tpu"), beta=0.5, alpha=2.0)
    check(got, torch.baddbmm(c, a, b, beta=0.5, alpha=2.0),
          torch.baddbmm(c.double(), a.double(), b.double(), beta=0.5, alpha=2.0))


def test_linear_matmul_and_strided_operands():
    """linear (addmm with a transposed weight), matmul of a 3-D input (folded
    to mm), and operands that are not transposes (a strided slice, an offset
    view), forward and backward."""
    torch.manual_seed(2)
    x, w, bias = torch.randn(4, 50, 96, requires_grad=True), torch.randn(200, 96, requires_grad=True), torch.randn(200)
    tx, tw = x.detach().to("tpu").requires_grad_(), w.detach().to("tpu").requires_grad_()
    y, ty = F.linear(x, w, bias), F.linear(tx, tw, bias.to("tpu"))
    check(ty, y.detach(), F.linear(x.double(), w.double(), bias.double()))
    g = torch.randn_like(y)
    y.backward(g)
    ty.backward(g.to("tpu"))
    torch.testing.assert_close(tx.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(tw.grad.cpu(), w.grad, rtol=1e-4, atol=1e-4)
    big = torch.randn(302, 400)
    a, b = big[::2, 10:310], big[1:301, ::2][:, :130]  # [151, 300] and [300, 130], neither dense
    check(a.to("tpu") @ b.to("tpu"), a @ b, a.double() @ b.double())
    check(big.to("tpu")[::2, 10:310] @ big.to("tpu")[1:301, ::2][:, :130], a @ b, a.double() @ b.double())
    check(torch.matmul(x.detach().to("tpu"), w.t().to("tpu")), x.detach() @ w.detach().t(),
          x.detach().double() @ w.detach().double().t())


@pytest.mark.parametrize("special", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_inf_propagate_as_on_cpu(special):
    """A NaN or infinity in an operand reaches exactly the outputs it reaches
    on CPU (NaN where an infinity meets a zero or one of the other sign)."""
    torch.manual_seed(5)
    a, b = torch.randn(130, 200), torch.randn(150, 200)
    a[3, 7], a[100, :] = special, 0.0
    b[9, 7], b[20, 50] = special, -special
    got, want = (a.to("tpu") @ b.to("tpu").t()).cpu(), a @ b.t()
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[got.isinf()], want[want.isinf()])
    # finite outputs: as close to float64 as CPU's (XLA's own dots, TORCHTPU_KERNELS=attention,
    # round differently from MKL's on an AVX2 machine: 2.8e-5 vs 1.8e-5 here)
    finite, ref = want.isfinite(), (a.double() @ b.double().t())
    assert (got[finite] - ref[finite]).abs().max() <= 2 * (want[finite] - ref[finite]).abs().max()


def test_compiled_training_matches_cpu(no_fallbacks):
    """A compiled MLP step (the NT forward, NN and TN backward products)."""
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(96, 192), torch.nn.GELU(), torch.nn.Linear(192, 80))

    def step(net, x):
        loss = net(x).square().mean()
        loss.backward()
        return loss

    compare_compiled_step(step, net, torch.randn(256, 96), grad_rtol=1e-4)


def products_of(tmp_path, code):
    """The products in the programs |code| compiles (in a subprocess that
    dumps them): (custom calls' operand layouts, dot_general count, and
    whether a transpose feeds a custom call)."""
    layouts, dots, fed = [], 0, False
    for text in dumped_programs(tmp_path, "import torch, torchtpu\n" + code).values():
        dots += text.count("stablehlo.dot_general")
        transposed = set(re.findall(r"(%v\d+) = \"stablehlo.transpose\"", text))
        for ops, lt, rt in re.findall(r"custom_call\"\(([^)]*)\) \{call_target_name = \"torchtpu_matmul\".*?"
                                      r"lhs_t = (\d) : i32, rhs_t = (\d)", text):
            layouts.append((int(lt), int(rt)))
            fed |= bool(transposed & set(ops.split(", ")))
    return sorted(layouts), dots, fed


@pytest.mark.skipif(not KERNEL, reason="no matmul kernel in this run")
def test_transposed_operands_reach_the_kernel_as_they_lie(tmp_path):
    code = ("a, b = torch.randn(256, 96, device='tpu'), torch.randn(96, 256, device='tpu')\n"
            "(a @ b).cpu(); (a.t() @ b.t()).cpu(); (a @ a.t()).cpu()\n"
            "w = torch.randn(128, 96, device='tpu', requires_grad=True)\n"
            "f = torch.compile(lambda a, w: torch.nn.functional.linear(a, w).sum(), backend='tpu')\n"
            "f(a.clone().requires_grad_(), w).backward()\n")
    layouts, dots, fed = products_of(tmp_path, code)
    # eager TT and NT, the compiled forward's x @ w.t() (NT) and backward's dW = dy.t() @ x (TN);
    # the eager NN product and the backward's dx = dy @ w (NN) are XLA's
    assert layouts == [(0, 1), (0, 1), (1, 0), (1, 1)], layouts
    assert dots == 2 and not fed


def test_compiled_linear_adds_its_bias_in_the_kernel(tmp_path):
    """F.linear in a compiled graph (addmm with a [N] bias, beta = alpha = 1)
    is one kernel call that adds the bias, with no add after it; addmm
    forms the kernel cannot take that way (a broadcast [1] self, other
    scalars) are a product and an add; all agree with CPU."""
    torch.manual_seed(4)
    x, w, b, one = torch.randn(200, 96), torch.randn(130, 96), torch.randn(130), torch.randn(1)
    for fn in (lambda x, w, b, one: F.linear(x, w, b),
               lambda x, w, b, one: torch.addmm(one, x, w.t()),
               lambda x, w, b, one: torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0)):
        expected = fn(x, w, b, one)
        torch._dynamo.reset()
        got = torch.compile(fn, backend="tpu")(*(t.to("tpu") for t in (x, w, b, one)))
        check(got, expected, fn(x.double(), w.double(), b.double(), one.double()))
    if not KERNEL:
        return
    code = ("import torch.nn.functional as F\n"
            "x, w, b = (torch.randn(*s, device='tpu') for s in ((200, 96), (130, 96), (130,)))\n"
            "torch.compile(lambda x, w, b: F.linear(x, w, b), backend='tpu')(x, w, b).cpu()\n")
    graphs = [t for n, t in dumped_programs(tmp_path, "import torch, torchtpu\n" + code).items()
              if n.startswith("graph")]
    assert len(graphs) == 1 and "has_bias = 1" in graphs[0], graphs
    assert "stablehlo.add" not in graphs[0]


@pytest.mark.skipif(not KERNEL, reason="no matmul kernel in this run")
def test_what_stays_with_xla(tmp_path):
    """Plain float32 layouts (XLA runs them as fast), other dtypes and
    products too small to pay for the call are XLA's."""
    code = ("a = torch.randn(128, 128, device='tpu')\n"
            "(a @ a).cpu(); (a.half().t() @ a.half()).cpu(); (a.double().t() @ a.double()).cpu()\n"
            "(a[:8, :8].t() @ a[:8, :8]).cpu(); (a[:8, :8].bfloat16() @ a[:8, :8].bfloat16()).cpu()\n"
            "(torch.randn(128, device='tpu') @ a.t()).cpu()\n")
    layouts, dots, _ = products_of(tmp_path, code)
    assert layouts == [] and dots == 6, (layouts, dots)


@pytest.mark.skipif(not BF16_KERNEL, reason="no bfloat16 matmul kernel on this CPU or in this run")
def test_bfloat16_products_reach_the_kernel_in_every_layout(tmp_path):
    """XLA's CPU dots run bfloat16 no faster than float32: every layout goes
    to the kernel, in eager and under autocast in a compiled graph."""
    code = ("a = torch.randn(128, 256, device='tpu', dtype=torch.bfloat16)\n"
            "b = torch.randn(256, 128, device='tpu', dtype=torch.bfloat16)\n"
            "(a @ b).cpu(); (a @ a.t()).cpu(); (b.t() @ b).cpu(); (b.t() @ a.t()).cpu()\n"
            "lin = torch.nn.Linear(256, 192).to('tpu')\n"
            "def f(x):\n"
            "    with torch.autocast('tpu', dtype=torch.bfloat16):\n"
            "        return lin(x).float().sum()\n"
            "torch.compile(f, backend='tpu')(a.float()).cpu()\n")
    layouts, dots, fed = products_of(tmp_path, code)
    # the four eager layouts, and the compiled F.linear x @ w.t() (NT)
    assert layouts == [(0, 0), (0, 1), (0, 1), (1, 0), (1, 1)] and dots == 0 and not fed, (layouts, dots)


BF16_SIZES = [(128, 256, 96), (130, 257, 67), (64, 1023, 40)]  # M, K, N: odd K pads a step


@pytest.mark.parametrize("m,k,n", BF16_SIZES)
@pytest.mark.parametrize("lt", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("rt", [False, True], ids=["b", "bT"])
def test_bfloat16_mm_in_every_layout(m, k, n, lt, rt):
    """bfloat16 products sum in float32 and round once, as PyTorch's CPU
    product does: the same bfloat16 result but for an ulp where the sums'
    order differs, and as close to the float64 product of the same values."""
    torch.manual_seed(m + k + n)
    a = layout(torch.randn(m, k).bfloat16(), lt)
    b = layout(torch.randn(k, n).bfloat16(), rt)
    got, cpu, exact = (a.to("tpu") @ b.to("tpu")).cpu(), a @ b, a.double() @ b.double()
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, cpu)
    ours, theirs = (got.double() - exact).abs().max(), (cpu.double() - exact).abs().max()
    assert ours <= 1.01 * theirs + 1e-6, (float(ours), float(theirs))
    got = torch.bmm(a.expand(2, m, k).to("tpu"), b.expand(2, k, n).to("tpu")).cpu()
    torch.testing.assert_close(got, torch.bmm(a.expand(2, m, k), b.expand(2, k, n)))


@pytest.mark.skipif(not KERNEL, reason="already the run without the kernel")
def test_products_without_the_kernel():
    """The numeric cases on XLA's dots (TORCHTPU_KERNELS=attention)."""
    env = dict(os.environ, TORCHTPU_KERNELS="attention")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", __file__, "-k", "not without_the_kernel"],
                       env=env, capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
