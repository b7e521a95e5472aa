"""What the differential fuzzer (torchtpu.fuzz) found, each as the smallest
program that showed it, against the CPU. Every case failed before its fix."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchtpu  # noqa: F401


def test_compiled_host_arithmetic_is_not_reused_for_other_sizes():
    """A graph split around a host computation (arange on the CPU, then
    .to(device)) reused the host values traced for the first size."""
    def f(a):
        w = torch.cos(torch.arange(a.numel(), dtype=torch.float64)).float().reshape(a.shape).to(a.device)
        return a * w
    cf = torch.compile(f, backend="tpu")
    for shape in [(3, 4), (16, 64), (5, 7)]:
        a = torch.randn(shape)
        torch.testing.assert_close(cf(a.to("tpu")).cpu(), f(a))


@pytest.mark.parametrize("draw", ["exponential_", "log_normal_", "cauchy_", "geometric_"])
def test_random_in_place_ops_take_a_tpu_generator(draw):
    """These went to PyTorch's refs, which refuse any generator, when given one."""
    args = (0.3,) if draw == "geometric_" else ()
    g = torch.Generator(device="tpu").manual_seed(5)
    a = getattr(torch.empty(512, device="tpu"), draw)(*args, generator=g).cpu()
    g.manual_seed(5)
    b = getattr(torch.empty(512, device="tpu"), draw)(*args, generator=g).cpu()
    assert torch.equal(a, b)
    assert a.isfinite().all() and not torch.equal(a, a[0].expand_as(a))
    if draw != "cauchy_":
        assert (a > 0).all()


@pytest.mark.parametrize("dst,src", [((4, 3), (2, 3)), ((4, 3), (3, 4)), ((3,), (4, 3))])
def test_copy_of_a_shape_that_does_not_broadcast(dst, src):
    """The CPU's error (it was "internal: bad broadcast_in_dim")."""
    msgs = []
    for d in ("cpu", "tpu"):
        with pytest.raises(RuntimeError) as info:
            torch.zeros(dst, device=d).copy_(torch.ones(src, device=d))
        msgs.append(str(info.value).replace("tpu", "cpu"))
    assert msgs[0] == msgs[1]


@pytest.mark.parametrize("op", [torch.abs, torch.tanh, torch.exp])
def test_a_resized_out_takes_the_inputs_layout(op):
    """out= of another size is resized to the input's layout, as the CPU's
    TensorIterator kernels do (tpu made it contiguous)."""
    x = torch.randn(3, 128, 64).transpose(-1, -2)
    for d in ("cpu", "tpu"):
        out = torch.empty(0, device=d)
        op(x.to(d), out=out)
        if d == "cpu":
            want = out
    assert out.stride() == want.stride() == x.stride()
    torch.testing.assert_close(out.cpu(), want)


@pytest.mark.parametrize("op", [lambda a: a * 2, lambda a: torch.ops.aten.mul.Scalar(a, 2), lambda a: a > 0,
                                lambda a: torch.ops.aten.add.Scalar(a, 1), lambda a: a * a, torch.exp,
                                lambda a: torch.cat([a * 2, a * 3], 0), lambda a: torch._foreach_mul([a], 2)[0]])
@pytest.mark.parametrize("shape,strides", [([2, 5, 1, 16], (80, 1, 1, 5)), ([2, 5, 1, 16], (80, 1, 80, 5)),
                                           ([3, 1, 4], (4, 1, 1)), ([1, 1, 3], (1, 3, 1))])
