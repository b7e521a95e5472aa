"""F.scaled_dot_product_attention on tpu: one fused op (a hand-written kernel
on the CPU plugin, XLA's composite elsewhere) for the forward and one for the
gradients, in eager and compiled graphs, against PyTorch on CPU. The same
cases run again with TORCHTPU_KERNELS=0 (the composite) in a subprocess."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from conftest import compare_compiled_step, compare_grad, dumped_programs, make, to_tpu

# (B, H, T, S, D, E); (H, T, S, D, E) is 3-d, which takes PyTorch's decomposition
SHAPES = [(2, 3, 16, 16, 8, 8), (1, 2, 37, 53, 24, 40), (2, 2, 53, 37, 16, 16), (3, 20, 19, 12, 6)]


def qkv(shape, dtype=torch.float32, requires_grad=True):
    *lead, t, s, d, e = shape
    return [make(size, dtype, seed, requires_grad=requires_grad)
            for seed, size in enumerate([(*lead, t, d), (*lead, s, d), (*lead, s, e)])]


def compare_sdpa(q, k, v, attn_mask=None, rtol=None, atol=None, **kwargs):
    """Forward and every gradient (the mask's too when it requires grad), CPU
    vs tpu."""
    return compare_grad(lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs),
                        q, k, v, attn_mask, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_cpu(no_fallbacks, shape, causal):
    compare_sdpa(*qkv(shape), is_causal=causal)


@pytest.mark.parametrize("kind", ["bool", "float", "float_grad", "broadcast", "broadcast_grad"])
def test_sdpa_masks(no_fallbacks, kind):
    q, k, v = qkv((2, 3, 12, 20, 8, 8))
    if kind == "bool":
        mask = torch.rand(2, 3, 12, 20) > 0.3
    elif kind.startswith("broadcast"):  # one [1, T, S] mask for every batch and head
        mask = torch.randn(1, 12, 20).requires_grad_(kind == "broadcast_grad")
    else:
        mask = torch.randn(2, 3, 12, 20).requires_grad_(kind == "float_grad")
    compare_sdpa(q, k, v, attn_mask=mask)


def test_sdpa_scale_and_views(no_fallbacks):
    """An explicit scale; q, k, v as the transposed views a transformer block
    makes of one projection."""
    def f(x):
        q, k, v = (z.view(2, 10, 4, 8).transpose(1, 2) for z in x.split(32, dim=2))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)

    compare_grad(f, make((2, 10, 3 * 32), requires_grad=True))


def test_sdpa_bfloat16(no_fallbacks):
    """bfloat16 computes in float32 and rounds once; PyTorch's CPU kernel also
    rounds the probabilities, so both are judged against float64: ours must
    be at least as close as the CPU's, forward and gradients."""
    q, k, v = qkv((2, 2, 16, 16, 8, 8), torch.bfloat16)
    up = torch.randn(2, 2, 16, 8).to(torch.bfloat16)

    def run(device, dtype):
        xs = [x.detach().to(device, dtype).requires_grad_() for x in (q, k, v)]
        out = F.scaled_dot_product_attention(*xs, is_causal=True)
        out.backward(up.to(device, dtype))
        return [t.detach().cpu().double() for t in [out] + [x.grad for x in xs]]

    ref, cpu, tpu = run("cpu", torch.float64), run("cpu", torch.bfloat16), run("tpu", torch.bfloat16)
    for r, c, t in zip(ref, cpu, tpu):
        assert (t - r).abs().max() <= 2 * (c - r).abs().max() + 1e-3


def test_sdpa_row_that_sees_nothing(no_fallbacks):
    """A query whose mask hides every key: a zero row and zero gradients, as
    PyTorch's CPU kernels give, and no NaN anywhere."""
    q, k, v = qkv((1, 2, 4, 5, 8, 8))
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False
    got = compare_sdpa(q, k, v, attn_mask=mask)
    assert not got.isnan().any()
    assert (got[:, :, 1] == 0).all()


def test_sdpa_is_one_fused_op():
    """An eager call runs the fused op, not PyTorch's decomposition."""
    q, k, v = to_tpu(qkv((2, 2, 8, 8, 4, 4), requires_grad=False))
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torchtpu.reset_stats()
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torchtpu.stats()["ops"] == 1


def test_sdpa_dropout_decomposes(no_fallbacks):
    """Dropout, which the fused op does not take, runs PyTorch's math
    decomposition on tpu (random, so compared by its statistics)."""
    q, k, v = to_tpu(qkv((2, 4, 8, 8, 4, 4), requires_grad=False))
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert out.shape == q.shape and not out.isnan().any()


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_grouped_query_heads(no_fallbacks, kv_heads, causal):
    """enable_gqa: 4 query heads in groups over fewer key heads (Llama's
    attention), one fused op, gradients of the key heads summed over their
    groups; with a mask too."""
    q, k, v = qkv((2, 4, 9, 11, 8, 6))
    k, v = k[:, :kv_heads].detach().requires_grad_(), v[:, :kv_heads].detach().requires_grad_()
    compare_sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    if not causal:
        compare_sdpa(q, k, v, attn_mask=torch.randn(9, 11), enable_gqa=True)
    q, k, v = to_tpu([q, k, v])
    torchtpu.reset_stats()
    with torch.no_grad():
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert torchtpu.stats()["ops"] == 1


def test_sdpa_grouped_heads_as_views(no_fallbacks):
    """Grouped heads as a model makes them: q from one projection, k and v
    from another with fewer heads, all transposed views: a compiled training
    step against CPU."""
    torch.manual_seed(0)
    proj = torch.nn.Linear(32, 64)

    def step(proj, x):
        q, kv = proj(x).split([32, 32], dim=2)
        q = q.view(2, 8, 4, 8).transpose(1, 2)
        k, v = (z.view(2, 8, 2, 8).transpose(1, 2) for z in kv.split(16, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        loss = y.transpose(1, 2).reshape(2, 8, 32).square().mean()
        loss.backward()
        return loss

    compare_compiled_step(step, proj, torch.randn(2, 8, 32))


def test_sdpa_grouped_heads_need_enable_gqa():
    """Without enable_gqa, fewer key heads are PyTorch's error, as on CPU."""
    q, k, v = qkv((2, 4, 8, 8, 4, 4), requires_grad=False)
    k, v = k[:, :2], v[:, :2]
    with pytest.raises(RuntimeError) as cpu:
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(RuntimeError) as tpu:
        F.scaled_dot_product_attention(*to_tpu([q, k, v]))
    assert type(tpu.value) is type(cpu.value)


def test_sdpa_compiled(no_fallbacks):
    """torch.compile: the graph keeps the fused op and its backward."""
    q, k, v = qkv((2, 3, 16, 16, 8, 8))
    mask = torch.randn(16, 16)

    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum() + \
            F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum()

    torch._dynamo.reset()
    expected = f(q, k, v, mask)
    expected.backward()
    tq, tk, tv = (x.detach().to("tpu").requires_grad_() for x in (q, k, v))
    got = torch.compile(f, backend="tpu")(tq, tk, tv, mask.to("tpu"))
    got.backward()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    for a, b in zip((q, k, v), (tq, tk, tv)):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(os.environ.get("TORCHTPU_KERNELS") == "0", reason="already the composite run")
def test_sdpa_without_kernels():
    """The same cases on XLA's composite (TORCHTPU_KERNELS=0)."""
    env = dict(os.environ, TORCHTPU_KERNELS="0")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", __file__, "-k", "not without_kernels"],
                       env=env, capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_sdpa_compiled_training_with_head_views(no_fallbacks):
    """A compiled training step of a transformer block: q, k, v are transposed
    views of one projection and the output is reshaped back, in the forward
    graph and (through the saved views) in the backward graph."""
    torch.manual_seed(0)
    proj = torch.nn.Linear(32, 96)

    def step(proj, x):
        q, k, v = (z.view(2, 8, 2, 16).transpose(1, 2) for z in proj(x).split(32, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        loss = y.transpose(1, 2).reshape(2, 8, 32).square().mean()
        loss.backward()
        return loss

    compare_compiled_step(step, proj, torch.randn(2, 8, 32))


@pytest.mark.strict_eager
@pytest.mark.skipif(os.environ.get("TORCHTPU_KERNELS") == "0", reason="no kernel in the composite run")
def test_kernel_reads_heads_as_they_lie(tmp_path):
    """Heads transposed out of one projection reach the kernel token-major,
    as they are laid out (no transpose in the program, forward or backward),
    grouped key heads too; contiguous heads head-major."""
    code = ("import torch, torch.nn.functional as F, torchtpu\n"
            "x = torch.randn(2, 6, 48, device='tpu', requires_grad=True)\n"
            "q, k, v = (z.view(2, 6, 2, 8).transpose(1, 2) for z in x.split(16, dim=2))\n"
            "F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()\n"
            "x = torch.randn(2, 6, 64, device='tpu', requires_grad=True)\n"
            "q, kv = x.split([32, 32], dim=2)\n"
            "q, (k, v) = q.view(2, 6, 4, 8).transpose(1, 2), (z.view(2, 6, 2, 8).transpose(1, 2) "
            "for z in kv.split(16, dim=2))\n"
            "F.scaled_dot_product_attention(q, k, v, enable_gqa=True).sum().backward()\n"
            "q = torch.randn(2, 2, 6, 8, device='tpu')\n"
            "F.scaled_dot_product_attention(q, q, q).cpu()\n")
    calls = {}
    for name, text in dumped_programs(tmp_path, code).items():
        if "attention" not in name:
            continue
        for layout in ("token_major = 1", "token_major = 0"):
            if layout in text:
                calls.setdefault(layout, []).append(text)
    assert len(calls.get("token_major = 1", [])) == 4, sorted(calls)
    assert len(calls.get("token_major = 0", [])) == 1
    for text in calls["token_major = 1"]:  # q, k, v reach the kernel without a transpose
        transposed = set(re.findall(r"(%v\d+) = \"stablehlo.transpose\"", text))
        operands = re.search(r"stablehlo.custom_call\"\(([^)]*)\)", text).group(1).split(", ")[:3]
        assert transposed and not transposed & set(operands), operands


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_flex_attention(no_fallbacks, compiled):
    """FlexAttention (PyTorch refuses devices outside its list; torchtpu lets
    tpu through): a score_mod reading positions and the head, a causal block
    mask and grouped heads, forward and log-sum-exp against the CPU's
    FlexAttention, gradients against its math written out (the CPU's has no
    backward); compiled, it is part of the graph's program."""
    import warnings
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def score_mod(score, b, h, i, j):
        return score + (i - j) * 0.1 + h

    def causal(b, h, i, j):
        return i >= j

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 32, 16), torch.randn(2, 2, 32, 16), torch.randn(2, 2, 32, 16)
    tq, tk, tv = (x.to("tpu").requires_grad_() for x in (q, k, v))
    run = torch.compile(flex_attention, backend="tpu") if compiled else flex_attention
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention's note that it is slow without torch.compile
        want, want_lse = flex_attention(q, k, v, score_mod=score_mod, enable_gqa=True, return_lse=True,
                                        block_mask=create_block_mask(causal, None, None, 32, 32, device="cpu"))
        mask = create_block_mask(causal, None, None, 32, 32, device="tpu")
        got, got_lse = run(tq, tk, tv, score_mod=score_mod, enable_gqa=True, return_lse=True, block_mask=mask)
        if compiled:  # the attention is in the graph's program, not op by op
            torchtpu.reset_stats()
            run(tq, tk, tv, score_mod=score_mod, enable_gqa=True, return_lse=True, block_mask=mask)
            torch.tpu.synchronize()
            assert torchtpu.stats()["executions"] == 1
    torch.testing.assert_close(got.detach().cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_lse.detach().cpu(), want_lse, rtol=1e-5, atol=1e-5)

    cq, ck, cv = (x.clone().requires_grad_() for x in (q, k, v))
    pos = torch.arange(32)
    scores = cq @ ck.repeat_interleave(2, 1).transpose(-1, -2) / 4 + (pos[:, None] - pos) * 0.1 \
        + torch.arange(4.0)[:, None, None]
    scores = scores.masked_fill(pos[:, None] < pos, float("-inf"))
    expected = scores.softmax(-1) @ cv.repeat_interleave(2, 1)
    torch.testing.assert_close(want, expected.detach(), rtol=1e-5, atol=1e-5)
    up = torch.randn_like(expected)
    expected.backward(up)
    got.backward(up.to("tpu"))
    for a, b in zip((cq, ck, cv), (tq, tk, tv)):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_flex_attention_under_autocast(no_fallbacks, compiled):
    """Under tpu autocast FlexAttention takes q, k and v in bfloat16 and runs in
    its own float32 working precision, as PyTorch's rule for CPU and CUDA
    autocast does (tpu had no rule: the op raised); the gradients come back
    in the inputs' float32."""
    import warnings
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score, b, h, i, j):
        return score + (i - j) * 0.1

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 32, 16) for _ in range(3))
    tq, tk, tv = (x.to("tpu").requires_grad_() for x in (q, k, v))
    run = torch.compile(flex_attention, backend="tpu") if compiled else flex_attention
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention's note that it is slow without torch.compile
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = flex_attention(q, k, v, score_mod=score_mod)
        with torch.autocast("tpu", dtype=torch.bfloat16):
            got = run(tq, tk, tv, score_mod=score_mod)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got.detach().cpu(), want)
    got.float().sum().backward()
    assert all(t.grad.dtype == torch.float32 and t.grad.abs().sum() > 0 for t in (tq, tk, tv))


