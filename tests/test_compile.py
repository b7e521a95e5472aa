"""torch.compile(backend="tpu"): whole graphs as XLA programs through the
same rules as eager. Compiled, eager and CPU agree; training works; graphs
split around ops without a rule; the on-disk cache serves a second process."""
import copy
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from conftest import dumped_programs
from models import CNN, GPT, MLP


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def lm_data(steps, batch=4, seq=16, vocab=64):
    data = (torch.randint(0, vocab, (steps, batch, 1)) + 5 * torch.arange(seq + 1)) % vocab
    return [(d[:, :-1], d[:, 1:]) for d in data]


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt"])
def test_forward_compiled_eager_cpu_agree(name):
    torch.manual_seed(0)
    model, x = {
        "mlp": (MLP(), torch.randn(8, 32)),
        "cnn": (CNN(), torch.randn(4, 3, 16, 16)),
        "gpt": (GPT(), torch.randint(0, 64, (2, 16))),
    }[name]
    model.eval()
    expected = model(x)
    tpu_model = copy.deepcopy(model).to("tpu")
    torchtpu.reset_stats()
    eager = tpu_model(x.to("tpu"))
    compiled = torch.compile(tpu_model, backend="tpu")(x.to("tpu"))
    assert torchtpu.stats()["fallbacks"] == {}
    torch.testing.assert_close(eager.cpu(), expected)
    torch.testing.assert_close(compiled.cpu(), expected)
    torch.testing.assert_close(compiled.cpu(), eager.cpu())


def train(model, batches, step_fn, device):
    losses = []
    for x, y in batches:
        losses.append(step_fn(x.to(device), y.to(device)).item())
    return losses


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt"])
def test_training_compiled_matches_cpu(name):
    torch.manual_seed(0)
    if name == "gpt":
        model, batches, loss_fn = GPT(), lm_data(10), lambda m, x, y: m(x, y)
    else:
        model = MLP() if name == "mlp" else CNN()
        shape = (16, 32) if name == "mlp" else (8, 3, 16, 16)
        teacher = torch.randn(torch.Size(shape[1:]).numel(), 10)
        xs = [torch.randn(shape) for _ in range(4)]
        batches = [(x, (x.flatten(1) @ teacher).argmax(1)) for x in xs] * 3
        batches = batches[:10]
        loss_fn = lambda m, x, y: F.cross_entropy(m(x), y)  # noqa: E731

    def runner(device, compile_model):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        fwd = torch.compile(m, backend="tpu") if compile_model else m

        def step(x, y):
            opt.zero_grad()
            loss = loss_fn(fwd, x, y)
            loss.backward()
            opt.step()
            return loss
        return step

    torchtpu.reset_stats()
    cpu = train(model, batches, runner("cpu", False), "cpu")
    tpu = train(model, batches, runner("tpu", True), "tpu")
    assert torchtpu.stats()["fallbacks"] == {}
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-4, atol=0)
    assert sum(cpu[-3:]) < sum(cpu[:3])


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_compiled_optimizer_step(opt_name):
    """The whole step, optimizer included, under torch.compile (AdamW keeps
    its step count on the CPU: the graph updates it there)."""
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))

    def make(device):
        m = copy.deepcopy(model).to(device)
        opt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
               else torch.optim.AdamW(m.parameters(), lr=1e-2))

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss
        return m, step

    cpu_model, cpu_step = make("cpu")
    tpu_model, tpu_step = make("tpu")
    tpu_step = torch.compile(tpu_step, backend="tpu")
    for _ in range(4):
        a = cpu_step(x, y).item()
        b = tpu_step(x.to("tpu"), y.to("tpu")).item()
        assert abs(a - b) <= 1e-4 * abs(a)
    for p, q in zip(cpu_model.parameters(), tpu_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5)


def _foreach_mix(xs, ys, t):
    a = torch._foreach_add(xs, ys, alpha=0.5)
    b = torch._foreach_maximum(a, 0.1)  # eager's item op: clamp_min
    torch._foreach_mul_(b, ys)  # in place: functionalized
    c = torch._foreach_pow(2.0, xs)  # a number to tensor powers
    d = torch._foreach_addcdiv(xs, ys, c, t)
    e = torch._foreach_clone(d)  # no item rule: decomposed
    return b, c, d, torch.stack(torch._foreach_norm(e, 2.0))


def _record_programs(monkeypatch):
    """The ops of every program the backend builds from here on, as a list
    of sets of call_function targets (one set per program)."""
    from torchtpu import compile as backend
    made = []
    real = backend._Runner

    def runner(gm, name):
        made.append({n.target for n in gm.graph.nodes if n.op == "call_function"})
        return real(gm, name)
    monkeypatch.setattr(backend, "_Runner", runner)
    return made


