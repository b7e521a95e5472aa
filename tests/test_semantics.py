"""PyTorch's storage and aliasing semantics on tpu: writes through every kind
of view are seen by every alias, exactly as on CPU."""
import warnings

import pytest
import torch

import torchtpu  # noqa: F401
from conftest import to_cpu, to_tpu


def both(fn):
    """Runs fn(device) on CPU and on tpu; the returned tensors must be equal."""
    cpu = fn("cpu")
    tpu = fn("tpu")
    torch.testing.assert_close(to_cpu(tpu), cpu, equal_nan=True, rtol=0, atol=0)


def base(device, dtype=torch.float32):
    return torch.arange(24, dtype=dtype).reshape(4, 6).to(device)


@pytest.mark.usefixtures("no_fallbacks")
class TestViewWrites:
    def test_strided(self):
        def f(d):
            x = base(d)
            x[:, ::2] = -1
            x[1::2, 1::3].mul_(10)
            return x
        both(f)

    def test_transposed(self):
        def f(d):
            x = base(d)
            x.t()[2:5].add_(100)
            y = x.t()
            y[0] = torch.arange(4.0).to(d)
            return x, y.contiguous()
        both(f)

    def test_diagonal(self):
        def f(d):
            x = base(d)[:, :4]
            x.diagonal().fill_(7)
            x.diagonal(offset=1).mul_(-1)
            return x
        both(f)

    def test_narrow_and_select(self):
        def f(d):
            x = base(d)
            x.narrow(1, 2, 3).zero_()
            x.select(0, 3).copy_(torch.full((6,), 5.0).to(d))
            x[2, 1] = 42
            return x
        both(f)

    def test_overlapping_reads(self):
        def f(d):
            x = base(d)
            win = x.view(-1).unfold(0, 5, 3)  # overlapping windows
            exp = x[0:1].expand(3, 6)         # stride-0 broadcast view
            return win * 2, exp + 1, win.sum(1)
        both(f)

    def test_write_to_view_of_view(self):
        def f(d):
            x = base(d).view(2, 2, 6)
            v = x.permute(2, 0, 1)[1:4]
            v += 1
            v[:, 1, 0] = 0
            return x
        both(f)

    def test_in_place_with_self_alias(self):
        def f(d):
            x = base(d)
            x[0].add_(x[1])   # another region of the same storage
            x.mul_(x)         # the whole tensor with itself
            x[2:].sub_(x[2:].t().t())
            y = base(d)
            y.copy_(y.t().reshape(4, 6))
            return x, y
        both(f)

    def test_view_dtype(self):
        def f(d):
            x = torch.tensor([1.0, -2.0, 0.5, 3.0], device=d)
            i = x.view(torch.int32)
            i[1] = 0x3F800000  # the bits of 1.0
            b = x.view(torch.uint8)
            h = x.view(torch.int16)
            return x, i.clone(), b.clone(), h.clone(), x.view(torch.float64).clone()
        both(f)

    def test_whole_writes_in_other_shapes(self):
        """A storage's buffer takes the shape of its last whole write; reads
        and writes in any other shape, dtype or layout see the same bytes."""
        def f(d):
            x = base(d)
            x.view(24).mul_(2)                             # whole, 1-D
            x.view(2, 12).add_(1)                          # whole, another shape
            x[1:3].sub_(5)                                 # part of it
            x.add_(x.view(6, 4).t().contiguous().view(4, 6))  # read in another shape
            x.view(torch.int32).view(3, 8).bitwise_xor_(1)  # whole, another dtype
            x.t().mul_(0.5)                                # whole, not contiguous
            z = x.t() * 2                                  # a new tensor laid out like x.t()
            z.t().view(24).add_(1)                         # its storage written whole in 1-D
            z[1:3] += 1
            return x, x.view(3, 8) * 1, z, z.t().contiguous()
        both(f)

    def test_detach_shares_storage(self):
        def f(d):
            x = torch.ones(3, device=d, requires_grad=True)
            y = x.detach()
            y.mul_(4)
            return x.detach().clone()
        both(f)

    def test_resize_and_set(self):
        def f(d):
            x = torch.arange(6.0).to(d)
            x.resize_(2, 2)          # shrinks the view, keeps the storage
            y = torch.empty(0, device=d)
            y.set_(x.untyped_storage(), 1, (2,), (2,))
            y.add_(10)              # writes into x's storage
            z = torch.arange(4.0).to(d)
            z.resize_(8)            # grows the storage: old values stay
            return x, y, z[:4]
        both(f)

    def test_out_argument(self):
        def f(d):
            a, b = base(d), base(d) * 2
            out = torch.empty(4, 6, device=d)
            torch.add(a, b, alpha=3, out=out)
            bigger = torch.empty(6, 4, device=d).t()  # non-contiguous out
            torch.mul(a, b, out=bigger)
            return out, bigger
        both(f)


