"""torch._foreach_* ops (what foreach optimizers and clip_grad_norm_ call): each
call is one program that applies the per-tensor op's rule to every item,
against PyTorch's CPU kernels, which apply the per-tensor op item by item."""
import pytest
import torch

import torchtpu
from conftest import to_cpu

SHAPES = [(3, 4), (5,), (2, 1, 3)]


def foreach_overloads():
    """Every functional and in-place _foreach_ overload (out= variants aside)."""
    found = []
    for s in torch._C._jit_get_all_schemas():
        if s.name.startswith("aten::_foreach_") and "out" not in s.overload_name:
            packet = getattr(torch.ops.aten, s.name.split("::")[1])
            found.append(getattr(packet, s.overload_name or "default"))
    return sorted(set(found), key=str)


def served(op):
    name = op._schema.name + (f".{op._schema.overload_name}" if op._schema.overload_name else "")
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")


SERVED = [op for op in foreach_overloads() if served(op)]


def make_args(op, seed=0):
    """CPU arguments for |op|: lists of three tensors of different shapes in
    (0.1, 0.9) (inside every unary op's domain), numbers, a 0-dim tensor."""
    g = torch.Generator().manual_seed(seed)
    if op is torch.ops.aten._foreach_mm.default:
        return [[torch.rand(s, generator=g) for s in shapes] for shapes in [((3, 4), (2, 5)), ((4, 2), (5, 3))]]
    args = []
    for a in op._schema.arguments:
        kind = {"List[Tensor]": "Tensor[]", "List[number]": "Scalar[]", "number": "Scalar"}.get(str(a.type), str(a.type))
        if a.kwarg_only or (a.has_default_value() and kind not in ("Tensor[]", "Scalar[]")):
            continue
        if kind == "Tensor[]":
            args.append([torch.rand(s, generator=g) * 0.8 + 0.1 for s in SHAPES])
        elif kind == "Scalar[]":
            args.append([0.5, 2, 0.25])
        elif kind == "Scalar":
            args.append(0.75 if a.name != "self" else 2.0)
        elif kind == "Tensor":
            args.append(torch.tensor(0.7))
        else:
            raise AssertionError(f"no argument for {kind} {a.name} of {op}")
    return args


def on_tpu(args):
    return [[t.to("tpu") for t in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor)
            else a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args]


def test_the_optimizer_ops_are_served():
    """What Adam, AdamW, SGD and clip_grad_norm_ call runs as one program."""
    names = {str(op) for op in SERVED}
    for name in ["aten._foreach_add_.Scalar", "aten._foreach_add_.List", "aten._foreach_lerp_.Scalar",
                 "aten._foreach_mul_.Scalar", "aten._foreach_mul_.Tensor", "aten._foreach_addcmul_.Scalar",
                 "aten._foreach_sqrt.default", "aten._foreach_div_.ScalarList", "aten._foreach_addcdiv_.ScalarList",
                 "aten._foreach_norm.Scalar", "aten._foreach_maximum_.List", "aten._foreach_neg.default"]:
        if name != "aten._foreach_maximum_.List":  # maximum has no in-place op: PyTorch's kernel runs
            assert name in names, name
    assert len(SERVED) >= 120


@pytest.mark.parametrize("op", SERVED, ids=str)
def test_foreach_matches_cpu_in_one_program(op):
    args = make_args(op)
    expected_args = [[t.clone() for t in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor) else a
                     for a in args]
    expected = op(*expected_args)
    tpu_args = on_tpu(args)
    before = torchtpu.stats()["ops"]
    got = op(*tpu_args)
    assert torchtpu.stats()["ops"] - before == 1
    if expected is None:  # in place: the first list holds the result
        expected, got = expected_args[0], tpu_args[0]
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.device.type == "tpu"
        torch.testing.assert_close(a.cpu(), b, equal_nan=True)


