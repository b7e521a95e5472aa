"""torch._grouped_mm, the product MoE layers route tokens through (Hugging
Face's Mixtral, Qwen-MoE and Jamba call it on tpu, eager and compiled): one
program with the groups' offsets read at run time, in float32, bfloat16 and
float16 (PyTorch's meta function admits only bfloat16; torchtpu/_meta.py),
against CPU; gradients; PyTorch's errors; a compiled MoE layer."""
import pytest
import torch

import torchtpu
from conftest import dumped_programs

KERNEL = "matmul" in torchtpu._C._info()["kernels"]
BF16_KERNEL = KERNEL and "BF16" in torchtpu._C._info()["kernels"]

OFFS = torch.tensor([2, 2, 7], dtype=torch.int32)  # an empty group, and rows past the last offset


def cases(dtype):
    """name -> (mat_a, mat_b, offs, the part of the result CPU defines)."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    return {
        "2d x 3d": (r(10, 16), r(3, 16, 8), OFFS, (slice(0, 7),)),
        "3d x 2d": (r(3, 5, 16), r(16, 24), torch.tensor([8, 16, 20], dtype=torch.int32), (slice(None), slice(0, 20))),
        "2d x 2d": (r(5, 24), r(24, 8), torch.tensor([8, 8, 20], dtype=torch.int32), (slice(None),)),
        "3d x 3d": (r(3, 5, 16), r(3, 16, 8), None, (slice(None),)),
        "transposed": (r(16, 16).t(), r(3, 8, 16).transpose(1, 2), OFFS, (slice(0, 7),)),
    }


def on_tpu(*tensors):
    return [None if t is None else t.to("tpu") for t in tensors]


@pytest.mark.strict_eager
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", list(cases(torch.float32)))
def test_matches_cpu_in_one_program(dtype, case):
    a, b, offs, defined = cases(dtype)[case]
    want = torch._grouped_mm(a, b, offs=offs)
    ta, tb, toffs = on_tpu(a, b, offs)
    torchtpu.reset_stats()
    got = torch._grouped_mm(ta, tb, offs=toffs)
    stats = torchtpu.stats()
    assert stats["executions"] == 1 and stats["d2h_bytes"] == 0  # the offsets stay on the device
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = {} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
    torch.testing.assert_close(got.cpu()[defined], want[defined], **tol)
    past = torch.ones(want.shape, dtype=torch.bool)
    past[defined] = False
    assert (got.cpu()[past] == 0).all()  # CPU leaves them unwritten; tpu writes zeros


def large_cases(dtype):
    """Products big enough for the matmul kernel's grouped product (where it
    runs): groups of rows with mat2 as it lies and transposed, groups of the
    contraction with self transposed (a weight gradient) and as it lies;
    an empty group, rows and a contraction slice past the last offset."""
    g = torch.Generator().manual_seed(2)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    offs = torch.tensor([40, 40, 150, 300, 310], dtype=torch.int32)
    return {
        "rows": (r(320, 96), r(5, 96, 80), offs, (slice(0, 310),)),
        "rows, mat2 transposed": (r(320, 96), r(5, 80, 96).transpose(1, 2), offs, (slice(0, 310),)),
        "contraction, self transposed": (r(320, 96).t(), r(320, 80), offs, (slice(None),)),
        "contraction": (r(96, 320), r(320, 80), offs, (slice(None),)),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(large_cases(torch.float32)))
def test_large_products_match_cpu(dtype, case):
    a, b, offs, defined = large_cases(dtype)[case]
    want = torch._grouped_mm(a, b, offs=offs)
    got = torch._grouped_mm(*on_tpu(a, b), offs=offs.to("tpu")).cpu()
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
    torch.testing.assert_close(got[defined], want[defined], **tol)
    past = torch.ones(want.shape, dtype=torch.bool)
    past[defined] = False
    assert (got[past] == 0).all()


@pytest.mark.strict_eager
@pytest.mark.skipif(not KERNEL, reason="the matmul kernel needs AVX2 or AVX-512")
def test_large_products_reach_the_kernel(tmp_path):
    code = """