@pytest.mark.usefixtures("no_fallbacks")
class TestIndexWrites:
    def test_index_put_accumulate(self):
        def f(d):
            x = torch.zeros(5, device=d)
            idx = torch.tensor([0, 2, 2, 4, 0]).to(d)
            x.index_put_((idx,), torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).to(d), accumulate=True)
            return x
        both(f)

    def test_boolean_mask_assignment(self):
        def f(d):
            x = base(d)
            x[x > 10] = -1
            y = base(d)
            y[y % 3 == 0] = torch.arange(8.0).to(d)
            return x, y
        both(f)


def both_warning(fn):
    """both(fn), and fn warns the same on tpu as on CPU (the messages' first
    sentences: PyTorch adds where it was triggered)."""
    said = {}
    for device in ("cpu", "tpu"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            said[device] = fn(device)
        said[device + " warnings"] = [str(w.message).split(" (Triggered")[0] for w in caught]
    torch.testing.assert_close(to_cpu(said["tpu"]), said["cpu"], equal_nan=True, rtol=0, atol=0)
    assert said["tpu warnings"] == said["cpu warnings"]
    return said["cpu warnings"]


def expanded(device, values, *sizes, dtype=torch.float32):
    """A base tensor of |values| and a view of it expanded to |sizes|."""
    b = torch.tensor(values, dtype=dtype).to(device)
    return b, b.expand(*sizes)


OVERLAP = "more than one element of the written-to tensor refers to a single memory location"


@pytest.mark.usefixtures("no_fallbacks")
class TestExpandedWrites:
    """Writes into an expanded view, whose elements share memory locations.
    PyTorch's CPU kernels of the fills and of the indexing writes take them
    (the latter with a deprecation warning) and write element by element, so
    a location ends with the last write that changed it, or the sum of
    index_put_'s accumulations; every other in-place op refuses them."""

    def test_fills(self):
        def f(d):
            a, x = expanded(d, [1.0, 2.0, 3.0], 4, 3)
            x.fill_(2)
            b, y = expanded(d, [[1.0], [2.0]], 2, 5)
            y.zero_()
            c, z = expanded(d, [-0.0, 0.0, 1.0], 2, 3)
            z.fill_(-0.0)
            assert z.cpu().signbit().all()
            e, w = expanded(d, [[1.0, 2.0, 3.0]], 3, 3)
            w.tril_()
            g, v = expanded(d, [[1.0], [2.0], [3.0]], 3, 4)
            v.triu_(1)
            h, u = expanded(d, [1.0, -1.0, 3.0], 2, 3)
            torch.nn.functional.threshold(u, 0.5, 9.0, inplace=True)
            k, r = expanded(d, [1.0, 2.0], 3, 2)
            r.conj_physical_()  # a no-op on real tensors
            return a, b, c, e, g, h, k
        assert both_warning(f) == []

    def test_fill_with_a_host_tensor(self):
        """fill_ with a tensor of another device takes its value, as a
        number; on one device it copies, which refuses the overlap."""
        a, x = expanded("tpu", [1.0, 2.0], 3, 2)
        x.fill_(torch.tensor(5.0))
        assert a.cpu().tolist() == [5.0, 5.0]
        with pytest.raises(RuntimeError, match=OVERLAP):
            x.fill_(torch.tensor(6.0, device="tpu"))

    def test_masked_fill(self):
        def f(d):
            a, x = expanded(d, [0.0, 0.0, 0.0], 2, 3)
            x.masked_fill_(torch.tensor([[True, False, False], [False, False, True]]).to(d), 5.0)
            b, y = expanded(d, [[1.0, 2.0], [3.0, 4.0]], 3, 2, 2)
            y.masked_fill_(torch.tensor([[False, True], [False, False]]).to(d), float("nan"))
            return a, b
        assert both_warning(f) == ["Use of masked_fill_ on expanded tensors is deprecated. Please clone() the "
                                   "tensor before performing this operation. This also applies to advanced "
                                   "indexing e.g. tensor[mask] = scalar"] * 2

    def test_index_fill(self):
        def f(d):
            a, x = expanded(d, [0.0, 0.0, 0.0], 4, 3)
            x.index_fill_(0, torch.tensor([1]).to(d), 7.0)  # the expanded dim: every location
            b, y = expanded(d, [0, 0, 0], 4, 3, dtype=torch.int64)
            y.index_fill_(1, torch.tensor([0, 2]).to(d), 7)
            return a, b
        assert len(both_warning(f)) == 2

    @pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
    def test_index_put_accumulates(self, dtype):
        """Every row adds: [0, 2, 2] into 4 expanded rows adds each value 3 times."""
        def f(d):
            a, x = expanded(d, [0, 1, 0], 4, 3, dtype=dtype)
            x.index_put_((torch.tensor([0, 2, 2]).to(d),), torch.tensor([1, 0, 1], dtype=dtype).to(d),
                         accumulate=True)
            b, y = expanded(d, [[[1]], [[2]], [[3]]], 3, 2, 2, dtype=dtype)
            y.index_put_((torch.tensor([0, 2]).to(d), torch.tensor([1, 0]).to(d), torch.tensor([1, 1]).to(d)),
                         torch.tensor([1, 1], dtype=dtype).to(d), accumulate=True)
            return a, b
        assert both_warning(f) == ["Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor "
                                   "before performing this operation. This also applies to advanced indexing e.g. "
                                   "tensor[indices] = tensor"] * 2

    def test_index_put(self):
        def f(d):
            a, x = expanded(d, [0.0, 0.0, 0.0], 4, 3)
            x.index_put_((torch.tensor([0, 2]).to(d), torch.tensor([1, 1]).to(d)), torch.tensor([1.0, 2.0]).to(d))
            b, y = expanded(d, [0.0, 0.0, 0.0], 2, 3)
            y[torch.tensor([[True, False, False], [False, False, True]]).to(d)] = torch.tensor([4.0, 5.0]).to(d)
            return a, b
        assert len(both_warning(f)) == 2

    def test_warns_on_every_call(self):
        """The warning is the kernel's, not the compile's: a cached program warns too."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                expanded("tpu", [0.0, 0.0], 2, 2)[1].masked_fill_(torch.tensor([True, False], device="tpu"), 1.0)
        assert len(caught) == 3

    @pytest.mark.parametrize("name,op", [
        ("add_", lambda x, d: x.add_(1)),
        ("mul_", lambda x, d: x.mul_(2)),
        ("relu_", lambda x, d: x.relu_()),
        ("copy_", lambda x, d: x.copy_(torch.ones(4, 3, device=d))),
        ("copy_broadcast", lambda x, d: x.copy_(torch.ones(3, device=d))),
        ("masked_scatter_", lambda x, d: x.masked_scatter_(torch.ones(4, 3, dtype=torch.bool, device=d),
                                                           torch.arange(12.0, device=d))),
        ("index_copy_", lambda x, d: x.index_copy_(0, torch.tensor([1], device=d), torch.ones(1, 3, device=d))),
        ("index_add_", lambda x, d: x.index_add_(0, torch.tensor([1], device=d), torch.ones(1, 3, device=d))),
        ("scatter_", lambda x, d: x.scatter_(0, torch.zeros(1, 3, dtype=torch.long, device=d), 5.0)),
        ("put_", lambda x, d: x.put_(torch.tensor([0], device=d), torch.tensor([5.0], device=d))),
        ("uniform_", lambda x, d: x.uniform_()),
        ("fill_tensor", lambda x, d: x.fill_(torch.tensor(5.0, device=d))),
        ("conj_physical_complex",
         lambda x, d: torch.zeros(1, 3, dtype=torch.complex64, device=d).expand(4, 3).conj_physical_()),
    ])
    def test_other_in_place_ops_refuse(self, name, op):
        for d in ("cpu", "tpu"):
            x = torch.zeros(1, 3, device=d).expand(4, 3)
            with pytest.raises(RuntimeError, match=OVERLAP):
                op(x, d)

    def test_blas_updates_refuse(self):
        """The CPU's addmv_ and baddbmm_ skip the check inside BLAS, and what
        they write depends on BLAS's order of work; tpu refuses them."""
        x = torch.zeros(1, device="tpu").expand(3)
        with pytest.raises(RuntimeError, match=OVERLAP):
            x.addmv_(torch.ones(3, 2, device="tpu"), torch.ones(2, device="tpu"))


class TestValues:
    @pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool, torch.bfloat16, torch.float16,
                                       torch.int32, torch.float64])
    def test_dtypes_round_trip_and_math(self, dtype):
        x = torch.tensor([0, 1, 2, 3, 7], dtype=dtype)
        t = x.to("tpu")
        assert t.dtype == dtype
        torch.testing.assert_close(t.cpu(), x, rtol=0, atol=0)
        torch.testing.assert_close((t == t).cpu(), (x == x))
        if dtype != torch.bool:
            torch.testing.assert_close((t + t).cpu(), x + x)
            torch.testing.assert_close((t * 3).cpu(), x * 3)

    def test_zero_dim_and_empty(self, no_fallbacks):
        def f(d):
            s = torch.tensor(3.5, device=d)
            e = torch.empty(0, 4, device=d)
            return s * 2, torch.tensor(s.item() + 1), e + 1, (e * 2).sum(0), s + e.sum()
        both(f)

    def test_nan_inf(self, no_fallbacks):
        x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0])
        both(lambda d: (x.to(d) * 2, x.to(d) / 0, torch.maximum(x.to(d), torch.zeros(6, device=d)),
                        x.to(d).isnan(), torch.clamp(x.to(d), -1, 1), torch.exp(x.to(d))))

    def test_item_and_printing(self):
        t = torch.tensor([[1.5, -2.0], [3.0, 4.25]], device="tpu")
        assert t[1, 1].item() == 4.25
        assert "tpu:0" in repr(t)
        assert "4.2500" in repr(t)
        assert bool(t.sum() > 0)
        assert t.tolist() == [[1.5, -2.0], [3.0, 4.25]]

    @torchtpu.eager_mode("strict")  # counts strict eager's one-op programs
    def test_scalar_args_do_not_multiply_the_cache(self):
        t = torch.ones(4, device="tpu")
        (t * 0.5).cpu()
        before = torchtpu.stats()["cache_misses"]
        for v in (0.25, 1.5, -3.0, 7.0):
            torch.testing.assert_close((t * v).cpu(), torch.ones(4) * v)
        assert torchtpu.stats()["cache_misses"] == before