def test_foreach_ops_stay_whole_in_a_graph(monkeypatch):
    """A _foreach_ op stays one node of the graph (an optimizer's update of
    a hundred parameters traces as a few dozen nodes) and the walker runs the
    per-tensor op eager runs per item; ops without one are decomposed."""
    made = _record_programs(monkeypatch)
    xs = [torch.randn(3, 4), torch.randn(5), torch.randn(2, 2, 2)]
    ys = [torch.rand(x.shape) + 0.5 for x in xs]
    t = 0.5
    got = torch.compile(_foreach_mix, backend="tpu")([x.to("tpu") for x in xs], [y.to("tpu") for y in ys], t)
    want = _foreach_mix(xs, ys, t)
    for g, w in zip(got, want):
        for u, v in zip(g if isinstance(g, (list, tuple)) else [g], w if isinstance(w, (list, tuple)) else [w]):
            torch.testing.assert_close(u.cpu(), v)
    aten = torch.ops.aten
    (targets,) = made
    assert {aten._foreach_add.List, aten._foreach_maximum.Scalar, aten._foreach_mul.List,
            aten._foreach_pow.ScalarAndTensor, aten._foreach_norm.Scalar} <= targets
    assert aten._foreach_clone.default not in targets


def test_graph_and_eager_decompose_alike(monkeypatch):
    """One decomposition policy: an op whose PyTorch kernels are per device
    (bucketize: the CPU's and CUDA's) and that has no rule decomposes in a
    graph as the eager fallback decomposes it, so the graph stays one
    program; before, it split the graph and ran eagerly."""
    made = _record_programs(monkeypatch)

    def f(x, edges):
        return torch.bucketize(x * 2, edges) + 1

    x, edges = torch.randn(64), torch.linspace(-2, 2, 9)
    got = torch.compile(f, backend="tpu")(x.to("tpu"), edges.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x, edges))
    assert len(made) == 1 and torch.ops.aten.bucketize.Tensor not in made[0]


def test_graph_breaks():
    def f(x):
        y = torch.sin(x) * 2
        print("a graph break")  # noqa: T201
        if y.sum() > 0:  # data-dependent control flow: another break
            y = y + 1
        return torch.relu(y) @ x.t()

    x = torch.randn(4, 4)
    torchtpu.reset_stats()
    got = torch.compile(f, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x))
    assert torchtpu.stats()["fallbacks"] == {}


def test_input_views_and_mutation():
    """Inputs may be views of bigger storages; in-place updates of inputs land
    in their storages, as in eager."""
    def f(a, b):
        a.mul_(2)
        return a + b.t()

    base = torch.arange(24.0).reshape(4, 6)
    cpu_base = base.clone()
    expected = f(cpu_base[:, 1:5], cpu_base[:4, :4].clone())
    tpu_base = base.to("tpu")
    got = torch.compile(f, backend="tpu")(tpu_base[:, 1:5], tpu_base[:4, :4].clone())
    torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(tpu_base.cpu(), cpu_base)


def test_input_written_and_read_in_one_graph():
    """A new input value the graph also reads keeps the old buffer (not
    donated) and is still written back; one read only by the write is."""
    def f(a, b, c):
        a.add_(b)   # the new a is read again below
        c.mul_(2)   # the new c is only written
        return a * 2 + c.sum()

    a, b, c = torch.randn(8, 16), torch.randn(8, 16), torch.randn(8, 16)
    cpu = [t.clone() for t in (a, b, c)]
    expected = f(*cpu)
    tpu = [t.to("tpu") for t in (a, b, c)]
    got = torch.compile(f, backend="tpu")(*tpu)
    torch.testing.assert_close(got.cpu(), expected)
    for x, y in zip(tpu, cpu):
        torch.testing.assert_close(x.cpu(), y)


@pytest.mark.strict_eager
def test_parameter_updates_keep_the_parameter_shape(tmp_path):
    """An optimizer step reads and writes each parameter whole, in its own
    shape, and donates it: nothing in the program reshapes it, which would
    make XLA copy the parameter around its update (a storage's buffer keeps
    the shape of its last whole write). Eager in-place ops alike."""
    code = textwrap.dedent("""
        import torch, torchtpu
        m = torch.nn.Linear(32, 16).to("tpu")
        opt = torch.optim.AdamW(m.parameters())
        step = torch.compile(opt.step, backend="tpu")
        for _ in range(2):
            m(torch.randn(4, 32, device="tpu")).sum().backward()
            step()
        with torch.no_grad():
            m.weight.mul_(0.5)
        torch.tpu.synchronize()
    """)
    programs = dumped_programs(tmp_path, code)
    donated = "%v0: tensor<16x32xf32> {tf.aliasing_output"
    steps = [t for n, t in programs.items() if n.startswith("graph")]
    muls = [t for n, t in programs.items() if n.startswith("aten__mul_.Tensor") and donated in t]
    # One optimizer program for both steps: the bias gradient (first a view of
    # a [1, 16] sum, then accumulated as [16]) has one buffer type.
    assert len(steps) == 1 and muls, sorted(programs)
    for text in steps + muls:
        assert donated in text
        assert "(tensor<16x32xf32>) -> tensor<512xf32>" not in text


