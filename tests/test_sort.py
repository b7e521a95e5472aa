"""Sorting and the ops built on it on tpu against PyTorch on CPU: sort and
argsort (stable, descending, NaN greatest), topk, kthvalue, median and
nanmedian, mode, cummax/cummin, logcumsumexp, searchsorted, histc, histogram and
histogramdd, bincount, unique and unique_consecutive, with edge cases (NaN, empty, 0-dim, negative dims) and
PyTorch's errors."""
import itertools
import math

import pytest
import torch

import torchtpu
from conftest import compare

NAN, INF = math.nan, math.inf


def with_nans(shape=(4, 6), seed=0):
    """Random floats with NaNs and a tie in row 0."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    x[1, 2] = x[2, 0] = x[1, 4] = NAN
    x[0, 1] = x[0, 3]
    return x


def ties(shape=(4, 9), seed=0):
    return torch.randint(0, 3, shape, generator=torch.Generator().manual_seed(seed)).float()


@pytest.mark.usefixtures("no_fallbacks")
class TestSort:
    @pytest.mark.parametrize("dim", [0, 1, -1])
    @pytest.mark.parametrize("descending", [False, True])
    def test_nan_and_ties(self, dim, descending):
        compare(lambda x: torch.sort(x, dim=dim, descending=descending, stable=True), with_nans())
        compare(lambda x: torch.sort(x, dim=dim, descending=descending, stable=True), ties())

    @pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.bfloat16])
    def test_dtypes(self, dtype):
        compare(lambda x: torch.sort(x.to(dtype), stable=True), ties())
        compare(lambda x: torch.argsort(x.to(dtype), dim=0, descending=True, stable=True), ties())

    def test_infinities_and_signed_zero(self):
        x = torch.tensor([0.0, -INF, NAN, -0.0, INF, 1.0, -0.0, NAN])
        compare(lambda x: torch.sort(x, stable=True), x)
        compare(lambda x: torch.sort(x, descending=True, stable=True), x)

    def test_edges(self):
        compare(lambda x: torch.sort(x), torch.tensor(2.5))
        compare(lambda x: torch.sort(x, dim=1), torch.ones(3, 0))
        compare(lambda x: torch.msort(x), with_nans())

    def test_out(self):
        x = with_nans()
        compare(lambda x: torch.sort(x, 1, out=(torch.empty(0, device=x.device),
                                                torch.empty(0, dtype=torch.long, device=x.device))), x)

    def test_complex_is_an_error(self):
        with pytest.raises(RuntimeError, match="Sort does not support complex dtypes"):
            torch.sort(torch.ones(3, dtype=torch.complex64, device="tpu"))


@pytest.mark.usefixtures("no_fallbacks")
class TestSelection:
    @pytest.mark.parametrize("largest", [True, False])
    @pytest.mark.parametrize("dim", [0, -1])
    def test_topk(self, largest, dim):
        compare(lambda x: torch.topk(x, 3, dim=dim, largest=largest), with_nans())
        compare(lambda x: torch.topk(x, 0, dim=dim, largest=largest), with_nans())

    @pytest.mark.parametrize("keepdim", [False, True])
    def test_kthvalue(self, keepdim):
        x = torch.randn(5, 7, generator=torch.Generator().manual_seed(1))
        compare(lambda x: torch.kthvalue(x, 3, 1, keepdim=keepdim), x)
        compare(lambda x: torch.kthvalue(x, 5, -2, keepdim=keepdim), x)
        compare(lambda x: torch.kthvalue(x, 1), torch.tensor(4.0))

    def test_kthvalue_out_of_range_is_an_error(self):
        with pytest.raises(RuntimeError, match=r"kthvalue\(\): selected number k out of range for dimension 1"):
            torch.kthvalue(torch.ones(3, 4, device="tpu"), 5, 1)

    @pytest.mark.parametrize("op", [torch.median, torch.nanmedian])
    @pytest.mark.parametrize("dim", [0, 1, -1])
    def test_median(self, op, dim):
        compare(lambda x: op(x, dim), with_nans())
        compare(lambda x: op(x, dim, keepdim=True), torch.randn(5, 6))
        x = with_nans()
        x[3] = NAN  # a row of NaN only: nanmedian's index there is the CPU's nth_element's pick
        compare(lambda x: op(x, 1) if op is torch.median else op(x, 1).values, x)

    @pytest.mark.parametrize("op", [torch.median, torch.nanmedian])
    def test_median_all(self, op):
        compare(op, with_nans())
        compare(op, torch.randn(4, 5))
        compare(op, torch.randint(0, 9, (7,)))
        compare(op, torch.ones(0))
        compare(lambda x: op(x, 0), torch.tensor(3.0))

    @pytest.mark.parametrize("op", [torch.median, torch.nanmedian])
    def test_median_empty_dim_is_an_error(self, op):
        with pytest.raises(IndexError, match=r"median\(\): Expected reduction dim 1 to have non-zero size"):
            op(torch.ones(3, 0, device="tpu"), 1)

    @pytest.mark.parametrize("dim", [0, -1])
    def test_mode(self, dim):
        compare(lambda x: torch.mode(x, dim), ties())
        compare(lambda x: torch.mode(x, dim, keepdim=True), ties().long())
        compare(lambda x: torch.mode(x, dim), torch.randn(5, 4))
        compare(lambda x: torch.mode(x), torch.tensor(2.0))

    def test_mode_empty_dim_is_an_error(self):
        with pytest.raises(IndexError, match=r"mode\(\): Expected reduction dim 1 to have non-zero size"):
            torch.mode(torch.ones(3, 0, device="tpu"), 1)


@pytest.mark.usefixtures("no_fallbacks")
class TestCumulative:
    @pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
    @pytest.mark.parametrize("dim", [0, 1, -1])
    def test_running(self, op, dim):
        compare(lambda x: op(x, dim), with_nans())
        compare(lambda x: op(x, dim), ties())
        compare(lambda x: op(x, dim), ties().int())
        compare(lambda x: op(x, dim), ties().bool())

    @pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
    def test_running_edges(self, op):
        compare(lambda x: op(x, 0), torch.tensor(1.5))
        compare(lambda x: op(x, 1), torch.ones(3, 0))
        compare(lambda x: op(x, 0), torch.tensor([-INF, -INF, 1.0, INF, INF]))

    @pytest.mark.parametrize("dim", [0, 1, -1])
    def test_logcumsumexp(self, dim):
        compare(lambda x: torch.logcumsumexp(x, dim), torch.randn(5, 6))
        compare(lambda x: torch.logcumsumexp(x, dim), torch.randn(5, 6).bfloat16())
        x = torch.tensor([[-INF, -INF, 0.0, INF, 1.0], [NAN, 1.0, 2.0, -INF, 3.0]])
        compare(lambda x: torch.logcumsumexp(x, 1), x)
        compare(lambda x: torch.logcumsumexp(x, 0), torch.tensor(2.0))

    def test_logcumsumexp_of_complex_numbers(self):
        # each step shifts by the value of larger real part, as the CPU's kernel
        g = torch.Generator().manual_seed(5)
        compare(lambda x: torch.logcumsumexp(x, 1), torch.randn(8, 700, dtype=torch.complex64, generator=g) * 4)
        compare(lambda x: torch.logcumsumexp(x, 0), torch.randn(300, 3, dtype=torch.complex128, generator=g))
        x = torch.tensor([complex(-INF, 0), complex(1, 2), complex(-INF, 1), complex(INF, 0.5), complex(2, 3),
                          complex(NAN, 0), complex(1, 1)], dtype=torch.complex64)
        compare(lambda x: torch.logcumsumexp(x, 0), x)
        compare(lambda x: torch.logcumsumexp(x, 0), torch.tensor([3 - 1j, complex(-INF, 2), 1 + 2j, 3 + 2j]))

    def test_logcumsumexp_integer_is_an_error(self):
        with pytest.raises(NotImplementedError, match="logcumsumexp_out_cpu\" not implemented for 'Long'"):
            torch.logcumsumexp(torch.ones(3, dtype=torch.long, device="tpu"), 0)

    def test_grads(self):
        for fn in (lambda x: torch.cummax(x, 1)[0], lambda x: torch.logcumsumexp(x, 1),
                   lambda x: torch.sort(x, 1)[0], lambda x: torch.median(x, 1)[0]):
            x = torch.randn(4, 5, generator=torch.Generator().manual_seed(2), requires_grad=True)
            fn(x).sum().backward()
            xt = x.detach().to("tpu").requires_grad_()
            fn(xt).sum().backward()
            torch.testing.assert_close(xt.grad.cpu(), x.grad)


@pytest.mark.usefixtures("no_fallbacks")
class TestSearch:
    @pytest.mark.parametrize("right", [False, True])
    def test_searchsorted(self, right):
        seq = torch.tensor([-1.0, 0.0, 0.0, 0.5, 2.0])
        v = torch.tensor([[-2.0, 0.0, 0.25], [0.5, 2.0, 3.0]])
        compare(lambda s, v: torch.searchsorted(s, v, right=right), seq, v)
        compare(lambda s, v: torch.searchsorted(s, v, side="right" if right else "left"), seq, v)
        compare(lambda s, v: torch.searchsorted(s, v, right=right, out_int32=True), seq, v)
        compare(lambda s: torch.searchsorted(s, 0.0, right=right), seq)
        rows = torch.sort(torch.randn(2, 6), 1)[0]
        compare(lambda s, v: torch.searchsorted(s, v, right=right), rows, v)

    def test_searchsorted_sorter(self):
        seq = torch.tensor([2.0, -1.0, 0.5, 0.0])
        v = torch.tensor([-2.0, 0.0, 0.3, 5.0])
        compare(lambda s, v, i: torch.searchsorted(s, v, sorter=i), seq, v, torch.argsort(seq))

    @pytest.mark.parametrize("right", [False, True])
    def test_searchsorted_follows_the_binary_search(self, right):
        # unsorted or NaN boundaries: the CPU's answer is where its search stops
        v = torch.tensor([[NAN, -1.0, 0.1, 0.7], [1.5, 2.5, -3.0, 0.0]])
        for seq in (torch.tensor([0.0, 1.0, NAN]), torch.tensor([2.0, -1.0, 0.5, 3.0, 0.0]),
                    torch.tensor([[0.5, -1.0, 2.0], [NAN, 0.0, 1.0]])):
            compare(lambda s, v: torch.searchsorted(s, v, right=right), seq, v)
        seq = torch.tensor([2.0, -1.0, 0.5, 3.0, 0.0])
        compare(lambda s, v, i: torch.searchsorted(s, v, right=right, sorter=i), seq, v, torch.tensor([4, 0, 1, 3, 2]))

    def test_searchsorted_bad_sorter_is_an_error(self):
        with pytest.raises(RuntimeError, match=r"torch.searchsorted\(\): sorter index out of range"):
            torch.searchsorted(torch.ones(3, device="tpu"), torch.ones(2, device="tpu"),
                               sorter=torch.tensor([0, 5, 1], device="tpu"))

    def test_searchsorted_shape_is_an_error(self):
        with pytest.raises(RuntimeError, match="boundaries tensor should be 1 dimension"):
            torch.searchsorted(torch.ones(2, 3, device="tpu"), torch.ones(3, 3, device="tpu"))

    def test_isin_bucketize(self):
        x, t = ties(), torch.tensor([0.0, 2.0])
        compare(lambda x, t: torch.isin(x, t), x, t)
        compare(lambda x, t: torch.bucketize(x, t, right=True), x, t)

    @pytest.mark.parametrize("bins,lo,hi", [(7, 0, 0), (5, -1, 1), (1, 0, 0), (4, 0.5, 0.5)])
    def test_histc(self, bins, lo, hi):
        x = torch.randn(50, generator=torch.Generator().manual_seed(3))
        x[:3] = torch.tensor([-1.0, 1.0, 0.0])
        compare(lambda x: torch.histc(x, bins, lo, hi), x)
        compare(lambda x: torch.histc(x, bins, lo, hi), torch.full((4,), 2.0))
        compare(lambda x: torch.histc(x, bins, lo, hi), torch.ones(0))

    def test_histc_not_finite_is_an_error(self):
        with pytest.raises(RuntimeError, match=r"torch.histc: range of \[0, inf\] is not finite"):
            torch.histc(torch.ones(3, device="tpu"), 5, 0, INF)
        with pytest.raises(RuntimeError, match="torch.histc: range of"):
            torch.histc(torch.tensor([1.0, INF], device="tpu"), 5)
        with pytest.raises(RuntimeError, match="torch.histc: range of"):
            torch.histc(torch.tensor([1.0, NAN, 2.0], device="tpu"), 5)


@pytest.mark.usefixtures("no_fallbacks")
class TestHistogram:
    @pytest.mark.parametrize("shape", [(), (7,), (4, 5), (3, 0)])
    @pytest.mark.parametrize("density", [False, True])
    def test_bin_count(self, shape, density):
        x, w = torch.randn(shape), torch.rand(shape)
        compare(lambda x: torch.histogram(x, 4, density=density), x)
        compare(lambda x, w: torch.histogram(x, 3, weight=w, density=density), x, w)
        compare(lambda x: torch.histogram(x, 5, range=(-0.5, 0.5), density=density), x)
        compare(lambda x: torch.histogram(x, 2), torch.full(shape, 2.0))

    def test_edge_tensors_sorted_or_not(self):
        x = torch.tensor([-2.0, -1.0, 0.0, 0.3, 1.0, 1.5, 2.0, 9.0, NAN])
        compare(lambda x, b: torch.histogram(x, b), x, torch.tensor([-1.0, 0.0, 0.5, 2.0]))
        # the CPU's binary search over unsorted edges, step by step
        compare(lambda x, b: torch.histogram(x, b), x, torch.tensor([-1.0, 1.2, -0.5, 0.2, 2.0]))

    @pytest.mark.parametrize("density", [False, True])
    def test_histogramdd(self, density):
        x, w = torch.randn(20, 3), torch.rand(20)
        compare(lambda x: torch.histogramdd(x, [2, 3, 1], density=density), x)
        compare(lambda x, w: torch.histogramdd(x, [3, 3, 2], weight=w, density=density), x, w)
        compare(lambda x: torch.histogramdd(x, 2, range=[-1.0, 1.0, 0.0, 2.0, -1.0, 0.0]), x)
        edges = [torch.tensor([0.5, -1.0, 1.0]), torch.tensor([-1.0, 0.0]), torch.tensor([-2.0, 0.0, 0.1, 3.0])]
        compare(lambda x, *e: torch.histogramdd(x, list(e)), x, *edges)

    def test_bincount(self):
        x = torch.tensor([3, 0, 3, 1])
        compare(torch.bincount, x)
        compare(lambda x: torch.bincount(x, minlength=7), x.to(torch.uint8))
        compare(lambda x, w: torch.bincount(x, w), x, torch.tensor([0.5, 1.0, 2.0, 3.0]))
        compare(lambda x, w: torch.bincount(x, w), x, torch.tensor([1, 2, 3, 4]))  # counts in double
        compare(lambda x: torch.bincount(x, minlength=3), torch.tensor([], dtype=torch.long))

    def test_bincount_errors(self):
        with pytest.raises(RuntimeError, match="bincount only supports 1-d non-negative integral inputs"):
            torch.bincount(torch.tensor([-1, 2], device="tpu"))
        with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
            torch.bincount(torch.ones(2, device="tpu"))
        with pytest.raises(RuntimeError, match="weights should be 1-d and have the same length as input"):
            torch.bincount(torch.tensor([1, 2], device="tpu"), torch.ones(3, device="tpu"))

    def test_errors(self):
        x = torch.randn(5, device="tpu")
        with pytest.raises(RuntimeError, match=r"torch.histogram\(\): bins must be > 0, but got 0 for dimension 0"):
            torch.histogram(x, 0)
        with pytest.raises(RuntimeError, match="min should not exceed max, but got min 1 max 0 for dimension 0"):
            torch.histogram(x, 4, range=(1.0, 0.0))
        with pytest.raises(RuntimeError, match=r"dimension 0's range \[-inf, inf\] is not finite"):
            torch.histogram(x / 0, 4)
        with pytest.raises(RuntimeError, match="if weight tensor is provided it should have the same shape"):
            torch.histogram(x, 3, weight=torch.ones(4, device="tpu"))
        with pytest.raises(RuntimeError, match="bins tensor should have one dimension"):
            torch.histogram(x, torch.ones(2, 2, device="tpu"))
        with pytest.raises(RuntimeError, match="The size of bins must be equal to the innermost dimension"):
            torch.histogramdd(x.view(5, 1), [2, 2])


@pytest.mark.usefixtures("no_fallbacks")
class TestUnique:
    @pytest.mark.parametrize("shape", [(), (6,), (4, 5), (3, 1, 4), (3, 0, 2)])
    def test_unique(self, shape):
        x = torch.randint(0, 3, shape, generator=torch.Generator().manual_seed(4)).float()
        for ri, rc, dim in itertools.product([False, True], [False, True], [None, 0, -1]):
            if dim is not None and (len(shape) == 0 or (0 in shape and dim % len(shape) != 1)):
                continue
            compare(lambda x: torch.unique(x, return_inverse=ri, return_counts=rc, dim=dim), x)
            compare(lambda x: torch.unique_consecutive(x, return_inverse=ri, return_counts=rc, dim=dim), x)

    def test_unique_nan_and_dtypes(self):
        x = torch.tensor([3.0, 1.0, NAN, 2.0, NAN, 1.0, -0.0, 0.0])
        compare(lambda x: torch.unique(x, return_inverse=True, return_counts=True), x)
        compare(lambda x: torch.unique(x, return_counts=True), ties().long())
        compare(lambda x: torch.unique(x, return_inverse=True), ties().bool())

    def test_one_sync(self):
        x = ties().to("tpu")
        torchtpu.reset_stats()
        torch.unique(x, return_inverse=True, return_counts=True)
        assert not torchtpu.stats()["fallbacks"]
