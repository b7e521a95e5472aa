"""Gathers and scatters (csrc/lower/index.c) against PyTorch on CPU: values,
in-place and out= variants, views, index checks and gradients."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu

from conftest import compare, compare_grad, to_tpu

torch.manual_seed(0)


def raises_like(fn, *args):
    """fn raises on tpu what it raises on CPU (the exact exception type)."""
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(Exception) as tpu:
        fn(*to_tpu(args))
    assert type(tpu.value) is type(cpu.value), (tpu.value, cpu.value)
    return tpu.value


def t(*shape, dtype=torch.float32):
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-50, 50, shape, dtype=dtype)


DTYPES = [torch.float32, torch.int64, torch.bool, torch.bfloat16]


# --- index_select ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(no_fallbacks, dtype, dim):
    x = t(3, 4, 5, dtype=dtype)
    idx = torch.tensor([2, 0, 2, 1])
    compare(torch.index_select, x, dim, idx)
    compare(torch.index_select, x, dim, idx.int())


def test_index_select_shapes(no_fallbacks):
    x = t(4, 5)
    compare(torch.index_select, x.t(), 0, torch.tensor([4, 1]))  # non-contiguous
    compare(torch.index_select, x[:, ::2], 1, torch.tensor([2, 0]))
    compare(torch.index_select, x, 0, torch.tensor([], dtype=torch.long))  # empty index
    compare(torch.index_select, torch.zeros(0, 3), 1, torch.tensor([2, 0]))  # empty self
    compare(torch.index_select, torch.tensor(3.5), 0, torch.tensor([0]))  # 0-dim self
    compare(torch.index_select, x, 1, torch.tensor(3))  # 0-dim index


def test_index_select_out(no_fallbacks):
    x, idx = t(3, 4), torch.tensor([1, 1, 0])
    out = torch.empty(0, device="tpu")
    torch.index_select(x.to("tpu"), 1, idx.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.index_select(x, 1, idx))


def test_index_select_out_of_range(no_fallbacks):
    # CPU raises IndexError except in its fast path for dim > 0 of contiguous
    # inputs (a RuntimeError, "INDICES element is out of DATA bounds"); tpu
    # always raises the IndexError.
    x = t(3, 4)
    err = raises_like(torch.index_select, x, 0, torch.tensor([0, 3]))
    assert "index out of range in self" in str(err)
    raises_like(torch.index_select, x, 0, torch.tensor([-1]))  # no wrapping
    raises_like(torch.index_select, x.t(), 0, torch.tensor([4]))
    raises_like(torch.index_select, torch.zeros(0, 3), 0, torch.tensor([0]))
    raises_like(torch.index_select, torch.zeros(0), 0, torch.tensor([0]))


def test_index_select_backward(no_fallbacks):
    compare_grad(lambda x, i: x.index_select(1, i), t(3, 4).requires_grad_(), torch.tensor([3, 0, 3]))


# --- gather -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(no_fallbacks, dtype, dim):
    x = t(3, 4, 5, dtype=dtype)
    size = x.shape[dim]
    idx = torch.randint(0, size, (2, 3, 4))  # smaller than self in every dim
    compare(torch.gather, x, dim, idx)
    compare(torch.gather, x, dim, idx.int())


def test_gather_shapes(no_fallbacks):
    x = t(4, 5)
    compare(torch.gather, x.t(), 1, torch.tensor([[3, 0], [1, 1]]))
    compare(torch.gather, x, 0, torch.zeros(0, 5, dtype=torch.long))
    compare(torch.gather, torch.tensor(2.0), 0, torch.tensor(0))
    out = torch.empty(0, device="tpu")
    idx = torch.tensor([[4], [0]])
    torch.gather(x.to("tpu"), 1, idx.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.gather(x, 1, idx))


def test_gather_out_of_range(no_fallbacks):
    x = t(3, 4)
    err = raises_like(torch.gather, x, 1, torch.tensor([[0, 4]]))
    assert "out of bounds" in str(err)
    raises_like(torch.gather, x, 0, torch.tensor([[-1]]))


def test_gather_backward(no_fallbacks):
    compare_grad(lambda x, i: x.gather(1, i), t(3, 4).requires_grad_(), torch.tensor([[0, 0, 3], [1, 2, 1], [3, 3, 3]]))
    compare_grad(lambda x, i: torch.take_along_dim(x, i, 0), t(3, 4).requires_grad_(), torch.tensor([[0, 2, 1, 1]]))


# --- take -------------------------------------------------------------------------

def test_take(no_fallbacks):
    x = t(3, 4)
    compare(torch.take, x, torch.tensor([[0, -1], [11, -12]]))
    compare(torch.take, x.t(), torch.tensor([1, 5]))
    compare(torch.take, x, torch.tensor(7))
    compare(torch.take, x, torch.tensor([], dtype=torch.long))
    compare(torch.take, t(3, 4, dtype=torch.int64), torch.tensor([3, 3]))


def test_take_out_of_range(no_fallbacks):
    raises_like(torch.take, t(3, 4), torch.tensor([12]))
    raises_like(torch.take, t(3, 4), torch.tensor([-13]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_put(no_fallbacks, dtype):
    x, src = t(3, 4, dtype=dtype), t(2, 2, dtype=dtype)
    idx = torch.tensor([[0, -1], [11, -7]])
    compare(torch.put, x, idx, src)
    compare(lambda x, i, s: x.clone().put_(i, s), x, idx, src)
    compare(lambda x, i, s: x.t().clone().put_(i, s), x, idx, src)
    dup = torch.tensor([[5, 5], [-7, 0]])  # duplicates accumulate
    tol = dict(rtol=0.02, atol=0.02) if dtype == torch.bfloat16 else {}
    compare(lambda x, i, s: torch.put(x, i, s, accumulate=True), x, dup, src, **tol)


def test_put_shapes(no_fallbacks):
    compare(lambda x, i, s: torch.put(x, i, s, accumulate=True), torch.tensor(1.0), torch.tensor([0, -1]),
            torch.tensor([2.0, 3.0]))
    compare(torch.put, t(3, 4), torch.tensor([], dtype=torch.long), t(0))

    def on_view(x, i, s):
        y = x.clone()
        y[1:, ::2].put_(i, s)
        return y
    compare(on_view, t(3, 4), torch.tensor([3, 0]), t(2))


def test_put_errors(no_fallbacks):
    x = t(3, 4).to("tpu")
    before = x.cpu()
    raises_like(lambda x, i, s: x.put_(i, s), x.cpu(), torch.tensor([12]), t(1))
    raises_like(lambda x, i, s: x.put_(i, s), x.cpu(), torch.tensor([-13]), t(1))
    raises_like(lambda x, i, s: x.put_(i, s), x.cpu(), torch.tensor([0, 1]), t(3))
    raises_like(lambda x, i, s: x.put_(i, s), x.cpu(), torch.tensor([0]), t(1, dtype=torch.int64))
    raises_like(lambda x, i, s: x.put_(i, s), x.cpu(), torch.tensor([0], dtype=torch.int32), t(1))
    torch.testing.assert_close(x.cpu(), before)


def test_put_take_backward(no_fallbacks):
    idx = torch.tensor([[0, 5], [5, -1]])
    compare_grad(lambda x, i, s: torch.put(x, i, s, accumulate=True),
                 t(3, 4).requires_grad_(), idx, t(2, 2).requires_grad_())
    compare_grad(lambda x, i: torch.take(x, i), t(3, 4).requires_grad_(), idx)


# --- scatter family -------------------------------------------------------------

def unique_index(shape, size, dim):
    """An index of |shape| with distinct values along |dim| (no write races)."""
    return torch.rand(*shape[:dim], size, *shape[dim + 1:]).argsort(dim).narrow(dim, 0, shape[dim])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter(no_fallbacks, dtype, dim):
    x = t(4, 5, 6, dtype=dtype)
    d = dim % 3
    shape = [3, 4, 5]
    idx = unique_index(shape, x.shape[d], d)
    src = t(4, 5, 6, dtype=dtype)  # larger than index: its leading corner is used
    compare(torch.scatter, x, dim, idx, src)
    compare(torch.scatter, x, dim, idx.int(), src)
    compare(lambda x, i: torch.scatter(x, dim, i, 1), x, idx)
    compare(lambda x, i, s: x.clone().scatter_(dim, i, s), x, idx, src)


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_legacy_reduce(no_fallbacks, reduce):
    x, idx = t(3, 4), torch.tensor([[0, 1, 2, 0], [0, 0, 0, 0]])
    src = t(2, 4)
    compare(lambda x, i, s: torch.scatter(x, 0, i, s, reduce=reduce), x, idx, src)
    compare(lambda x, i: torch.scatter(x, 0, i, 1.5, reduce=reduce), x, idx)
    compare(lambda x, i, s: x.clone().scatter_(0, i, s, reduce=reduce), x, idx, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_scatter_add(no_fallbacks, dtype):
    x, src = t(3, 5, dtype=dtype), t(4, 5, dtype=dtype)
    idx = torch.tensor([[0, 1, 2, 0, 0], [0, 0, 0, 0, 0], [2, 2, 1, 1, 0], [1, 1, 1, 1, 1]])  # duplicates
    compare(torch.scatter_add, x, 0, idx, src)
    compare(lambda x, i, s: x.clone().scatter_add_(-2, i, s), x, idx, src)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.scatter_add(x.to("tpu"), 0, idx.to("tpu"), src.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.scatter_add(x, 0, idx, src))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce(no_fallbacks, reduce, include_self, dtype):
    x = t(4, 5, dtype=dtype)
    src = t(3, 5, dtype=dtype) if dtype.is_floating_point else torch.randint(-5, 6, (3, 5))
    idx = torch.tensor([[0, 1, 3, 0, 0], [0, 0, 3, 0, 1], [2, 2, 3, 1, 0]])  # row 3 untouched in some columns
    fn = lambda x, i, s: torch.scatter_reduce(x, 0, i, s, reduce, include_self=include_self)
    compare(fn, x, idx, src)
    compare(lambda x, i, s: x.clone().scatter_reduce_(0, i, s, reduce, include_self=include_self), x, idx, src)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.scatter_reduce(x.to("tpu"), 0, idx.to("tpu"), src.to("tpu"), reduce, include_self=include_self, out=out)
    torch.testing.assert_close(out.cpu(), fn(x, idx, src))


def test_scatter_reduce_nan(no_fallbacks):
    x = torch.tensor([1.0, float("nan"), 3.0, 4.0])
    src = torch.tensor([float("nan"), 5.0, 0.0])
    idx = torch.tensor([0, 1, 3])
    for reduce in ["amax", "amin"]:
        compare(lambda x, i, s: torch.scatter_reduce(x, 0, i, s, reduce), x, idx, src)


def test_scatter_on_view(no_fallbacks):
    def fn(x, i, s):
        y = x.clone()
        y[:, 1:].scatter_(1, i, s)
        y.t()[1:].scatter_add_(0, i, s)
        return y
    compare(fn, t(3, 5), torch.tensor([[0, 3], [1, 2], [3, 0]]), t(3, 2))


def test_scatter_out_of_range(no_fallbacks):
    x = t(3, 4).to("tpu")
    before = x.cpu()
    err = raises_like(lambda x, i, s: x.scatter_(0, i, s), x.cpu(), torch.tensor([[0, 3]]), t(1, 2))
    assert "out of bounds" in str(err)
    with pytest.raises(RuntimeError):
        x.scatter_add_(1, torch.tensor([[0, 4]], device="tpu"), torch.ones(1, 2, device="tpu"))
    with pytest.raises(RuntimeError):
        x.scatter_reduce_(1, torch.tensor([[-1]], device="tpu"), torch.ones(1, 1, device="tpu"), "amax")
    torch.testing.assert_close(x.cpu(), before)  # failed writes are dropped


def test_scatter_backward(no_fallbacks):
    compare_grad(lambda x, i, s: x.scatter(1, i, s),
                 t(2, 4).requires_grad_(), torch.tensor([[0, 1, 2], [2, 0, 1]]), t(2, 3).requires_grad_())
    compare_grad(lambda x, i, s: x.scatter_add(1, i, s),
                 t(2, 4).requires_grad_(), torch.tensor([[0, 0, 1], [3, 3, 3]]), t(2, 3).requires_grad_())


# --- index_add / index_copy / index_fill ----------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, -1])
def test_index_add(no_fallbacks, dtype, dim):
    x = t(4, 4, dtype=dtype)
    idx = torch.tensor([0, 3, 0, 0, 1])  # duplicates accumulate
    src = t(5, 4, dtype=dtype) if dim == 0 else t(4, 5, dtype=dtype)
    # CPU accumulates bfloat16 in bfloat16, one rounding per add; tpu rounds once
    tol = dict(rtol=0.05, atol=0.05) if dtype == torch.bfloat16 else {}
    compare(torch.index_add, x, dim, idx, src, **tol)
    compare(lambda x, i, s: torch.index_add(x, dim, i, s, alpha=3), x, idx.int(), src, **tol)
    compare(lambda x, i, s: x.clone().index_add_(dim, i, s, alpha=2), x, idx, src, **tol)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.index_add(x.to("tpu"), dim, idx.to("tpu"), src.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.index_add(x, dim, idx, src), **tol)


def test_index_add_shapes(no_fallbacks):
    compare(torch.index_add, t(3, 4), 0, torch.tensor([], dtype=torch.long), t(0, 4))
    compare(torch.index_add, torch.tensor(1.0), 0, torch.tensor([0]), torch.tensor(2.0))
    compare(torch.index_add, t(4, 3).t(), 1, torch.tensor([1, 1]), t(3, 2))
    compare(torch.index_add, t(3, dtype=torch.bool), 0, torch.tensor([1]), torch.tensor([True]))


def test_index_add_on_view(no_fallbacks):
    def fn(x, i, s):
        y = x.clone()
        y[:, 1:].index_add_(0, i, s)
        return y
    compare(fn, t(3, 5), torch.tensor([2, 2, 0]), t(3, 4))


def test_index_add_out_of_range(no_fallbacks):
    x = t(3, 4).to("tpu")
    other = t(2).to("tpu")
    before, other_before = x.cpu(), other.cpu()
    raises_like(lambda x, i, s: x.index_add_(0, i, s), x.cpu(), torch.tensor([3]), t(1, 4))
    raises_like(lambda x, i, s: x.index_add_(0, i, s), x.cpu(), torch.tensor([-1]), t(1, 4))
    with pytest.raises(RuntimeError):
        x.index_add_(0, torch.tensor([3], device="tpu"), torch.ones(1, 4, device="tpu"))
    torch.testing.assert_close(x.cpu(), before)
    torch.testing.assert_close(other.cpu(), other_before)


def test_index_add_shape_error(no_fallbacks):
    raises_like(lambda x, i, s: x.index_add_(0, i, s), t(3, 4), torch.tensor([0, 1]), t(3, 4))


def test_index_add_backward(no_fallbacks):
    compare_grad(lambda x, i, s: x.index_add(0, i, s, alpha=2),
                 t(3, 4).requires_grad_(), torch.tensor([1, 1, 0]), t(3, 4).requires_grad_())


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_copy(no_fallbacks, dtype):
    x, src = t(4, 5, dtype=dtype), t(4, 2, dtype=dtype)
    idx = torch.tensor([4, 1])
    compare(torch.index_copy, x, 1, idx, src)
    compare(lambda x, i, s: x.clone().index_copy_(-1, i, s), x, idx, src)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.index_copy(x.to("tpu"), 1, idx.to("tpu"), src.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.index_copy(x, 1, idx, src))


def test_index_copy_out_of_range(no_fallbacks):
    x = t(3, 4).to("tpu")
    before = x.cpu()
    raises_like(lambda x, i, s: x.index_copy_(0, i, s), x.cpu(), torch.tensor([3]), t(1, 4))
    with pytest.raises(IndexError):
        x.index_copy_(0, torch.tensor([3], device="tpu"), torch.ones(1, 4, device="tpu"))
    torch.testing.assert_close(x.cpu(), before)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_index_reduce(no_fallbacks, reduce, include_self, dtype):
    x = t(4, 5, dtype=dtype)
    src = t(4, 3, dtype=dtype) if dtype.is_floating_point else torch.randint(-5, 6, (4, 3))
    idx = torch.tensor([4, 0, 4])  # duplicates; columns 1-3 untouched
    tol = dict(rtol=0.02, atol=0.02) if dtype == torch.bfloat16 else {}
    fn = lambda x, i, s: torch.index_reduce(x, -1, i, s, reduce, include_self=include_self)
    compare(fn, x, idx, src, **tol)
    compare(lambda x, i, s: x.clone().index_reduce_(1, i, s, reduce, include_self=include_self), x, idx, src, **tol)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.index_reduce(x.to("tpu"), 1, idx.to("tpu"), src.to("tpu"), reduce, include_self=include_self, out=out)
    torch.testing.assert_close(out.cpu(), fn(x, idx, src), **tol)


def test_index_reduce_edges(no_fallbacks):
    nan = float("nan")
    compare(lambda x, i, s: x.index_reduce(0, i, s, "amax"), torch.tensor([1.0, nan, 3.0]), torch.tensor([0, 2]),
            torch.tensor([nan, 5.0]))
    compare(lambda x, i, s: x.index_reduce(0, i, s, "mean"), torch.tensor(2.0), torch.tensor([0]), torch.tensor(5.0))
    compare(lambda x, i, s: x.index_reduce(0, i, s, "prod"), t(3, 2), torch.tensor([], dtype=torch.long), t(0, 2))


def test_index_reduce_errors(no_fallbacks):
    x = t(3, 4).to("tpu")
    before = x.cpu()
    raises_like(lambda x, i, s: x.index_reduce_(0, i, s, "amax"), x.cpu(), torch.tensor([3]), t(1, 4))
    raises_like(lambda x, i, s: x.index_reduce_(0, i, s, "amin"), x.cpu(), torch.tensor([-1]), t(1, 4))
    raises_like(lambda x, i, s: x.index_reduce_(0, i, s, "sum"), x.cpu(), torch.tensor([0]), t(1, 4))
    with pytest.raises(IndexError):
        x.index_reduce_(0, torch.tensor([3], device="tpu"), torch.ones(1, 4, device="tpu"), "prod")
    torch.testing.assert_close(x.cpu(), before)


def test_index_reduce_backward(no_fallbacks):
    idx = torch.tensor([1, 0, 1])
    compare_grad(lambda x, i, s: x.index_reduce(0, i, s, "prod"), t(3, 4).requires_grad_(), idx,
                 t(3, 4).requires_grad_())
    compare_grad(lambda x, i, s: x.index_reduce(0, i, s, "mean", include_self=False),
                 t(3, 4).requires_grad_(), idx, t(3, 4).requires_grad_())


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_fill(no_fallbacks, dtype):
    x = t(4, 5, dtype=dtype)
    idx = torch.tensor([0, -1, 3])  # negative indices wrap here
    compare(lambda x, i: x.index_fill(1, i, 1), x, idx)
    compare(lambda x, i: x.clone().index_fill_(-2, i, 0), x, idx)
    compare(lambda x, i, v: x.index_fill(1, i, v), x, idx, torch.tensor(1, dtype=dtype))
    compare(lambda x, i, v: x.clone().index_fill_(0, i, v), x, idx, torch.tensor(0, dtype=dtype))


def test_index_fill_shapes(no_fallbacks):
    compare(lambda x, i: x.index_fill(0, i, 2.0), torch.tensor(1.0), torch.tensor([0]))
    compare(lambda x, i: x.index_fill(0, i, 2.0), t(3, 2), torch.tensor([], dtype=torch.long))
    compare(lambda x, i: x.index_fill(1, i, 2.0), t(3, 4).t(), torch.tensor(2))

    def on_view(x, i):
        y = x.clone()
        y[1:].index_fill_(1, i, -7.0)
        return y
    compare(on_view, t(3, 4), torch.tensor([1, 2]))


def test_index_fill_out_of_range(no_fallbacks):
    raises_like(lambda x, i: x.index_fill(0, i, 1.0), t(3, 4), torch.tensor([3]))
    raises_like(lambda x, i: x.index_fill(0, i, 1.0), t(3, 4), torch.tensor([-4]))


def test_index_fill_backward(no_fallbacks):
    compare_grad(lambda x, i: x.index_fill(1, i, 3.0), t(3, 4).requires_grad_(), torch.tensor([0, 2]))


# --- advanced indexing: index.Tensor ---------------------------------------------------

INDEX_CASES = [
    lambda x, i, j: x[i],
    lambda x, i, j: x[:, i],
    lambda x, i, j: x[..., i],
    lambda x, i, j: x[i, j],  # adjacent: broadcast dims in place
    lambda x, i, j: x[:, i, j],
    lambda x, i, j: x[i, :, j],  # separated: broadcast dims first
    lambda x, i, j: x[i, 1:, j[:1]],
    lambda x, i, j: x[:, :, i],
    lambda x, i, j: x[i, None, j],
    lambda x, i, j: x[1, i],
    lambda x, i, j: x[i[0, 0]],  # 0-dim index
    lambda x, i, j: x[i, j, i],
]


@pytest.mark.parametrize("case", range(len(INDEX_CASES)))
def test_index(no_fallbacks, case):
    fn = INDEX_CASES[case]
    x = t(4, 5, 6)
    i = torch.tensor([[0, -1, 2], [3, 3, -4]])
    j = torch.tensor([1, 0, -2])
    compare(fn, x, i, j)
    compare(fn, x, i.int(), j.int())
    compare(fn, x.transpose(0, 2).contiguous().transpose(0, 2), i, j)


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_dtypes(no_fallbacks, dtype):
    x = t(4, 5, dtype=dtype)
    compare(lambda x, i: x[i, 1:], x.t(), torch.tensor([4, 0, 0]))


def test_index_shapes(no_fallbacks):
    compare(lambda x, i: x[i], t(3, 2), torch.tensor([], dtype=torch.long))
    compare(lambda x, i: x[:, i], torch.zeros(0, 3), torch.tensor([2, 0]))
    compare(lambda x, i: torch.ops.aten.index.Tensor(x, [None, i]), t(3, 4), torch.tensor([[1], [3]]))
    out = torch.empty(0, device="tpu")
    x, i = t(3, 4), torch.tensor([2, 0])
    torch.ops.aten.index.Tensor_out(x.to("tpu"), [i.to("tpu")], out=out)
    torch.testing.assert_close(out.cpu(), x[i])


def test_index_errors(no_fallbacks):
    x = t(3, 4)
    err = raises_like(lambda x, i: x[i], x, torch.tensor([3]))
    assert "out of bounds" in str(err)
    raises_like(lambda x, i: x[:, i], x, torch.tensor([-5]))


@pytest.mark.parametrize("indices", [
    [torch.tensor([0, 1]), torch.tensor([0, 1, 2])],  # do not broadcast
    [torch.tensor([0])] * 3,  # too many
    [torch.tensor([0.0])],  # not integers
])
@pytest.mark.xfail(reason="PyTorch's meta function for index.Tensor raises RuntimeError where CPU raises IndexError",
                   strict=True, raises=AssertionError)
def test_index_shape_errors(no_fallbacks, indices):
    raises_like(lambda x, i: torch.ops.aten.index.Tensor(x, i), t(3, 4), indices)


def test_index_boolean_mask(no_fallbacks):
    x = t(3, 4)
    compare(lambda x, m: x[m], x, x > 0)
    compare(lambda x, m: x[:, m], x, torch.tensor([True, False, True, True]))


def test_index_backward(no_fallbacks):
    i = torch.tensor([[0, 2], [2, 2]])  # repeated indices accumulate their gradients
    compare_grad(lambda x, i: x[i], t(3, 4).requires_grad_(), i)
    compare_grad(lambda x, i: x[:, i, 1], t(2, 3, 4).requires_grad_(), i)
    compare_grad(lambda x, i: x[i, :, i], t(3, 2, 4).requires_grad_(), i)


# --- index_put -------------------------------------------------------------------------

def put(indices, accumulate=False):
    """x.index_put(indices, v) with the indices moved to x's device."""
    return lambda x, v: torch.ops.aten.index_put(x, [None if i is None else i.to(x.device) for i in indices], v,
                                                 accumulate)


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_put(no_fallbacks, dtype):
    x = t(4, 5, dtype=dtype)
    i, j = torch.tensor([0, 3, 2]), torch.tensor([[1], [4]])
    compare(put([i]), x, t(3, 5, dtype=dtype))
    compare(put([i]), x, t(5, dtype=dtype))  # values broadcast
    compare(put([None, i]), x, t(4, 1, dtype=dtype))
    compare(put([i.int(), j]), x, t(2, 3, dtype=dtype))
    compare(put([i, None]), x, torch.tensor(1, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_index_put_accumulate(no_fallbacks, dtype):
    x = t(4, 5, dtype=dtype)
    i = torch.tensor([0, 3, 0, 0])  # duplicates accumulate
    compare(put([i], True), x, t(4, 5, dtype=dtype))
    compare(put([None, torch.tensor([[1, 1], [4, 1]])], True), x, t(4, 2, 2, dtype=dtype))
    compare(lambda x, i, v: x.clone().index_put_([i], v, accumulate=True), x, i, t(5, dtype=dtype))


def test_index_put_setitem(no_fallbacks):
    def fn(x, i, v):
        y = x.clone()
        y[i] = v
        y[:, i[:2]] = 7.0
        y[i[0], 1:3] += 1
        return y
    compare(fn, t(4, 5), torch.tensor([3, -1, 0]), t(3, 5))


def test_index_put_on_view(no_fallbacks):
    def fn(x, i, v):
        y = x.clone()
        y[1:, ::2].index_put_((i,), v, accumulate=True)
        return y
    compare(fn, t(4, 5), torch.tensor([0, 2, 0]), t(3, 3))


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_mask(no_fallbacks, accumulate):
    x = t(4, 5)
    m = torch.tensor([True, False, True, True])
    compare(put([m], accumulate), x, torch.tensor(2.0))  # one value: a select
    compare(put([m], accumulate), x, t(5))
    compare(put([m], accumulate), x, t(3, 1))  # one value per True row
    compare(put([m], accumulate), x, t(3, 5))
    compare(put([x > 0], accumulate), x, torch.arange(float((x > 0).sum())))  # 2-D mask
    compare(put([None, torch.tensor([True, False, False, True, True])], accumulate), x, t(4, 3))
    compare(put([torch.zeros(4, dtype=torch.bool)], accumulate), x, t(0, 5))


def test_index_put_mask_setitem(no_fallbacks):
    def fn(x):
        y = x.clone()
        y[y < 0] = 0.0
        y[y > 1] = torch.arange(float((x > 1).sum()), device=x.device)
        y[:, torch.tensor([True, False, True], device=x.device)] = -1.0
        return y
    compare(fn, t(4, 3))


def test_index_put_mask_fill(no_fallbacks):
    # one value through a lone bool mask: PyTorch's masked_fill_ path, which
    # converts the value's dtype
    m = torch.tensor([True, False, True])
    compare(lambda x, m: x.clone().index_put_((m,), torch.tensor(5)), t(3, 4), m)
    compare(lambda x, m: torch.ops.aten.index_put_(x.clone(), [None, m[:2]], torch.tensor(2.5, dtype=torch.float64)),
            t(3, 2), m)
    raises_like(lambda x, m: x.clone().index_put_((m,), torch.tensor(5)), t(3, 4), m.to(torch.uint8))
    raises_like(lambda x, m: x.clone().index_put_((m,), torch.tensor(5), accumulate=True), t(3, 4), m)


def test_masked_fill_with_a_cpu_value(no_fallbacks):
    # a 0-dim CPU tensor as the value, which CUDA takes too (the meta
    # function refused it: "Expected `value` to be on same device as `a`")
    m = torch.tensor([True, False, True])
    compare(lambda x, m: x.clone().masked_fill_(m, torch.tensor(2.5)), t(4, 3), m)
    compare(lambda x, m: x.masked_fill(m, torch.tensor(-1, dtype=torch.int64)), t(4, 3), m)
    raises_like(lambda x, m: x.masked_fill(m, torch.tensor([1.0, 2.0])), t(4, 3), m)


def test_index_put_errors(no_fallbacks):
    x = t(3, 4)
    before = x.to("tpu")
    err = raises_like(lambda x, i: x.index_put_((i,), torch.ones(4, device=x.device)), x, torch.tensor([0, 3]))
    assert "out of bounds" in str(err)
    raises_like(lambda x, i: x.index_put_((i,), torch.ones(4, device=x.device), accumulate=True), x,
                torch.tensor([-4]))
    raises_like(lambda x, i: x.index_put_((i,), torch.ones(3, device=x.device)), x, torch.tensor([0, 1]))
    raises_like(lambda x, m: x.index_put_((m,), torch.ones(3, 4, device=x.device)), x,
                torch.tensor([True, False, True]))  # 2 True rows, 3 values
    raises_like(lambda x, m: x.index_put_((m,), torch.ones(4, device=x.device)), x, torch.tensor([True, False]))
    raises_like(lambda x, i: x.index_put_((i, i, i), torch.ones(1, device=x.device)), x, torch.tensor([0]))
    raises_like(lambda x, i, j: x.index_put_((i, j), torch.ones(1, device=x.device)), x, torch.tensor([0, 1]),
                torch.tensor([0, 1, 2]))
    y = before.clone()
    with pytest.raises(IndexError):
        y.index_put_((torch.tensor([5], device="tpu"),), torch.ones(4, device="tpu"))
    torch.testing.assert_close(y.cpu(), before.cpu())


def test_index_put_out(no_fallbacks):
    x, v, i = t(3, 4), t(2, 4), torch.tensor([2, 0])
    out = torch.empty(0, device="tpu")
    torch.ops.aten.index_put.out(x.to("tpu"), [i.to("tpu")], v.to("tpu"), False, out=out)
    torch.testing.assert_close(out.cpu(), x.index_put((i,), v))


def test_index_put_backward(no_fallbacks):
    i = torch.tensor([2, 0])
    compare_grad(lambda x, i, v: x.index_put((i,), v), t(3, 4).requires_grad_(), i, t(2, 4).requires_grad_())
    compare_grad(lambda x, i, v: x.index_put((i,), v, accumulate=True),
                 t(3, 4).requires_grad_(), i, t(4).requires_grad_())


# --- embedding ----------------------------------------------------------------------------

@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding(no_fallbacks, padding_idx, scale):
    idx = torch.tensor([[0, 2, 5], [5, 5, 1]])
    compare_grad(lambda w: F.embedding(idx.to(w.device), w, padding_idx=padding_idx, scale_grad_by_freq=scale),
                 t(6, 3).requires_grad_())


def test_embedding_dense_backward(no_fallbacks):
    g, idx = t(2, 3, 4), torch.tensor([[0, 2, 1], [1, 1, 5]])
    compare(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 7, 1, True), g, idx)
    compare(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 7, -1, False), g, idx.int())
    compare(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 3, -1, False), t(0, 4),
            torch.zeros(0, dtype=torch.long))