import torch, torchtpu
a, w, o = torch.randn(320, 96, device="tpu"), torch.randn(5, 96, 80, device="tpu"), torch.tensor([40, 300], dtype=torch.int32)
torch._grouped_mm(a, w[:2], offs=o.to("tpu")).cpu()
torch._grouped_mm(a.t(), torch.randn(320, 80, device="tpu"), offs=o.to("tpu")).cpu()
torch._grouped_mm(a[:8], w[:2], offs=torch.tensor([4, 8], dtype=torch.int32).to("tpu")).cpu()  # small: XLA's dots
"""
    programs = [t for name, t in dumped_programs(tmp_path, code).items() if "grouped_mm" in name]
    assert sum("torchtpu_grouped_matmul" in t for t in programs) == 2
    assert sum("stablehlo.dot_general" in t and "torchtpu_grouped_matmul" not in t for t in programs) == 1


def test_a_nan_stays_in_its_group():
    a, b, offs, _ = cases(torch.float32)["2d x 3d"]
    b = b.clone()
    b[0, 3, 1] = float("nan")
    a = a.clone()
    a[4, 0] = float("inf")
    want = torch._grouped_mm(a, b, offs=offs)[:7]
    got = torch._grouped_mm(*on_tpu(a, b), offs=offs.to("tpu")).cpu()[:7]
    torch.testing.assert_close(got, want, equal_nan=True)


def test_gradients_match_cpu():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(12, 16, generator=g), torch.randn(4, 16, 8, generator=g)
    offs = torch.tensor([3, 3, 9, 12], dtype=torch.int32)
    grads = []
    for device in ("cpu", "tpu"):
        x, w = a.to(device).requires_grad_(), b.to(device).requires_grad_()
        a, b = a.detach(), b.detach()
        torch._grouped_mm(x, w, offs=offs.to(device)).pow(2).sum().backward()
        grads.append((x.grad.cpu(), w.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("call", [
    lambda a, b, o: torch._grouped_mm(a, b, offs=o.long()),
    lambda a, b, o: torch._grouped_mm(a, b),
    lambda a, b, o: torch._grouped_mm(a, b, offs=o, out_dtype=torch.bfloat16),
    lambda a, b, o: torch._grouped_mm(a, b, offs=o, bias=torch.zeros(3, 8, device=a.device)),
    lambda a, b, o: torch._grouped_mm(a.double(), b.double(), offs=o),
    lambda a, b, o: torch._grouped_mm(a, b[:2], offs=o),
    lambda a, b, o: torch._grouped_mm(torch.randn(10, 18, device=a.device)[:, :16], b, offs=o),
], ids=["long offsets", "no offsets", "out_dtype", "bias", "float64", "batch", "strides"])
def test_errors_are_cpus(call):
    a, b, offs, _ = cases(torch.float32)["2d x 3d"]
    with pytest.raises(RuntimeError) as cpu:
        call(a, b, offs)
    with pytest.raises(RuntimeError) as tpu:
        call(*on_tpu(a, b, offs))
    assert str(tpu.value).splitlines()[0] == str(cpu.value).splitlines()[0]


class MoE(torch.nn.Module):
    """Top-1 routing: tokens sorted by expert, one grouped product per
    projection (the shape of Hugging Face's grouped_mm experts)."""

    def __init__(self, d=16, hidden=32, experts=4):
        super().__init__()
        self.router = torch.nn.Linear(d, experts)
        self.up = torch.nn.Parameter(torch.randn(experts, d, hidden) / d ** 0.5)
        self.down = torch.nn.Parameter(torch.randn(experts, hidden, d) / hidden ** 0.5)

    def forward(self, x):
        logits = self.router(x)
        expert = logits.argmax(-1)
        order = torch.argsort(expert, stable=True)
        counts = torch.nn.functional.one_hot(expert, self.up.shape[0]).sum(0)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        h = torch._grouped_mm(x[order], self.up, offs=offs).relu()
        y = torch._grouped_mm(h, self.down, offs=offs)
        out = torch.empty_like(y).index_copy(0, order, y)
        return out * logits.softmax(-1).amax(-1, keepdim=True)


def test_compiled_moe_layer_matches_cpu():
    torch.manual_seed(0)
    model, x = MoE(), torch.randn(24, 16)
    on_device = MoE().to("tpu")
    on_device.load_state_dict(model.state_dict())
    want = model(x)
    want.pow(2).sum().backward()
    torchtpu.reset_stats()
    got = torch.compile(on_device, backend="tpu", fullgraph=True)(x.to("tpu"))
    got.pow(2).sum().backward()
    assert not torchtpu.stats()["fallbacks"]
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    for p, q in zip(on_device.parameters(), model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
