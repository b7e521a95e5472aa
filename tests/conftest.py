"""Shared test helpers: make inputs (torch.testing.make_tensor, seeded), run
a function on CPU and on tpu and compare the results and the gradients with
torch.testing tolerances, make sure nothing fell back to the CPU, read the
programs a piece of code compiles, and launch processes as torchrun does."""
import copy
import os
import signal
import socket
import subprocess
import sys

import pytest
import torch
from torch.utils._pytree import tree_leaves

import torchtpu

# The suite compiles many signatures of the same ops on purpose, and the
# compile limit's warning (one per op, at the call that crosses the limit)
# would land in whichever test makes that call, among them tests that
# compare warnings with the CPU's. It is for a user's loop: the suite raises
# the limit (its subprocesses inherit it) and test_compiles.py sets the
# limits it tests.
os.environ.setdefault("TORCHTPU_COMPILE_LIMIT", str(2**30))
torchtpu.set_compile_limit(int(os.environ["TORCHTPU_COMPILE_LIMIT"]))


def make(shape, dtype=torch.float32, seed=0, *, layout="contiguous", low=None, high=None,
         requires_grad=False):
    """A CPU tensor from torch.testing.make_tensor whose values depend only on
    |seed| and the shape (two inputs of other shapes differ with one seed).
    Floats lie in [-2, 2) (the scale of randn, which the tolerances were
    written for) and integers in [-4, 5) (small, so that ties occur) unless
    |low| and |high| say. "transposed" and "sliced" |layout|s give
    non-contiguous views of the same shape."""
    floating = dtype.is_floating_point or dtype.is_complex
    if dtype != torch.bool and low is None and high is None:
        low, high = (-2, 2) if floating else (-4, 5)
    base = list(shape)
    if layout == "transposed":
        base = base[::-1]
    elif layout == "sliced":
        base[0] *= 2
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed * 101 + sum(shape) + len(shape))
        x = torch.testing.make_tensor(base, dtype=dtype, device="cpu", low=low, high=high)
    if layout == "transposed":
        x = x.permute(*reversed(range(x.dim())))
    elif layout == "sliced":
        x = x[::2]
    assert tuple(x.shape) == tuple(shape)
    assert layout == "contiguous" or not x.is_contiguous() or x.numel() <= 1
    return x.requires_grad_(requires_grad)


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().to("tpu")
        return y.requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else y
    if isinstance(x, torch.nn.Module):
        return copy.deepcopy(x).to("tpu")
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(v) for v in x)
    if isinstance(x, dict):
        return {k: to_tpu(v) for k, v in x.items()}
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def compare(fn, *args, rtol=None, atol=None, equal_nan=True, check_dtype=True, **kwargs):
    """fn(*args) on CPU vs on tpu (args moved there); returns the tpu result."""
    expected = fn(*args, **kwargs)
    got = fn(*to_tpu(args), **to_tpu(kwargs))
    torch.testing.assert_close(to_cpu(got), expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                               check_dtype=check_dtype)
    if isinstance(got, torch.Tensor):
        assert got.device.type == "tpu"
    return got


def compare_grad(fn, *args, rtol=None, atol=None, grad_rtol=None, grad_atol=None):
    """compare(fn, *args), then backward from every differentiable output
    with one seeded upstream gradient: the gradients of the tensor arguments
    that require grad and of the parameters of module arguments (the tpu
    side runs on a copy) match the CPU's. Returns the tpu result."""
    leaves = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
              for a in args]
    tpu_leaves = to_tpu(leaves)
    expected, got = fn(*leaves), fn(*tpu_leaves)
    torch.testing.assert_close(to_cpu(got), expected, rtol=rtol, atol=atol, equal_nan=True)
    outs = [(e, g) for e, g in zip(tree_leaves(expected), tree_leaves(got))
            if isinstance(e, torch.Tensor) and e.requires_grad]
    ups = [make(e.shape, e.dtype, seed=i + 1) for i, (e, _) in enumerate(outs)]
    torch.autograd.backward([e for e, _ in outs], ups)
    torch.autograd.backward([g for _, g in outs], to_tpu(ups))

    def grads(values):
        return [p.grad for v in values
                for p in (v.parameters() if isinstance(v, torch.nn.Module) else [v])
                if isinstance(p, torch.Tensor) and p.requires_grad]
    torch.testing.assert_close(to_cpu(grads(tpu_leaves)), grads(leaves), rtol=grad_rtol or rtol,
                               atol=grad_atol or atol, equal_nan=True)
    return got