def test_flex_attention_graphs_in_the_aot_cache(tmp_path, monkeypatch):
    """A compiled graph with FlexAttention is kept in AOTAutograd's cache (as
    any graph of the backend) and comes back from it with its gradient; the
    entries of two score functions are apart."""
    import warnings
    from torch._dynamo.utils import counters
    from torch.nn.attention.flex_attention import flex_attention
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def plus(score, b, h, i, j):
        return score + (i - j) * 0.1

    def minus(score, b, h, i, j):
        return score - (i - j) * 0.1

    torch.manual_seed(0)
    q = torch.randn(2, 4, 32, 16)
    results = []
    for score_mod in (plus, plus, minus):
        torch._dynamo.reset()
        counters.clear()
        tq = q.to("tpu").requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eager FlexAttention's note that it is slow without torch.compile
            got = torch.compile(lambda x: flex_attention(x, x, x, score_mod=score_mod), backend="tpu")(tq)
            want = flex_attention(q, q, q, score_mod=score_mod)
        torch.testing.assert_close(got.detach().cpu(), want, rtol=1e-5, atol=1e-5)
        got.sum().backward()
        results.append((dict(counters["aot_autograd"]), tq.grad.cpu()))
    assert results[0][0].get("autograd_cache_saved") == 1
    assert results[1][0].get("autograd_cache_hit") == 1
    torch.testing.assert_close(results[1][1], results[0][1], rtol=0, atol=0)
    assert results[2][0].get("autograd_cache_hit", 0) == 0 and results[2][0].get("autograd_cache_saved") == 1


def test_flex_attention_keeps_other_devices_checks():
    """Only tpu is let through: the CPU still refuses a FlexAttention backward."""
    from torch.nn.attention.flex_attention import flex_attention
    q = torch.randn(1, 1, 8, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        flex_attention(q, q, q)