def test_numbers_are_runtime_operands():
    """A step size changes every step: new numbers reuse the program."""
    xs = [torch.rand(s) for s in SHAPES]
    txs = [x.to("tpu") for x in xs]
    torch._foreach_add_(txs, [1.0, 2.0, 3.0])
    misses = torchtpu.stats()["cache_misses"]
    for step in range(3):
        scalars = [0.5 * step, -1.5, step + 0.25]
        torch._foreach_mul_(txs, scalars)
        torch._foreach_add_(txs, scalars)
    torch._foreach_add_(xs, [1.0, 2.0, 3.0])
    for step in range(3):
        scalars = [0.5 * step, -1.5, step + 0.25]
        torch._foreach_mul_(xs, scalars)
        torch._foreach_add_(xs, scalars)
    assert torchtpu.stats()["cache_misses"] - misses <= 1  # mul_ compiles once; add_ was compiled before
    for a, b in zip(txs, xs):
        torch.testing.assert_close(a.cpu(), b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64, torch.float64])
def test_dtypes(dtype):
    xs = [(torch.rand(s) * 10).to(dtype) for s in SHAPES]
    ys = [(torch.rand(s) * 10 + 1).to(dtype) for s in SHAPES]
    for fn in [lambda a, b: torch._foreach_add(a, b, alpha=3),
               lambda a, b: torch._foreach_mul(a, 2),
               lambda a, b: torch._foreach_maximum(a, b),
               lambda a, b: torch._foreach_div(a, b),
               lambda a, b: torch._foreach_abs(a)]:
        expected = fn(xs, ys)
        got = fn([x.to("tpu") for x in xs], [y.to("tpu") for y in ys])
        for a, b in zip(got, expected):
            torch.testing.assert_close(a.cpu(), b)



@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_lists_of_complex_numbers(mode):
    """A list with a complex number is one complex128 operand; its real
    numbers keep their own types, as PyTorch's per-tensor op sees them."""
    g = torch.Generator().manual_seed(3)
    cs = [torch.randn(s, dtype=torch.complex64, generator=g) for s in SHAPES]
    rs = [torch.randn(s, generator=g) for s in SHAPES]
    numbers = [1j, 2 + 0.5j, 3]
    calls = [lambda xs: torch._foreach_add(xs, numbers), lambda xs: torch._foreach_mul(xs, numbers),
             lambda xs: torch._foreach_div(xs, numbers), lambda xs: torch._foreach_pow(xs, numbers)]
    with torchtpu.eager_mode(mode):
        for fn, xs in [(fn, xs) for fn in calls for xs in (cs, rs)] + [
                (lambda xs: torch._foreach_addcmul(xs, xs, xs, numbers), cs)]:  # a real addcmul refuses 1j
            for a, b in zip(fn([x.to("tpu") for x in xs]), fn(xs)):
                assert a.dtype == b.dtype
                torch.testing.assert_close(a.cpu(), b)
        ys = [x.to("tpu") for x in cs]
        torch._foreach_mul_(ys, numbers)
        for a, b in zip(ys, torch._foreach_mul(cs, numbers)):
            torch.testing.assert_close(a.cpu(), b)
        with pytest.raises(RuntimeError, match="result type ComplexFloat can't be cast to the desired output type Float"):
            torch._foreach_mul_([x.to("tpu") for x in rs], numbers)


def test_mixed_dtypes_and_broadcasting_in_one_list():
    """Each item promotes and broadcasts on its own, as the per-tensor op does."""
    xs = [torch.rand(3, 4), torch.rand(5).to(torch.bfloat16), torch.arange(6).reshape(2, 3)]
    ys = [torch.rand(4), torch.rand(5), torch.rand(2, 1)]
    expected = torch._foreach_add(xs, ys, alpha=0.5)
    got = torch._foreach_add([x.to("tpu") for x in xs], [y.to("tpu") for y in ys], alpha=0.5)
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a.cpu(), b)


def test_views_and_non_contiguous_items():
    base = torch.rand(6, 8)
    tbase = base.to("tpu")
    xs, txs = [base[:, ::2], base[1:3].t(), base[4]], [tbase[:, ::2], tbase[1:3].t(), tbase[4]]
    ys = [torch.rand(6, 4), torch.rand(8, 2), torch.rand(8)]
    torch._foreach_addcmul_(xs, ys, ys, 0.5)
    torch._foreach_addcmul_(txs, [y.to("tpu") for y in ys], [y.to("tpu") for y in ys], 0.5)
    torch.testing.assert_close(tbase.cpu(), base)