def test_pointwise_results_lay_out_size_one_dims_as_the_cpu(op, shape, strides):
    """A pointwise result takes the strides the CPU's TensorIterator gives it,
    size-1 dims included: PyTorch's Python meta functions give those dims
    other strides ([2, 5, 1, 16] at (80, 1, 1, 5) times 2: (80, 1, 80, 5)),
    which the next op's memory format follows: a cat of two such results was
    channels-last where the CPU's is contiguous (seed 60081). A _foreach_
    op's items too, as the CPU's foreach kernels run the per-tensor op."""
    got = []
    for d in ("cpu", "tpu"):
        a = torch.empty_strided(shape, strides, device=d)
        a.copy_(torch.arange(a.numel(), dtype=torch.float32).reshape(shape).to(d))
        r = op(a)
        got.append((r.stride(), r.cpu()))
    assert got[1][0] == got[0][0]
    torch.testing.assert_close(got[1][1], got[0][1])


def _out_fn(a, b):
    torch.tanh(a, out=b)


def test_compiled_mutation_after_a_call_with_shared_inputs():
    """Compiled first for two views of one tensor, a function wrote its
    out= through their common base for later calls of two separate tensors
    too (PyTorch 2.13's AOTAutograd; aot_eager and Inductor on the CPU do the
    same): b was never written."""
    cf = torch.compile(_out_fn, backend="tpu", dynamic=False)
    base = torch.full((1,), 0.5, device="tpu")
    cf(base, base.view(1))
    a, b = torch.full((1,), 0.5, device="tpu"), torch.full((1,), 9.0, device="tpu")
    cf(a, b)
    torch.testing.assert_close(b.cpu(), torch.tanh(torch.tensor([0.5])))
    cf(base, base.view(1))  # the shared case still runs its own program
    torch.testing.assert_close(base.cpu(), torch.tanh(torch.tanh(torch.tensor([0.5]))))


def test_the_autograd_cache_keeps_shared_and_separate_inputs_apart(tmp_path):
    """Across processes: AOTAutograd's cache key does not say which inputs
    share a storage, so an entry compiled for views of one tensor was loaded
    for two tensors (seed 202 of the fuzzer, whose worker keeps a cache)."""
    code = textwrap.dedent("""
        import sys, torch, torchtpu
        def f(a, b):
            torch.tanh(a, out=b)
        cf = torch.compile(f, backend="tpu", dynamic=False)
        if sys.argv[1] == "shared":
            base = torch.full((1,), 0.5, device="tpu")
            cf(base, base.view(1))
        else:
            a, b = torch.full((1,), 0.5, device="tpu"), torch.full((1,), 9.0, device="tpu")
            cf(a, b)
            print(b.cpu().item())
    """)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHTPU_CACHE_DIR=str(tmp_path / "xla"))
    subprocess.run([sys.executable, "-c", code, "shared"], check=True, env=env)
    out = subprocess.run([sys.executable, "-c", code, "separate"], check=True, env=env,
                         capture_output=True, text=True).stdout
    assert float(out.split()[-1]) == pytest.approx(torch.tanh(torch.tensor(0.5)).item())
    assert any((tmp_path / "inductor").rglob("*")), "the first process kept nothing: the test tests nothing"


