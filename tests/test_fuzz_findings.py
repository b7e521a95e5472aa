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