def test_saved_views_alias_their_base():
    """Graph outputs that are views (saved for backward: a weight's
    transpose, the heads of one qkv projection) are views of their base, as
    in eager, not copies; the gradients are still CPU's."""
    torch.manual_seed(0)
    cpu = torch.nn.Linear(16, 48)
    tpu = copy.deepcopy(cpu).to("tpu")

    def f(lin, x):
        q, k, v = lin(x).split(16, dim=2)
        q, k, v = (z.view(2, 6, 2, 8).transpose(1, 2) for z in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()

    x = torch.randn(2, 6, 16, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        loss = torch.compile(f, backend="tpu")(tpu, xt)
    loss.backward()
    f(cpu, x).backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(tpu.weight.grad.cpu(), cpu.weight.grad, rtol=1e-4, atol=1e-5)

    def storage(t):
        return t.untyped_storage().data_ptr()
    weight_t = [t for t in saved if storage(t) == storage(tpu.weight)]
    assert [(tuple(t.shape), t.stride()) for t in weight_t] == [((16, 48), (1, 16))]
    heads = [t for t in saved if t.shape == (2, 2, 6, 8) and t.stride() == (288, 8, 48, 1)]
    assert sorted(t.storage_offset() for t in heads) == [0, 16, 32]
    assert len({storage(t) for t in heads}) == 1


def test_dynamic_shapes_specialize_with_a_note():
    def f(x):
        return (x * x).sum(0)

    import torchtpu.compile as tc
    tc._warned_dynamic = False  # the note is once per process
    cf = torch.compile(f, backend="tpu", dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5, 7):
            x = torch.randn(n, 4)
            torch.testing.assert_close(cf(x.to("tpu")).cpu(), f(x))
    notes = [w for w in caught if "dynamic shapes are specialized" in str(w.message)]
    assert len(notes) == 1


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_growing_attention_length_traces_once(kv_heads):
    # A decoder's KV cache grows by a token per call. Once dynamo marks the
    # length dynamic, no op may read it as a constant (torchtpu's choice of
    # attention implementation once did, and every length recompiled).
    from torch._dynamo.testing import CompileCounterWithBackend

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != 4) * 2

    counter = CompileCounterWithBackend("tpu")
    cf = torch.compile(f, backend=counter)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-time note on specialized shapes
        for n in range(5, 10):
            q, k, v = torch.randn(2, 4, 1, 8), torch.randn(2, kv_heads, n, 8), torch.randn(2, kv_heads, n, 8)
            got = cf(q.to("tpu"), k.to("tpu"), v.to("tpu"))
            torch.testing.assert_close(got.cpu(), f(q, k, v), rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 2  # the first length, then every length


def test_op_without_rule_splits_the_graph():
    def f(x, c):
        y = torch.exp(x)
        z = torch.ops.aten._compute_linear_combination(y, c).abs()  # no rule: runs eagerly between two programs
        return z * 2 + 1

    x, c = torch.randn(4, 4), torch.randn(3, 4)
    torchtpu.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(f, backend="tpu")(x.to("tpu"), c.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x, c))
    assert any("_compute_linear_combination" in name for name in torchtpu.stats()["fallbacks"])


def _programs_of(monkeypatch):
    """The partitions (lists of node names) of each split graph, as
    compile._partitions makes them."""
    from torchtpu import compile as backend
    seen = []
    real = backend._partitions

    def partitions(gm):
        parts = real(gm)
        seen.append([[n.name for n in part] for part in parts])
        return parts
    monkeypatch.setattr(backend, "_partitions", partitions)
    return seen


def test_split_graph_runs_in_as_few_programs_as_its_paths_need(monkeypatch):
    """Supported work on either side of an op without a rule joins one
    program per stage: what does not depend on the eager op (cos) shares the
    first program, what does (the tail) the second, although the two sides
    are not connected inside either program."""
    def f(x, c):
        y = torch.exp(x)
        z = torch.ops.aten._compute_linear_combination(y, c)
        w = torch.cos(x) * 3
        return z.abs() * 2 + w

    seen = _programs_of(monkeypatch)
    x, c = torch.randn(4, 4), torch.randn(4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(f, backend="tpu")(x.to("tpu"), c.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x, c))
    assert len(seen) == 1 and len(seen[0]) == 2, seen
    first, second = seen[0]
    assert "exp" in first and "cos" in first and "abs_1" not in first
    assert "abs_1" in second and "exp" not in second


def test_long_graph_with_many_eager_ops_splits_in_one_pass(monkeypatch):
    """A forward of 40 blocks, each ending in an op without a rule, becomes
    41 programs with the CPU's values (a graph of this kind, 15,000 nodes
    long, waited minutes in a merging partitioner)."""
    def f(x, c):
        for i in range(40):
            x = torch.tanh(x * 1.01 + i) + x.sin()
            x = torch.ops.aten._compute_linear_combination(x, c) / 3
        return x

    seen = _programs_of(monkeypatch)
    g = torch.Generator().manual_seed(0)
    x, c = torch.randn(3, 5, generator=g), torch.randn(3, 3, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(f, backend="tpu")(x.to("tpu"), c.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x, c))
    assert [len(s) for s in seen] == [41]


def _view_writes(x, y, d):
    z = x.clone()
    z[:, 1:8:3] = y          # slice_scatter, strided
    z[:, -1] = z[:, 0] * 2   # select_scatter, negative index
    w = z.clone()
    w.diagonal(1, -2, -1).copy_(d)  # diagonal_scatter
    u = torch.slice_scatter(w, y[:, :0], 1, 9, 100)  # an empty slice past the end
    return torch.select_scatter(u, u[0] * 3, 0, -1)


def test_view_writes_stay_in_the_graphs_program(monkeypatch):
    """Writes through views (functionalized into slice_scatter, select_scatter,
    diagonal_scatter, as AOTAutograd makes of in-place updates of parts of a
    tensor: an attention cache, a rotary half) are rules of the graph: the
    forward and backward each stay one program. Without rules, a model's
    backward of 15,000 nodes waited for minutes in the partitioner."""
    from torchtpu import compile as backend
    split = []
    real = backend._partitions

    def partitioner(gm):
        split.append(gm)
        return real(gm)
    monkeypatch.setattr(backend, "_partitions", partitioner)
    g = torch.Generator().manual_seed(0)
    x, y, d = (torch.randn(*s, generator=g) for s in ((5, 8), (5, 3), (5,)))
    want_x, want_y, want_d = (t.clone().requires_grad_() for t in (x, y, d))
    want = _view_writes(want_x, want_y, want_d)
    (want * torch.arange(want.numel()).reshape(want.shape)).sum().backward()
    got_x, got_y, got_d = (t.to("tpu").requires_grad_() for t in (x, y, d))
    got = torch.compile(_view_writes, backend="tpu")(got_x, got_y, got_d)
    (got * torch.arange(got.numel(), device="tpu").reshape(got.shape)).sum().backward()
    torch.testing.assert_close(got.cpu(), want)
    for g_, w in ((got_x, want_x), (got_y, want_y), (got_d, want_d)):
        torch.testing.assert_close(g_.grad.cpu(), w.grad)
    assert split == []  # no graph needed splitting


def _steps_away(x):
    y = (x * 2).cpu()  # used on the host: the rest runs on the CPU, as in eager
    return y + 1, x.sum().cpu(), (x + 1).sum()


def _steps_in(c, t):
    return c.to("tpu") * t, torch.arange(4.0).to("tpu") + t


def _kaiser():
    return torch.signal.windows.kaiser(6, beta=12.0, device="cpu")


def _cpu_only(c):
    return c * torch.tensor(3.0) + 1


def _linspace_of_tpu_ends(s, e):
    return torch.linspace(s, e, 7, device="cpu"), torch.logspace(s, e, 5, device="tpu")


@pytest.mark.parametrize("fn, args", [
    (_steps_away, lambda: (torch.arange(4.0, device="tpu"),)),
    (_steps_in, lambda: (torch.arange(4.0), torch.ones(4, device="tpu"))),
    (_kaiser, lambda: ()),
    (_cpu_only, lambda: (torch.arange(4.0),)),
    (_linspace_of_tpu_ends, lambda: (torch.tensor(1.0, device="tpu"), torch.tensor(-3, device="tpu"))),
])
def test_tensors_keep_their_devices(fn, args):
    """A compiled function's CPU tensors stay CPU tensors: CPU work runs as
    PyTorch runs it, a .cpu() inside the graph returns a CPU tensor, CPU
    inputs may move to tpu inside it (before: wrong values for a CPU-only
    window, tpu tensors where .cpu() was asked, "a compiled tpu graph got an
    input on cpu")."""
    want = fn(*args())
    got = torch.compile(fn, backend="tpu")(*args())
    want, got = (want,) if isinstance(want, torch.Tensor) else want, (got,) if isinstance(got, torch.Tensor) else got
    for g, w in zip(got, want, strict=True):
        assert g.device == w.device
        torch.testing.assert_close(g.cpu(), w.cpu())


class _ScaledByAConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):  # DeBERTa's attention scale: a tensor made in forward, a graph constant
        return self.lin(x) / torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float) * 2)