def test_erf_and_gelu_saturate_as_on_the_cpu():
    """XLA's float32 erf stopped short of -1 (erf(-10) = -0.99999982), so
    gelu of a large negative number was a large negative number, not -0
    (gelu(-3e38) = -2.7e31; seed 1027: sqrt(|gelu|) of a trained layer's
    pre-activations)."""
    x = torch.tensor([-3e38, -1e4, -100.0, -40.0, -13.0, -6.0, -5.0, -3.0, -1.5, -1.0, -0.999, -0.5, 0.0, 0.5,
                      0.999, 1.0, 1.5, 3.0, 6.0, 40.0, 3e38, float("inf"), -float("inf"), float("nan")])
    for fn in (torch.erf, torch.special.erfc):
        torch.testing.assert_close(fn(x.to("tpu")).cpu(), fn(x), rtol=1.3e-6, atol=1e-7, equal_nan=True)
    # gelu up to 40 (the CPU's kernel overflows past that: gelu(3e38) = inf,
    # gelu(inf) = nan), as close to float64 as the CPU's, element by element
    # (1 + erf(x) cancels: at -5 the CPU's is 17% off, tpu's 4%)
    finite = x[:-5]
    exact = torch.nn.functional.gelu(finite.double())
    err_tpu = (torch.nn.functional.gelu(finite.to("tpu")).cpu().double() - exact).abs()
    err_cpu = (torch.nn.functional.gelu(finite).double() - exact).abs()
    assert (err_tpu <= 2 * err_cpu + 2 ** -22 * exact.abs()).all(), (err_tpu, err_cpu)  # + 2 ulps
    for fn in (torch.erf, torch.nn.functional.gelu):  # float64 and a half type too
        xd = finite.double()
        torch.testing.assert_close(fn(xd.to("tpu")).cpu(), fn(xd), equal_nan=True)
        xb = finite.clamp(-1e4, 1e4).bfloat16()
        torch.testing.assert_close(fn(xb.to("tpu")).cpu(), fn(xb), equal_nan=True)
    g = finite.clone().requires_grad_()
    gt = finite.to("tpu").requires_grad_()
    torch.nn.functional.gelu(g).sum().backward()
    torch.nn.functional.gelu(gt).sum().backward()
    torch.testing.assert_close(gt.grad.cpu(), g.grad, rtol=1.3e-6, atol=1e-7)


@pytest.mark.parametrize("op", [
    lambda a, b: a.add_(b), lambda a, b: a.lerp_(b, 0.25), lambda a, b: a.addcmul_(b, b),
    lambda a, b: a.copy_(b), lambda a, b: torch.mul(b, 2, out=a), lambda a, b: a.clamp_(min=b),
    lambda a, b: a[1:].sub_(b.t()[:-1])])
def test_a_write_that_partly_overlaps_an_input_is_refused(op):
    """TensorIterator refuses it on the CPU; tpu computed as if the input
    were read first (seed 1371: x.lerp_(x.t(), 0.25))."""
    for d in ("cpu", "tpu"):
        x = torch.arange(16.0).reshape(4, 4).to(d)
        with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
            op(x, x.t())
        torch.testing.assert_close(x.cpu(), torch.arange(16.0).reshape(4, 4))  # nothing written
    y = torch.arange(16.0, device="tpu")
    y.add_(y)  # the same tensor is fine
    torch.testing.assert_close(y.cpu(), torch.arange(16.0) * 2)


@pytest.mark.parametrize("op", [
    lambda xs, ys: torch._foreach_add_(xs, ys, alpha=0.5), lambda xs, ys: torch._foreach_mul_(xs, 0.75),
    lambda xs, ys: torch._foreach_lerp_(xs, ys, 0.2), lambda xs, ys: torch._foreach_addcmul_(xs, ys, ys),
    lambda xs, ys: torch._foreach_sqrt_(xs), lambda xs, ys: torch._foreach_zero_(xs)])
def test_foreach_writes_count_a_version(op):
    """A _foreach_ op's written tensors count a new version, as on the CPU,
    so autograd refuses a tensor a graph saved and a foreach op then changed
    (seed 5048: tpu computed the gradient from the new values)."""
    msgs = []
    for d in ("cpu", "tpu"):
        x = torch.rand(8, device=d, requires_grad=True)
        w = torch.rand(8, device=d) + 1
        y = x * w  # saves w for x's gradient
        before = w._version
        op([w], [torch.rand(8, device=d) + 1])
        assert w._version == before + 1
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
            y.sum().backward()
        msgs.append(str(info.value).replace("tpuFloatType", "torch.FloatTensor").split("Hint")[0])
    assert msgs[0] == msgs[1]
    with torch.inference_mode():  # no versions there, and nothing refused
        z = torch.rand(8, device="tpu")
        op([z], [torch.rand(8, device="tpu") + 1])
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        op([z], [torch.rand(8, device="tpu") + 1])


