"""Shape rules (csrc/lower/shape.c) and the composite ops built on them,
against PyTorch on CPU: values, in-place and out= variants, gradients."""
import pytest
import torch
import torch.nn.functional as F

from conftest import compare, compare_grad, to_tpu

torch.manual_seed(0)


def t(*shape, dtype=torch.float32):
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-50, 50, shape, dtype=dtype)


def compare_out(fn, *args, dtype=torch.float32):
    """fn(*args, out=...) on tpu matches CPU (out starts empty and is resized)."""
    expected = fn(*args, out=torch.empty(0, dtype=dtype))
    out = torch.empty(0, dtype=dtype, device="tpu")
    fn(*to_tpu(args), out=out)
    torch.testing.assert_close(out.cpu(), expected)


DTYPES = [torch.float32, torch.int64, torch.bool, torch.bfloat16]


# --- cat and the composites on it ------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(no_fallbacks, dtype, dim):
    a, b = t(2, 3, 4, dtype=dtype), t(2, 3, 4, dtype=dtype)
    c = torch.cat([a, b], dim).narrow(dim, 0, 1)
    compare(torch.cat, [a, b, c], dim)
    compare(torch.cat, [a.transpose(0, 2).contiguous().transpose(0, 2), b[:, :, :]], dim)  # non-contiguous
    compare_out(torch.cat, [a, c], dim, dtype=dtype)


def test_cat_mixed_dtypes(no_fallbacks):
    compare(torch.cat, [t(2, 3), t(1, 3, dtype=torch.int64), t(2, 3, dtype=torch.bool)])
    compare(torch.cat, [t(2, 3, dtype=torch.bfloat16), t(2, 3)], 1)
    compare(torch.cat, [t(2, dtype=torch.int64), t(2, dtype=torch.bool)])
    compare_out(torch.cat, [t(2, 3, dtype=torch.int64), t(2, 3)], dtype=torch.float32)


def test_cat_empty(no_fallbacks):
    # PyTorch's legacy rule: 1-D empty tensors are skipped whatever the others' rank
    compare(torch.cat, [torch.zeros(0), t(2, 3), torch.zeros(0)], 1)
    compare(torch.cat, [torch.zeros(0), torch.zeros(0)])
    compare(torch.cat, [t(0, 3), t(2, 3)])
    compare(torch.cat, [t(2, 0), t(2, 0)], 1)
    compare(torch.cat, [torch.zeros(0, dtype=torch.int64), t(3)])


def test_cat_many(no_fallbacks):
    compare(torch.cat, [t(1, 2) for _ in range(150)])


def test_cat_backward(no_fallbacks):
    compare_grad(lambda a, b: torch.cat([a, b, a], 1), t(2, 3).requires_grad_(), t(2, 1).requires_grad_())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_stack_repeat_narrow(no_fallbacks, dtype):
    # composite ops: decompose into cat, copies and views
    a, b = t(2, 3, dtype=dtype), t(2, 3, dtype=dtype)
    compare(torch.stack, [a, b])
    compare(torch.stack, [a, b], -1)
    compare(torch.hstack, [a, b])
    compare(torch.vstack, [a, b])
    compare(lambda x: x.repeat(2, 1, 3), a)
    compare(lambda x: x.narrow(1, 1, 2) + 0, a)
    compare(lambda x: x.repeat_interleave(2, dim=1), a)
    compare(lambda x: x.tile((2,)), a)


def test_stack_backward(no_fallbacks):
    compare_grad(lambda a, b: torch.stack([a, b], 1), t(2, 3).requires_grad_(), t(2, 3).requires_grad_())
    compare_grad(lambda a: a.repeat(2, 3), t(2, 3).requires_grad_())


# --- padding -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_constant_pad(no_fallbacks, dtype):
    x = t(2, 3, 4, dtype=dtype)
    compare(lambda x: F.pad(x, (1, 2)), x)
    compare(lambda x: F.pad(x, (1, 2, 0, 3), value=1), x)
    compare(lambda x: F.pad(x, (-1, 2, 1, -2, 1, 1), value=0), x)  # negative pads crop
    compare(lambda x: torch.constant_pad_nd(x, (2, 2)), x.transpose(1, 2))
    compare(lambda x: torch.constant_pad_nd(x, (1, 1)), t(0, 3, dtype=dtype))


def test_constant_pad_value(no_fallbacks):
    compare(lambda x: F.pad(x, (1, 1), value=2.5), t(3, 2))
    compare(lambda x: F.pad(x, (1, 1), value=float("inf")), t(3, 2))
    compare(lambda x: F.pad(x, (1, 0, 0, 1), value=7), t(3, 2, dtype=torch.int64))
    out = torch.empty(0, device="tpu")
    x = t(2, 2)
    torch.ops.aten.constant_pad_nd.out(x.to("tpu"), [1, 1], 3.0, out=out)
    torch.testing.assert_close(out.cpu(), F.pad(x, (1, 1), value=3.0))