def test_tensor_constants_of_a_training_graph():
    """AOTAutograd compiles a training graph with its fake mode active: the
    graph's tensor constants were copied to tpu as fake tensors, read as
    zeros (DeBERTa's logits were NaN)."""
    torch.manual_seed(0)
    model, x = _ScaledByAConstant(), torch.randn(4, 16)
    on_tpu = copy.deepcopy(model).to("tpu")
    want = model(x)
    got = torch.compile(on_tpu, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), want)
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(on_tpu.lin.weight.grad.cpu(), model.lin.weight.grad)


def _overlapping_chunks(x, w):
    """Longformer's _chunk: overlapping windows of a transposed projection,
    made with as_strided from the view's own strides."""
    h = (x @ w).transpose(0, 1)  # [heads*batch, seq, d] as a view of [seq, heads*batch, d]
    h = h.reshape(h.size(0), h.size(1) // 4, 4, h.size(2))
    size, stride = list(h.size()), list(h.stride())
    size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
    return h.as_strided(size=size, stride=stride).sum(2).pow(2).sum()


def test_as_strided_reads_the_storage_of_a_view():
    """as_strided in a graph reads its input's storage, not its values read
    densely (LED's compiled attention gradients were off by 100%)."""
    torch.manual_seed(0)
    x, w = torch.randn(16, 6, 8), torch.randn(8, 8)
    want = _overlapping_chunks(x.requires_grad_(), w)
    want.backward()
    xt = x.detach().to("tpu").requires_grad_()
    got = torch.compile(_overlapping_chunks, backend="tpu")(xt, w.to("tpu"))
    got.backward()
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)