def test_items_that_share_memory_see_earlier_writes():
    """A written tensor that is also another item (or the shared tensor
    argument) is updated as running the items in turn updates it."""
    def run(device):
        a, b = torch.ones(3, device=device), torch.arange(3.0, device=device)
        torch._foreach_add_([a, a, b], [b, b, a])  # a += b twice, then b += the new a
        c = torch.tensor(2.0, device=device)
        torch._foreach_mul_([c, b], c)  # c *= c, then b *= the new c
        v = torch.arange(8.0, device=device)
        torch._foreach_add_([v[:4], v[2:6]], [torch.ones(4, device=device)] * 2)  # overlapping views
        return [a, b, c, v]
    for x, y in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(x.cpu(), y)


# The list checks' messages are PyTorch's own; an item's shape and dtype
# checks are the per-tensor op's meta function's (as for every op on tpu, see
# test_errors.py), which words them differently from CPU's kernels.
@pytest.mark.parametrize("call,words", [
    (lambda xs, ys: torch._foreach_add_(xs, ys[:2]), ["Tensor lists must have the same number of tensors, got 3 and 2"]),
    (lambda xs, ys: torch._foreach_add_([], []), ["Tensor list must have at least one tensor."]),
    (lambda xs, ys: torch._foreach_mul_(xs, [1.0, 2.0]), ["Tensor list must have same number of elements as scalar list."]),
    (lambda xs, ys: torch._foreach_add_(xs, ys[1:] + ys[:1]), ["5", "4"]),
    (lambda xs, ys: torch._foreach_add_([x.long() for x in xs], ys), ["float"]),
    (lambda xs, ys: torch._foreach_mul_([x.long() for x in xs], [1, 2.5, 3]), ["result type float can't be cast"]),
], ids=["lengths", "empty", "scalars", "shapes", "dtype", "scalar_dtype"])
def test_errors_match_pytorch(call, words):
    """Bad lists raise PyTorch's exception; nothing is written."""
    xs = [torch.rand(s) for s in SHAPES]
    ys = [torch.rand(s) for s in SHAPES]
    with pytest.raises(RuntimeError) as cpu_error:
        call(xs, ys)
    for w in words:
        assert w.lower() in str(cpu_error.value).lower()
    txs, tys = [x.to("tpu") for x in xs], [y.to("tpu") for y in ys]
    with pytest.raises(RuntimeError) as tpu_error:
        call(txs, tys)
    for w in words:
        assert w.lower() in str(tpu_error.value).lower()
    for a, b in zip(txs, xs):
        torch.testing.assert_close(a.cpu(), b)
    torch._foreach_add_(txs, 1.0)  # the process goes on
    torch.testing.assert_close(txs[0].cpu(), xs[0] + 1)


def test_device_mismatch():
    xs = [torch.rand(3).to("tpu"), torch.rand(3)]
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch._foreach_add_(xs, 1.0)


def test_autograd_through_foreach():
    xs = [torch.rand(s, requires_grad=True) for s in SHAPES]
    ws = [torch.rand(s, requires_grad=True) for s in SHAPES]
    txs = [x.detach().to("tpu").requires_grad_() for x in xs]
    tws = [w.detach().to("tpu").requires_grad_() for w in ws]
    for a, b in [(xs, ws), (txs, tws)]:
        out = torch._foreach_exp(torch._foreach_mul(a, b))
        sum(o.sum() for o in torch._foreach_add(out, a, alpha=2)).backward()
    for t, c in zip(txs + tws, xs + ws):
        torch.testing.assert_close(t.grad.cpu(), c.grad)


def test_clip_grad_norm_and_foreach_adamw_are_a_few_programs_per_step():
    """A foreach AdamW step and clip_grad_norm_ over 8 parameters: one
    program per foreach call, not one per parameter (about 8 x 12 before)."""
    def train(device):
        torch.manual_seed(0)
        net = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)]).to(device)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.1, foreach=True)
        x = torch.randn(4, 8).to(device)
        programs = []
        for _ in range(3):
            opt.zero_grad()
            net(x).square().mean().backward()
            before = torchtpu.stats()["ops"]
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5, foreach=True)
            opt.step()
            programs.append(torchtpu.stats()["ops"] - before)
        return [p.detach() for p in net.parameters()], programs
    expected, _ = train("cpu")
    got, programs = train("tpu")
    assert not torchtpu.stats()["fallbacks"]
    assert max(programs[1:]) <= 16, programs  # the first step also makes the state
    for a, b in zip(to_cpu(got), expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