# --- masked_scatter -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_scatter(no_fallbacks, dtype):
    x = t(4, 5, dtype=dtype)
    m = torch.rand(4, 5) > 0.5
    src = t(4, 6, dtype=dtype)  # more source than needed
    compare(torch.masked_scatter, x, m, src)
    compare(lambda x, m, s: x.clone().masked_scatter_(m, s), x, m, src)
    compare(torch.masked_scatter, x, torch.tensor([True, False, False, True, True]), src)  # mask broadcasts
    compare(torch.masked_scatter, x, torch.zeros(4, 5, dtype=torch.bool), torch.zeros(0, dtype=dtype))


def test_masked_scatter_on_view(no_fallbacks):
    def fn(x, m, s):
        y = x.clone()
        y.t()[1:].masked_scatter_(m, s)
        return y
    compare(fn, t(3, 4), torch.rand(3, 3) > 0.3, t(9))


def test_masked_scatter_errors(no_fallbacks):
    x = t(3, 4)
    raises_like(lambda x, m, s: x.clone().masked_scatter_(m, s), x, torch.ones(3, 4, dtype=torch.bool), t(11))
    raises_like(lambda x, m, s: x.clone().masked_scatter_(m, s), x, torch.ones(3, 4, dtype=torch.uint8), t(12))


def test_masked_scatter_backward():
    m = torch.tensor([[True, False, True], [False, True, True]])
    torchtpu.reset_stats()
    compare_grad(lambda x, m, s: x.masked_scatter(m, s), t(2, 3).requires_grad_(), m, t(5).requires_grad_())
    # masked_select has a data-dependent size: it has no rule (not this family)
    assert set(torchtpu.stats()["fallbacks"]) <= {"aten::masked_select"}