def test_complex_results_as_real_in_a_graph():
    x = torch.randn(100)
    f = lambda x: torch.stft(x, 10, hop_length=2, window=torch.hann_window(10, device=x.device),  # noqa: E731
                             return_complex=True).abs() + torch.view_as_real(torch.fft.rfft(x)).sum(-1)[:6, None]
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x.to("tpu")).cpu(), f(x), rtol=1e-4, atol=1e-4)


def _ctc_head(x, w, targets):
    log_probs = (x @ w).log_softmax(-1).transpose(0, 1)  # [T, N, C]
    return F.ctc_loss(log_probs, targets, [10, 8, 9], [4, 2, 3])


def test_ctc_loss_in_a_compiled_training_step():
    """Dynamo breaks the graph at the CTC loss (its output shape depends on
    the lengths); the loss and its gradient run on tpu between the graphs,
    nothing on the CPU."""
    torch.manual_seed(0)
    x, w, targets = torch.randn(3, 10, 8), torch.randn(8, 6, requires_grad=True), torch.randint(1, 6, (3, 4))
    want = _ctc_head(x, w, targets)
    want.backward()
    wt = w.detach().to("tpu").requires_grad_()
    torchtpu.reset_stats()
    got = torch.compile(_ctc_head, backend="tpu")(x.to("tpu"), wt, targets.to("tpu"))
    got.backward()
    torch.testing.assert_close(got.cpu(), want.detach())
    torch.testing.assert_close(wt.grad.cpu(), w.grad)
    assert not torchtpu.stats()["fallbacks"]


def test_errors_inside_a_compiled_graph():
    def f(a, b):
        return a @ b

    cf = torch.compile(f, backend="tpu")
    with pytest.raises(RuntimeError):
        cf(torch.ones(2, 3, device="tpu"), torch.ones(4, 5, device="tpu"))
    torch.testing.assert_close(cf(torch.ones(2, 3, device="tpu"), torch.ones(3, 5, device="tpu")).cpu(),
                               torch.full((2, 5), 3.0))


def test_a_dtype_tpu_does_not_hold_is_eagers_error_in_a_graph():
    """A graph value of a dtype tpu has no type for (ComplexHalf) raises
    eager's message, not the graph builder's argument error."""
    x = torch.randn(3, device="tpu")
    with pytest.raises(RuntimeError, match="tpu does not support tensors of dtype ComplexHalf"):
        x.chalf()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexHalf is experimental
        with pytest.raises(RuntimeError, match="tpu does not support tensors of dtype ComplexHalf"):
            torch.compile(lambda x: x.chalf() * 2, backend="tpu")(x)


def test_assertions_inside_a_compiled_graph():
    """one_hot's decomposition asserts its classes (_assert_async): the check
    runs in the program, and a failing one raises PyTorch's message."""
    f = torch.compile(lambda x: F.one_hot(x, 4).float().sum(0), backend="tpu")
    torchtpu.reset_stats()
    torch.testing.assert_close(f(torch.tensor([0, 3, 3], device="tpu")).cpu(), torch.tensor([1.0, 0, 0, 2]))
    assert not torchtpu.stats()["fallbacks"]
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        f(torch.tensor([0, -1, 3], device="tpu"))
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value"):
        torch._assert_async(torch.tensor(0.0, device="tpu"))


def test_graph_with_many_index_checks():
    """Index checks of many ops in one graph share one flag per error; an
    index out of range still raises PyTorch's error, and nothing is written."""
    def f(x, i, out):
        y = x.index_select(0, i)
        for _ in range(6):
            y = y + x.gather(0, i.view(-1, 1).expand(-1, x.shape[1])) + F.embedding(i, x)
        out.copy_(y)
        return y

    x = torch.randn(5, 3)
    i = torch.tensor([4, 0, 2])
    out = torch.zeros(3, 3, device="tpu")
    cf = torch.compile(f, backend="tpu")
    torch.testing.assert_close(cf(x.to("tpu"), i.to("tpu"), out).cpu(), f(x, i, torch.zeros(3, 3)))
    torch.testing.assert_close(out.cpu(), f(x, i, torch.zeros(3, 3)))
    before = out.cpu()
    with pytest.raises(IndexError, match="index out of range"):
        cf(x.to("tpu"), torch.tensor([4, 0, 5], device="tpu"), out)
    torch.testing.assert_close(out.cpu(), before)


WORKLOAD = textwrap.dedent("""
    import json, sys, torch, torchtpu
    from torch._dynamo.utils import counters
    sys.path.insert(0, {tests!r})
    from models import GPT
    torch.manual_seed(0)
    m = GPT().to("tpu")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    step = torch.compile(m, backend="tpu", dynamic={dynamic})
    x = torch.randint(0, 64, (2, 17))
    for n in (16, 12) if {dynamic} else (16, 16):
        opt.zero_grad()
        loss = step(x[:, :n].to("tpu"), x[:, 1:n + 1].to("tpu"))
        loss.backward()
        opt.step()
    aot = counters["aot_autograd"]
    print(json.dumps({{"loss": loss.item(), "aot_hits": aot["autograd_cache_hit"],
                      "aot_misses": aot["autograd_cache_miss"], "aot_saved": aot["autograd_cache_saved"],
                      **{{k: v for k, v in torchtpu.stats().items() if k != "fallbacks"}}}}))
""")