def compare_compiled_step(step, module, *inputs, rtol=1e-5, atol=1e-6, grad_rtol=None):
    """step(module, *inputs) (which calls backward) on CPU vs compiled for tpu
    on a copy of |module|: the returned loss and every parameter's gradient
    agree."""
    tpu_module = copy.deepcopy(module).to("tpu")
    torch._dynamo.reset()
    expected = step(module, *inputs)
    got = torch.compile(step, backend="tpu")(tpu_module, *to_tpu(inputs))
    torch.testing.assert_close(got.cpu(), expected, rtol=rtol, atol=atol)
    for p, q in zip(module.parameters(), tpu_module.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=grad_rtol or rtol, atol=atol)


def dumped_programs(tmp_path, code):
    """Runs |code| in a fresh process that dumps every program it compiles
    (TORCHTPU_DUMP_DIR, with a cache of its own so that nothing is skipped);
    returns {file name: StableHLO text}."""
    env = dict(os.environ, TORCHTPU_DUMP_DIR=str(tmp_path), TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return {p.name: p.read_text() for p in tmp_path.glob("*.mlir")}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def _finish(procs, timeout, what):
    """Every process's output; past |timeout| every process group still
    running is killed and the test fails."""
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    os.killpg(q.pid, signal.SIGKILL)
            out, _ = p.communicate()
            pytest.fail(f"{what} did not finish in {timeout} s:\n{out[-4000:]}")
        outs.append(out)
    return outs


def torchrun(args, n, timeout, python=sys.executable, cwd=None, env=None):
    """`torchrun --nproc-per-node=n *args` (|python|'s) with this tree first
    on the path; returns (exit status, output)."""
    cmd = [python, "-m", "torch.distributed.run", f"--nproc-per-node={n}", f"--master-port={free_port()}", *args]
    p = subprocess.Popen(cmd, cwd=cwd, env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    out, = _finish([p], timeout, " ".join(args))
    return p.returncode, out


def launch(args, n, timeout, python=sys.executable, cwd=None, env=None):
    """n plain processes of `python *args` with the variables torchrun sets
    (RANK, WORLD_SIZE, MASTER_*), without torchrun's agent stopping the
    others when one exits; returns ([exit status], [output]) by rank."""
    port = str(free_port())
    procs = [subprocess.Popen([python, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True,
                              env=_env({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n),
                                        "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                                        **(env or {})}))
             for r in range(n)]
    outs = _finish(procs, timeout, " ".join(args))
    return [p.returncode for p in procs], outs


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "strict_eager: the test asserts what strict eager does inside (one program per op, "
        "the programs a dump holds, compile counts); it runs strict when the suite runs with "
        "TORCHTPU_EAGER=fused, its subprocesses too")


@pytest.fixture(autouse=True)
def _strict_eager(request, monkeypatch):
    if request.node.get_closest_marker("strict_eager") is None:
        yield
        return
    monkeypatch.setenv("TORCHTPU_EAGER", "strict")
    with torchtpu.eager_mode("strict"):
        yield


class _RaisesByTheNextCut:
    """pytest.raises' context, ending with a cut (torch.tpu.synchronize)."""

    def __init__(self, context):
        self.context = context

    def __enter__(self):
        return self.context.__enter__()

    def __exit__(self, kind, value, traceback):
        if kind is None:
            try:
                torch.tpu.synchronize()
            except BaseException as e:  # noqa: BLE001 - the block's error, raised at the cut
                if not self.context.__exit__(type(e), e, e.__traceback__):
                    raise
                return True
        return self.context.__exit__(kind, value, traceback)


@pytest.fixture(autouse=True)
def _errors_by_the_next_cut(monkeypatch):
    """In fused eager a data check (an index out of range) raises at the next
    cut, not at its call: so a `pytest.raises` block ends with one, as a user
    who catches such an error writes it (a no-op in strict eager, which
    raised at the call)."""
    real = pytest.raises

    def raises(expected, *args, **kwargs):
        if args and callable(args[0]):  # pytest.raises(E, fn, *args)
            fn = args[0]

            def fn_then_cut(*a, **k):
                out = fn(*a, **k)
                torch.tpu.synchronize()
                return out
            return real(expected, fn_then_cut, *args[1:], **kwargs)
        return _RaisesByTheNextCut(real(expected, *args, **kwargs))
    monkeypatch.setattr(pytest, "raises", raises)
    yield


@pytest.fixture
def no_fallbacks():
    """Fails the test if any op ran through the CPU fallback."""
    torchtpu.reset_stats()
    yield
    fallbacks = torchtpu.stats()["fallbacks"]
    assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"


def write_dist_info(directory):
    """Writes torchtpu's distribution metadata into |directory| as
    pyproject.toml declares it (the entry points a pip install writes): put
    first on a process's path, it shadows any other installed copy's, so the
    process finds this tree's plugins."""
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    info = directory / f"torchtpu-{project['version']}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torchtpu\nVersion: {project['version']}\n")
    lines = []
    for group, points in project["entry-points"].items():
        lines += [f"[{group}]", *(f"{name} = {target}" for name, target in points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