def test_constant_pad_backward(no_fallbacks):
    compare_grad(lambda x: F.pad(x, (1, -1, 2, 0), value=1.0), t(2, 3, 4).requires_grad_())


PADS = {
    1: [(2, 1), (0, 3), (-1, 2), (3, -2)],
    2: [(2, 1, 1, 2), (0, 0, 2, 0), (-1, 2, 1, -1)],
    3: [(1, 2, 0, 1, 2, 0), (0, -1, 1, 1, -1, 1)],
}
CASES = [(mode, n, pad) for mode in ["reflect", "replicate"] for n, pads in PADS.items() for pad in pads]


def padded_input(n, batched, dtype=torch.float32, contiguous=True):
    shape = ((3,) if batched else ()) + (2, 4, 5, 6)[:n + 1]
    if contiguous:
        return t(*shape, dtype=dtype)
    return t(*shape[:-2], shape[-1], shape[-2], dtype=dtype).transpose(-1, -2)


def pad_op(mode, n):
    name = ("reflection" if mode == "reflect" else "replication") + f"_pad{n}d"
    return getattr(torch.ops.aten, name)


@pytest.mark.parametrize("mode,n,pad", CASES)
@pytest.mark.parametrize("batched", [False, True])
def test_pad_modes(no_fallbacks, mode, n, pad, batched):
    x = padded_input(n, batched)
    op = pad_op(mode, n)
    compare(lambda x: op(x, pad), x)
    compare(lambda x: op(x, pad), padded_input(n, batched, contiguous=False))
    compare_grad(lambda x: op(x, pad), x.requires_grad_())


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int64])
def test_pad_modes_dtypes(no_fallbacks, mode, dtype):
    x = padded_input(2, True, dtype=dtype)
    compare(lambda x: F.pad(x, (2, 1, 1, 3), mode=mode), x)
    if dtype.is_floating_point:
        compare_grad(lambda x: F.pad(x, (2, 1, 1, 3), mode=mode), x.requires_grad_(), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_modes_out(no_fallbacks, mode):
    x, pad = padded_input(1, True), [2, 1]
    op = pad_op(mode, 1)
    out = torch.empty(0, device="tpu")
    op.out(x.to("tpu"), pad, out=out)
    torch.testing.assert_close(out.cpu(), op(x, pad))
    g = t(*op(x, pad).shape)
    back = getattr(torch.ops.aten, op.__name__.split(".")[-1] + "_backward")
    grad_input = torch.empty(0, device="tpu")
    back.grad_input(g.to("tpu"), x.to("tpu"), pad, grad_input=grad_input)
    torch.testing.assert_close(grad_input.cpu(), back(g, x, pad))


def test_pad_size_error(no_fallbacks):
    x = t(1, 2, 3)
    with pytest.raises(RuntimeError):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(RuntimeError):
        F.pad(x.to("tpu"), (3, 0), mode="reflect")


# --- flip, roll, tril/triu -------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_flip(no_fallbacks, dtype):
    x = t(2, 3, 4, dtype=dtype)
    compare(torch.flip, x, [0])
    compare(torch.flip, x, [-1, 1])
    compare(torch.flip, x.transpose(0, 2), [0, 2])
    compare(torch.flip, x, [])
    compare(torch.flip, t(0, 3, dtype=dtype), [0, 1])
    compare(torch.flip, torch.tensor(3, dtype=dtype), [])
    compare(torch.fliplr, x)
    compare_out(torch.ops.aten.flip.out, x, [1], dtype=dtype)


def test_flip_backward(no_fallbacks):
    compare_grad(lambda x: x.flip(0, 1), t(2, 3).requires_grad_())


@pytest.mark.parametrize("dtype", DTYPES)
def test_roll(no_fallbacks, dtype):
    x = t(3, 4, 5, dtype=dtype)
    compare(torch.roll, x, 1, 0)
    compare(torch.roll, x, (-2, 7), (2, -2))
    compare(torch.roll, x, 13)  # flattened
    compare(torch.roll, x.transpose(0, 2), -3)
    compare(torch.roll, x, 0, 1)
    compare(torch.roll, t(0, 3, dtype=dtype), 2, 0)
    compare_out(torch.ops.aten.roll.out, x, [2], [1], dtype=dtype)


def test_roll_backward(no_fallbacks):
    compare_grad(lambda x: x.roll((1, -1), (0, 1)), t(3, 4).requires_grad_())


@pytest.mark.parametrize("fn", [torch.tril, torch.triu])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("diagonal", [0, 2, -1, -5])
def test_tril_triu(no_fallbacks, fn, dtype, diagonal):
    compare(fn, t(4, 5, dtype=dtype), diagonal)
    compare(fn, t(2, 5, 3, dtype=dtype), diagonal)  # batched, non-square
    compare(fn, t(5, 4, dtype=dtype).t(), diagonal)
    compare(fn, t(0, 3, dtype=dtype), diagonal)
    compare_out(fn, t(3, 3, dtype=dtype), diagonal, dtype=dtype)
    in_place = getattr(torch.Tensor, fn.__name__ + "_")
    compare(lambda x: in_place(x.clone(), diagonal), t(3, 4, dtype=dtype))

    def on_view(x):
        y = x.clone()
        in_place(y[:, 1:], diagonal)
        return y
    compare(on_view, t(3, 5, dtype=dtype))


def test_tril_triu_backward(no_fallbacks):
    compare_grad(lambda x: x.tril(1), t(3, 4).requires_grad_())
    compare_grad(lambda x: x.triu(-1), t(2, 3, 4).requires_grad_())


def test_tril_error(no_fallbacks):
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.zeros(3, device="tpu").tril_()


# --- range factories --------------------------------------------------------------------

def on_both(fn, **tol):
    """fn(device) on tpu matches fn on CPU."""
    expected = fn("cpu")
    got = fn("tpu")
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), expected, **tol)