def run_workload(cache_dir, dynamic=False, **env):
    """The workload in a fresh process, with torchtpu's cache in |cache_dir|
    and PyTorch's (AOTAutograd's entries) in its "torch" folder; |dynamic|:
    compiled with dynamic=True, sequences of two lengths."""
    code = WORKLOAD.format(tests=os.path.dirname(__file__), dynamic=dynamic)
    env = {"TORCHTPU_CACHE_DIR": str(cache_dir), "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "torch"), **env}
    env = dict(os.environ, **env)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_persistent_cache_serves_a_second_process(tmp_path, dynamic):
    """A second process compiles nothing: XLA's executables come from
    torchtpu's cache and AOTAutograd's graphs (the forward and backward it
    traces) from PyTorch's, with torchtpu's compiled graphs bundled in;
    with dynamic=True too, whose graphs have symbolic sizes. (Dynamo's
    first attempt at the dynamic forward restarts once it finds that a
    float it made symbolic must be a constant: that attempt's lookup misses
    in every process and saves nothing.)"""
    first = run_workload(tmp_path, dynamic)
    assert first["cache_misses"] > 0 and first["cache_loads"] == 0
    assert first["aot_saved"] == 1 and first["aot_hits"] == 0
    assert first["aot_misses"] == (2 if dynamic else 1)
    second = run_workload(tmp_path, dynamic)
    assert second["cache_misses"] == 0
    assert second["cache_loads"] == first["cache_misses"]
    assert second["aot_hits"] == 1 and second["aot_saved"] == 0 and second["aot_misses"] == first["aot_misses"] - 1
    assert second["loss"] == first["loss"]


def test_aot_cache_entries_are_per_torchtpu_build_and_off_with_the_cache(tmp_path):
    """AOTAutograd's entries are keyed by torchtpu's build and settings too
    (a kernel setting traces anew), and TORCHTPU_CACHE_DIR=off keeps none."""
    first = run_workload(tmp_path)
    other = run_workload(tmp_path, TORCHTPU_KERNELS="0")
    assert other["aot_hits"] == 0 and other["aot_misses"] == 1
    assert abs(other["loss"] - first["loss"]) < 1e-4 * abs(first["loss"])
    entries = sorted((tmp_path / "torch").rglob("aotautograd/*/*"))
    assert len(entries) == 2
    off = run_workload(tmp_path, TORCHTPU_CACHE_DIR="off")  # the same entries are there to find
    assert off["aot_hits"] == off["aot_saved"] == 0 and off["cache_loads"] == 0
    assert sorted((tmp_path / "torch").rglob("aotautograd/*/*")) == entries


def test_corrupt_cache_files_are_survived_and_rewritten(tmp_path):
    first = run_workload(tmp_path)
    files = sorted(p for p in tmp_path.rglob("*.xla"))
    assert len(files) == first["cache_misses"]
    files[0].write_bytes(files[0].read_bytes()[:100])  # truncated
    files[1].write_bytes(b"garbage" * 50)              # not an entry at all
    (entry,) = (tmp_path / "torch").rglob("aotautograd/*/*")
    entry.write_bytes(entry.read_bytes()[:1000])      # AOTAutograd's entry, truncated
    second = run_workload(tmp_path)
    assert second["cache_misses"] == 2 and second["loss"] == first["loss"]
    assert second["aot_hits"] == 0 and second["aot_saved"] == 1
    third = run_workload(tmp_path)
    assert third["cache_misses"] == 0  # both were rewritten
    assert third["aot_hits"] == 1 and third["loss"] == first["loss"]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_graphs_from_the_aot_cache_run_as_compiled(tmp_path, monkeypatch, dynamic):
    """A graph AOTAutograd's cache hands back (rebuilt from its packed form:
    views of inputs and of values, an input written in place, a tensor
    constant, a backward; sizes symbolic or not) gives the results and
    gradients of the graph it was, in the same process after dynamo forgets
    the function, for every input size."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    from torch._dynamo.utils import counters

    def f(x, w, buf):
        h = torch.tanh(x @ w) * torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)
        buf.add_(h.detach().sum(0))
        return h.t(), h[:, 1:3], x.view(-1)

    torch.manual_seed(0)
    w = torch.randn(3, 4, requires_grad=True)
    results = []
    for _ in range(2):
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(f, backend="tpu", dynamic=dynamic)
        for rows in (5, 7) if dynamic else (5,):
            x = torch.randn(rows, 3)
            w.grad = None
            expected = f(x, w, torch.zeros(4))
            sum(o.sum() for o in expected[:2]).backward()
            wt = w.detach().to("tpu").requires_grad_()
            buf = torch.zeros(4, device="tpu")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the one-time note on specialized shapes
                got = compiled(x.to("tpu"), wt, buf)
            sum(o.sum() for o in got[:2]).backward()
            for g, e in zip(got, expected):
                torch.testing.assert_close(g.cpu(), e.detach())
            torch.testing.assert_close(wt.grad.cpu(), w.grad)
            torch.testing.assert_close(buf.cpu(), expected[0].t().detach().sum(0))
        results.append(dict(counters["aot_autograd"]))
    assert results[0].get("autograd_cache_hit", 0) == 0 and results[0]["autograd_cache_saved"] == 1
    assert results[1]["autograd_cache_hit"] == 1 and "autograd_cache_miss" not in results[1]


def test_aot_cache_keeps_autocast_apart(tmp_path, monkeypatch):
    """The same function traced under tpu autocast is another entry of
    AOTAutograd's cache, not the float32 one."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x, w = torch.randn(4, 8, device="tpu"), torch.randn(8, 2, device="tpu")
    dtypes = []
    for autocast in (False, True, False, True):
        torch._dynamo.reset()
        with torch.autocast("tpu", dtype=torch.bfloat16, enabled=autocast):
            dtypes.append(torch.compile(lambda a, b: a @ b, backend="tpu")(x, w).dtype)
    assert dtypes == [torch.float32, torch.bfloat16] * 2


ARTIFACTS = textwrap.dedent("""
    import json, sys, torch, torchtpu
    from torch._dynamo.utils import counters
    path = sys.argv[1]
    if sys.argv[2] == "load":
        torch.compiler.load_cache_artifacts(open(path, "rb").read())
    w = torch.ones(3, 3, device="tpu", requires_grad=True)
    loss = torch.compile(lambda x: (x @ w).tanh().sum(), backend="tpu")(torch.ones(2, 3, device="tpu"))
    loss.backward()
    if sys.argv[2] == "save":
        open(path, "wb").write(torch.compiler.save_cache_artifacts()[0])
    print(json.dumps([loss.item(), w.grad.sum().item(), counters["aot_autograd"]["autograd_cache_hit"]]))
""")


def test_cache_artifacts_carry_the_aot_entries(tmp_path):
    """torch.compiler.save_cache_artifacts() takes the tpu backend's
    AOTAutograd entries along; another cache directory that loads them
    traces nothing again."""
    def run(cache, mode):
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / cache), TORCHTPU_CACHE_DIR=str(tmp_path / "x"))
        out = subprocess.run([sys.executable, "-c", ARTIFACTS, str(tmp_path / "artifacts"), mode], env=env,
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    saved = run("a", "save")
    loaded = run("b", "load")
    assert saved[2] == 0 and loaded[2] == 1 and loaded[:2] == saved[:2]


def test_packed_graphs_keep_nodes_values_and_aliasing():
    """A graph packed for AOTAutograd's cache comes back with
    its nodes, arguments, fake values' layouts and devices, and the same
    values sharing a storage, and symbolic sizes as expressions over symbols
    of their own; data-dependent sizes are not packed."""
    import sympy
    from torch.fx.experimental.proxy_tensor import make_fx
    from torchtpu import _graph_pack
    from torchtpu._fx_program import tensors as _values

    def f(x, y, n):
        a = x.t()
        c = torch.mm(a, y) + n
        p, q = torch.ops.aten._foreach_add.Scalar([x, y], 1.0)
        return a[1:, :2], c.view(-1), c, p, q, x.view(torch.int32), n.cpu()

    args = (torch.randn(4, 3, device="tpu"), torch.randn(4, 2, device="tpu"), torch.tensor(2.0))
    gm = make_fx(f, tracing_mode="fake")(*args)
    back = _graph_pack.unpack(_graph_pack.pack(gm))

    def shape(g):
        storages = {}

        def layout(v):
            if isinstance(v, torch.fx.Node):
                return ("node", v.name)
            if isinstance(v, torch.Tensor):
                s = storages.setdefault(v.untyped_storage()._cdata, len(storages))
                return (v.dtype, tuple(v.shape), v.stride(), v.storage_offset(), str(v.device), s)
            if isinstance(v, (list, tuple)):
                return [layout(x) for x in v]
            return v
        return [(n.op, n.name, n.target, layout(n.args), layout(n.kwargs), layout(n.meta.get("val")))
                for n in g.graph.nodes]

    assert shape(back) == shape(gm)
    assert len({v for *_, v in (row[-1] for row in shape(gm) if isinstance(row[-1], tuple))}) < len(shape(gm))
    torch.testing.assert_close([t.cpu() for t in back(*args)], [t.cpu() for t in gm(*args)])

    # A dynamic graph: its sizes come back as the same expressions over new
    # symbols of their own shape environment, with the values traced.
    sym = make_fx(f, tracing_mode="symbolic")(*args)
    back = _graph_pack.unpack(_graph_pack.pack(sym))

    def canonical(g):
        names = {}

        def rename(v):
            if isinstance(v, (torch.SymInt, torch.SymBool)):
                expr = v.node.expr
                for s in sorted(expr.free_symbols, key=str):
                    names.setdefault(s, f"a{len(names)}")
                return (type(v).__name__, str(expr.subs({s: sympy.Symbol(n) for s, n in names.items()})),
                        v.node.hint)
            if isinstance(v, (list, tuple)):
                return [rename(x) for x in v]
            return v
        return [[rename(x) for x in row] for row in shape(g)]

    back_shape = canonical(back)
    assert back_shape == canonical(sym)
    assert any("a0" in str(row) for row in back_shape)  # sizes are symbolic
    envs = {s.node.shape_env for n in back.graph.nodes for v in _values(n) for s in v.shape
            if isinstance(s, torch.SymInt)}
    assert len(envs) == 1
    bigger = (torch.randn(6, 5, device="tpu"), torch.randn(6, 2, device="tpu"), torch.tensor(2.0))
    torch.testing.assert_close([t.cpu() for t in back(*bigger)], [t.cpu() for t in f(*bigger)])
    with pytest.raises(_graph_pack.Unpackable, match="data-dependent"):
        _graph_pack.pack(make_fx(lambda x: x.nonzero(), tracing_mode="symbolic")(args[0].cpu()))


def test_default_backend_compiles_tpu_graphs_with_tpu():
    """torch.compile(model) without a backend: Inductor's own "tpu" target
    (Pallas kernels for another runtime) failed here with "No module named
    'jax'"; a graph on tpu now compiles with backend="tpu", with a one-time
    note, forward and backward; a CPU graph stays Inductor's."""
    from torchtpu import compile as tpu_compile
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref = copy.deepcopy(model)
    x = torch.randn(3, 4)
    torch._dynamo.reset()
    tpu_compile._warned_inductor = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = torch.compile(model.to("tpu"))
        out = compiled(x.to("tpu"))
        out.square().sum().backward()
        compiled(x.to("tpu") + 1)
    notes = [w for w in caught if 'backend="tpu"' in str(w.message)]
    assert len(notes) == 1, [str(w.message) for w in caught]
    want = ref(x)
    want.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), want.detach())
    torch.testing.assert_close(model[0].weight.grad.cpu(), ref[0].weight.grad)
    # the routing itself: a graph with nothing on tpu goes to Inductor
    gm = torch.fx.symbolic_trace(lambda a: a.relu())
    chosen = tpu_compile.inductor_or_tpu(lambda g, inputs: "inductor", gm, [torch.ones(2)])
    assert chosen == "inductor"