class TestCopies:
    """Copies CPU<->tpu and tpu<->tpu: non-contiguous sources and targets,
    dtype conversion, broadcasting."""

    def test_cpu_to_tpu(self, no_fallbacks):
        src = torch.arange(24.0).reshape(4, 6)
        assert torch.equal(src.t().to("tpu").cpu(), src.t())               # non-contiguous source
        assert torch.equal(src.to("tpu", torch.int32).cpu(), src.int())    # converting
        dst = torch.zeros(6, 4, device="tpu")
        dst.t()[1:3].copy_(src[1:3])                                       # into a view
        ref = torch.zeros(6, 4)
        ref.t()[1:3].copy_(src[1:3])
        assert torch.equal(dst.cpu(), ref)
        b = torch.zeros(3, 4, device="tpu", dtype=torch.float16)
        b.copy_(torch.tensor([1, 2, 3, 4]))                                # broadcast + convert
        assert torch.equal(b.cpu(), torch.tensor([1, 2, 3, 4]).expand(3, 4).half())

    def test_tpu_to_cpu(self, no_fallbacks):
        src = torch.arange(24.0).reshape(4, 6)
        t = src.to("tpu")
        assert torch.equal(t[:, ::2].cpu(), src[:, ::2])
        out = torch.empty(6, 4).t()                                        # non-contiguous target
        out.copy_(t)
        assert torch.equal(out, src)
        assert torch.equal(t.to(torch.bfloat16).cpu(), src.bfloat16())
        assert torch.equal(t.cpu().to(torch.int64), t.to(torch.int64).cpu())

    def test_tpu_to_tpu(self, no_fallbacks):
        src = torch.arange(24.0).reshape(4, 6).to("tpu")
        dst = torch.empty(6, 4, device="tpu", dtype=torch.float64)
        dst.copy_(src.t())
        assert torch.equal(dst.cpu(), torch.arange(24.0).reshape(4, 6).t().double())
        c = src.clone()
        c[:, 1:].copy_(src[:, :-1])                                        # overlapping regions of one storage
        ref = torch.arange(24.0).reshape(4, 6)
        ref2 = ref.clone()
        ref2[:, 1:].copy_(ref[:, :-1])
        assert torch.equal(c.cpu(), ref2)


@pytest.mark.parametrize("op", [lambda a: torch.pow(2, a), lambda a: 2.5 ** a, lambda a: torch.float_power(2, a),
                                lambda a: torch.nn.functional.rrelu(a, training=False)],
                         ids=["pow.Scalar", "rpow", "float_power", "rrelu"])
def test_results_the_cpu_makes_contiguous(op):
    """These CPU kernels lay their result out contiguous whatever the input's
    layout, where PyTorch's meta functions keep the input's: tpu kept a
    transposed input's strides, and a view the CPU allows failed."""
    x = torch.rand(4, 3).t() + 0.5
    want = op(x)
    got = op(x.to("tpu"))
    assert want.stride() == (4, 1) and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(op(x.to("tpu")).view(-1).cpu(), want.view(-1))