@pytest.mark.parametrize("args,kwargs", [
    ((5,), {}),
    ((2, 9, 3), {}),
    ((10, -3, -2), {}),
    ((0.5, 3.0, 0.3), {}),
    ((-1.0, 1.0, 0.25), {"dtype": torch.bfloat16}),
    ((0, 5), {"dtype": torch.float64}),
    ((0, 5, 1.5), {"dtype": torch.int64}),
    ((3,), {"dtype": torch.int32}),
    ((0,), {}),
    ((1e6, 1e6 + 5),  {}),
])
def test_arange(no_fallbacks, args, kwargs):
    on_both(lambda d: torch.arange(*args, device=d, **kwargs))


def test_arange_out(no_fallbacks):
    on_both(lambda d: torch.arange(1, 4, out=torch.empty(3, device=d)))
    on_both(lambda d: torch.arange(0.0, 1.0, 0.25, out=torch.empty(0, device=d)))


@pytest.mark.parametrize("start,end,steps", [(0, 1, 5), (-2.5, 7, 11), (3, -3, 1), (0, 1, 0), (1, 2, 2), (0, 100, 7),
                                             (-15, 33, 40), (0, 3, 300)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float64, torch.bfloat16])
def test_linspace_logspace(no_fallbacks, start, end, steps, dtype):
    on_both(lambda d: torch.linspace(start, end, steps, dtype=dtype, device=d))
    if dtype.is_floating_point:
        # CPU's vectorized bfloat16 logspace rounds its exponents to bfloat16
        # (errors of ~2%, varying with the machine's vector width); tpu
        # computes the exponent in float32 and rounds once
        tol = dict(rtol=0.03, atol=1e-5) if dtype == torch.bfloat16 else {}
        on_both(lambda d: torch.logspace(start / 10, end / 10, steps, dtype=dtype, device=d), **tol)
        on_both(lambda d: torch.logspace(start / 10, end / 10, steps, base=2, dtype=dtype, device=d), **tol)
    else:
        on_both(lambda d: torch.logspace(0, 3, steps, base=3, dtype=dtype, device=d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_eye(no_fallbacks, dtype):
    on_both(lambda d: torch.eye(3, dtype=dtype, device=d))
    on_both(lambda d: torch.eye(2, 4, dtype=dtype, device=d))
    on_both(lambda d: torch.eye(4, 0, dtype=dtype, device=d))
    on_both(lambda d: torch.eye(2, 3, dtype=dtype, out=torch.empty(0, dtype=dtype, device=d)))


# --- repeat_interleave with a repeats tensor (size read back once) -----------------------

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_repeat_interleave_tensor(no_fallbacks, dtype):
    compare(torch.repeat_interleave, torch.tensor([0, 3, 0, 2, 1], dtype=dtype))
    compare(torch.repeat_interleave, torch.tensor([], dtype=dtype))
    compare(torch.repeat_interleave, torch.tensor([0, 0], dtype=dtype))
    compare(lambda r: torch.repeat_interleave(r, output_size=6), torch.tensor([0, 3, 0, 2, 1], dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
def test_repeat_interleave_self_tensor(no_fallbacks, dtype):
    x = t(2, 3, 4, dtype=dtype)
    compare(lambda x, r: torch.repeat_interleave(x, r, dim=1), x, torch.tensor([0, 1, 2]))
    compare(lambda x, r: torch.repeat_interleave(x, r, dim=-1, output_size=5), x, torch.tensor([2, 0, 0, 3]))
    compare(lambda x, r: x.repeat_interleave(r), x, torch.tensor([2]))  # one count broadcast over the flat input
    compare_grad(lambda x, r: torch.repeat_interleave(x, r, dim=0), t(3, 2).requires_grad_(), torch.tensor([2, 0, 1]))


def test_repeat_interleave_tensor_errors(no_fallbacks):
    for repeats, kwargs in [(torch.tensor([1, -2]), {}), (torch.tensor([[1, 2]]), {}), (torch.tensor([1.0, 2.0]), {}),
                            (torch.tensor([1, 2]), {"output_size": 5})]:
        with pytest.raises(Exception) as cpu:
            torch.repeat_interleave(repeats, **kwargs)
        with pytest.raises(Exception) as tpu:
            torch.repeat_interleave(repeats.to("tpu"), **kwargs)
        assert type(tpu.value) is type(cpu.value) and str(tpu.value) == str(cpu.value)


# --- high ranks ------------------------------------------------------------------------


def high_rank(rank):
    """A CPU tensor of |rank| dims: fifteen 2s spread among 1s (2^15 elements)."""
    shape = [1] * rank
    for i in range(min(rank, 15)):
        shape[i * rank // min(rank, 15)] = 2
    return torch.randn(shape, generator=torch.Generator().manual_seed(rank))


HIGH_RANK_OPS = {
    "add": lambda x: x + 1,
    "mul": lambda x: x * x,
    "exp": torch.exp,
    "where": lambda x: torch.where(x > 0, x, -x),
    "broadcast": lambda x: x - x.sum(0, keepdim=True),
    "to_half": lambda x: x.half(),
    "to_long": lambda x: (x * 10).long(),
    "add_": lambda x: x.clone().add_(x),
    "permute": lambda x: x.permute(*reversed(range(x.dim()))).contiguous(),
    "transpose": lambda x: x.transpose(0, -1) * 2,
    "flip": lambda x: x.flip(0, -1),
    "roll": lambda x: x.roll(1, 0),
    "reshape": lambda x: x.reshape(-1, 2) * 1,
    "view": lambda x: x.flatten().view(x.shape) + 1,
    "expand": lambda x: x.sum(0, keepdim=True).expand(x.shape).contiguous(),
    "slice": lambda x: x[1:] + 0,
    "strided": lambda x: x[..., ::2] + 0,
    "select": lambda x: x.select(-1, 0) + 0,
    "squeeze": lambda x: x.squeeze() + 0,
    "cat": lambda x: torch.cat([x, x], 0),
    "copy_into_view": lambda x: torch.zeros_like(x).transpose(0, -1).copy_(x.transpose(0, -1)),
    "setitem": lambda x: x.clone().index_fill_(0, torch.tensor([0], device=x.device), 5.0),
    "masked_fill": lambda x: x.masked_fill(x > 0, 0.0),
    "gather": lambda x: x.gather(0, torch.zeros_like(x, dtype=torch.long)),
    "sort": lambda x: x.sort(-1)[0],
    "pad": lambda x: F.pad(x, (1, 1)),
    "nonzero": lambda x: (x > 1).nonzero(),
    "masked_select": lambda x: x[x > 1],
}


@pytest.mark.parametrize("rank", [17, 64])
@pytest.mark.parametrize("name", sorted(HIGH_RANK_OPS))
def test_high_rank_ops(no_fallbacks, name, rank):
    """Up to PyTorch's 64 dims; tpu refused more than 16."""
    compare(HIGH_RANK_OPS[name], high_rank(rank))


@pytest.mark.parametrize("rank", [17, 33, 64])
def test_high_rank_copies(no_fallbacks, rank):
    x = high_rank(rank)
    assert torch.equal(x.to("tpu").cpu(), x)
    assert torch.equal(x.transpose(0, -1).to("tpu").cpu(), x.transpose(0, -1))  # a non-contiguous source
    t = torch.empty(x.transpose(0, -1).shape, device="tpu")
    t.copy_(x.transpose(0, -1).to("tpu"))
    assert torch.equal(t.cpu(), x.transpose(0, -1))


def test_more_dims_than_64_is_an_error(no_fallbacks):
    """PyTorch's reductions take 64 dims at most; tpu takes no more anywhere,
    and says so (a 17-dim upload wrote past a 16-entry array before)."""
    message = "tpu supports tensors of at most 64 dimensions, got 65"
    with pytest.raises(RuntimeError, match=message):
        torch.zeros([1] * 65).to("tpu")
    t = torch.empty([1] * 65, device="tpu")
    with pytest.raises(RuntimeError, match=message):
        t.fill_(1.0)
    with pytest.raises(RuntimeError, match=message):
        torch.zeros([1] * 64, device="tpu").unsqueeze(0) + 1