def test_a_graph_program_on_a_storage_without_a_buffer_serves_one_with_it():
    """A graph's inputs are keyed by eager's key builder: a program built on
    an input whose storage has no buffer yet reads it as the buffer its key
    names, and runs right on the next input, which has that buffer."""
    def f(a):
        return a.view(torch.int32) + 1, a * 2

    g = torch.compile(f, backend="tpu")
    g(torch.empty(4, device="tpu"))  # contents unspecified: only the program counts
    x = torch.full((4,), 1.5)
    for got, want in zip(g(x.to("tpu")), f(x)):
        assert torch.equal(got.cpu(), want)


def test_reshape_that_copies_returns_no_view():
    """reshape of an expanded tensor copies (_unsafe_view): eager's result is
    no view, and a compiled function's was an as_strided view, which a later
    in-place op refused ("Output 0 of AsStrided is a view ... returns
    multiple views"; fuzz seed 7)."""
    def block(p):
        a = p.expand([3, 8, 4])
        return a, a.reshape([4, 8, 3])

    got = []
    for dev, backend in (("cpu", "aot_eager"), ("tpu", "tpu")):
        torch.manual_seed(0)
        p = torch.randn(8, 4).to(dev).requires_grad_()
        a, b = torch.compile(block, backend=backend)(p)
        assert b._base is None
        torch._foreach_mul_([b], 0.75)
        b.sum().backward()
        got.append((b.detach().cpu(), p.grad.cpu()))
    torch.testing.assert_close(got[1], got[0])