@pytest.mark.parametrize("case", ["slice", "before_the_slice", "chunk", "transposed"])
def test_as_strided_of_an_input_reads_the_whole_storage(case):
    """as_strided of a graph input reads the input's storage, elements outside
    the input's view included: a slice's neighbours read as zeros (a silently
    wrong result), and a chunk's storage offset past its dense value failed
    to build (fuzz seed 30110)."""
    fn, view = {
        "slice": (lambda t: t.as_strided([2, 3], [8, 1], 1) * 2, lambda b: b[2:5]),
        "before_the_slice": (lambda t: t.as_strided([3], [9], 0) + 1, lambda b: b[2:5]),
        "chunk": (lambda t: t.as_strided([2], [4], 50) + 0, lambda b: b[:, :4]),
        "transposed": (lambda t: t.as_strided([4], [1], 60) + 0, lambda b: b.t()),
    }[case]
    big = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    got = torch.compile(fn, backend="tpu", dynamic=False)(view(big.to("tpu")))
    torch.testing.assert_close(got.cpu(), fn(view(big)), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("compiled", [False, True])
def test_hypot_neither_overflows_nor_underflows(dtype, compiled):
    """hypot squared its operands in their own type: hypot(2e19, 2e19) was inf
    (seed 31029: a hypot of exp_'d values), hypot(3e-30, 4e-30) was 0, and
    hypot(inf, nan) NaN where the CPU's std::hypot gives inf."""
    big, tiny = {torch.float64: (1e200, 3e-200), torch.float16: (200.0, 3e-5)}.get(dtype, (2e19, 3e-30))
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([big, tiny, inf, nan, 0.0, -3.0, 0.0, -inf, 0.0], dtype=dtype)
    b = torch.tensor([big, tiny * 4 / 3, nan, inf, 0.0, 4.0, nan, 1.0, -0.0], dtype=dtype)
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(4096, generator=g, dtype=torch.float64).mul(10).to(dtype) for _ in range(2))
    fn = torch.compile(torch.hypot, backend="tpu") if compiled else torch.hypot
    for p, q in [(a, b), (x, y)]:
        got = fn(p.to("tpu"), q.to("tpu")).cpu()
        torch.testing.assert_close(got, torch.hypot(p, q), equal_nan=True)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_value_returned_twice_is_one_tensor(requires_grad):
    """A compiled function returning one value twice (`t, t.contiguous()`)
    gave two tensors with their own buffers, so writing one left the other
    stale (fuzz seed 9702); eager and the CPU's compiled function return the
    same tensor twice."""
    def f(a, s):
        t = torch.cat([a, a * s], 0)
        return t, t.contiguous()
    a, s = torch.randn(4, 3), torch.randn(1)
    want_t, want_u = torch.compile(f, backend="aot_eager")(a, s)
    ta, ts = a.to("tpu").requires_grad_(requires_grad), s.to("tpu")
    t, u = torch.compile(f, backend="tpu")(ta, ts)
    assert (t is u) == (want_t is want_u)
    torch.testing.assert_close(u.detach().cpu(), want_u)
    with torch.no_grad():
        t.fill_(3)
        want_t.fill_(3)
    torch.testing.assert_close(u.detach().cpu(), want_u)


def test_a_view_of_a_reshape_copy_views_the_result():
    """unfold of a reshape that must copy (a permuted input): the compiled
    function made the unfold a view of the copy's inner clone, not of the
    reshape's result it returns too, so a write through the unfold missed
    that result (fuzz seed 9744)."""
    def f(x):
        r = x.permute(2, 0, 1, 3).reshape(2, 3, 2, 3)
        return r, r.unfold(1, 1, 1)
    x = torch.randn(2, 3, 3, 2)
    want_r, want_u = f(x)
    r, u = torch.compile(f, backend="tpu")(x.to("tpu"))
    u.mul_(0.75)
    want_u.mul_(0.75)
    torch.testing.assert_close(r.cpu(), want_r)
    torch.testing.assert_close(u.cpu(), want_u)