@pytest.mark.parametrize("split", [False, True])
def test_stacked_result_is_no_view(split):
    """stack decomposes into a cat and a view of it. Eager's result is no
    view, and a compiled function's was an as_strided view of the cat, made
    inside AOTAutograd's autograd.Function, so an in-place op on it raised
    "Output 0 of CompiledFunction is a view and is being modified inplace"
    (fuzz seed 54156: a _foreach_lerp_ over such a result). Also where an op
    without a rule splits the graph, and when AOTAutograd's cache reloads it."""
    def block(p, d, c):
        q = p * torch.ops.aten._compute_linear_combination(d, c) if split else p
        return torch.stack([q, q * 2], 0)

    got = []
    for dev, backend in (("cpu", "aot_eager"), ("tpu", "tpu"), ("tpu", "tpu")):
        torch._dynamo.reset()  # the second tpu round loads AOTAutograd's cache entry
        torch.manual_seed(0)
        p = torch.randn(3, 4).to(dev).requires_grad_()
        d, c = torch.randn(3, 4).to(dev), torch.randn(3, 3).to(dev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = torch.compile(block, backend=backend)(p, d, c)
        assert s._base is None
        torch._foreach_lerp_([s], [torch.ones_like(s)], 0.25)
        s.sum().backward()
        got.append((s.detach().cpu(), p.grad.cpu()))
    torch.testing.assert_close(got[1], got[0])
    torch.testing.assert_close(got[2], got[0])
