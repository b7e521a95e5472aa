"""Convolutions (1-3 spatial dims, strided, padded, dilated, grouped,
transposed), pooling (max with indices, average, adaptive average and max),
interpolation and grid sampling, forward and backward through
torch.nn.functional, against PyTorch on CPU."""
import functools

import pytest
import torch
import torch.nn.functional as F

from conftest import compare, compare_grad, make, to_tpu

BF16 = dict(rtol=3e-2, atol=3e-2)


# (input shape, weight shape, keyword arguments)
CONVS = [
    ((2, 3, 9), (4, 3, 3), dict()),
    ((2, 4, 10), (6, 2, 3), dict(stride=2, padding=1, dilation=2, groups=2)),
    ((1, 3, 7, 8), (4, 3, 3, 3), dict()),
    ((2, 3, 8, 8), (4, 3, 3, 3), dict(stride=2, padding=1)),
    ((2, 4, 9, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)),
    ((1, 6, 7, 7), (6, 1, 3, 3), dict(padding=1, groups=6)),  # depthwise
    ((2, 4, 10, 9), (5, 4, 3, 2), dict(stride=3)),  # the stride leaves input unread
    ((1, 2, 5, 5), (3, 2, 1, 1), dict()),
    ((2, 3, 7, 7), (4, 3, 3, 2), dict(padding="same", dilation=2)),
    ((1, 2, 5, 6, 5), (3, 2, 3, 3, 3), dict(stride=2, padding=1)),
    ((1, 4, 6, 5, 4), (4, 2, 2, 3, 2), dict(dilation=(1, 2, 1), groups=2, padding=(0, 1, 1))),
]


def conv_fn(nd):
    return {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[nd]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape,w_shape,kw", CONVS, ids=str)
def test_conv(no_fallbacks, x_shape, w_shape, kw, bias):
    fn = conv_fn(len(x_shape))
    x, w = make(x_shape, requires_grad=True), make(w_shape, seed=1, requires_grad=True)
    b = make((w_shape[0],), seed=2, requires_grad=True) if bias else None
    compare_grad(lambda x, w, b: fn(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("x_shape,w_shape,kw", CONVS[:5], ids=str)
def test_conv_bfloat16(no_fallbacks, x_shape, w_shape, kw):
    fn = conv_fn(len(x_shape))
    args = [make(shape, torch.bfloat16, seed, requires_grad=True)
            for seed, shape in enumerate([x_shape, w_shape, (w_shape[0],)])]
    compare_grad(lambda x, w, b: fn(x, w, b, **kw), *args, **BF16)


@pytest.mark.parametrize("needs", [(True, False, False), (False, True, False), (False, False, True),
                                   (False, True, True)], ids=str)
def test_conv_backward_output_mask(no_fallbacks, needs):
    x, w, b = (make(shape, seed=seed, requires_grad=need)
               for seed, (shape, need) in enumerate(zip([(2, 4, 6, 6), (4, 2, 3, 3), (4,)], needs)))
    compare_grad(lambda x, w, b: F.conv2d(x, w, b, stride=2, groups=2), x, w, b)


def test_conv_non_contiguous(no_fallbacks):
    x, w = make((2, 3, 7, 8), requires_grad=True), make((4, 6, 3, 3), seed=1, requires_grad=True)
    compare_grad(lambda x, w: F.conv2d(x.transpose(2, 3), w[:, ::2]), x, w)
    x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    compare_grad(lambda x, w: F.conv2d(x, w[:, 1:4], padding=1), x, w)


def test_conv_int64(no_fallbacks):
    compare(lambda x, w: F.conv2d(x, w, padding=1, stride=2), make((1, 2, 5, 5), torch.int64),
            make((3, 2, 3, 3), torch.int64, 1))
    compare(lambda x, w: F.conv_transpose2d(x, w, stride=2), make((1, 2, 4, 4), torch.int64),
            make((2, 3, 3, 3), torch.int64, 1))


def test_conv_empty_batch(no_fallbacks):
    compare(lambda x, w: F.conv2d(x, w, padding=1), make((0, 2, 5, 5)), make((3, 2, 3, 3), seed=1))


# (input shape, weight shape (in, out/groups, ...), keyword arguments)
TRANSPOSED = [
    ((2, 4, 5), (4, 2, 4), dict(stride=3, padding=2)),
    ((2, 4, 5, 5), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ((2, 4, 5, 4), (4, 3, 3, 2), dict(stride=(2, 3), padding=(0, 1), output_padding=(1, 0), groups=2, dilation=(1, 2))),
    ((1, 2, 5, 5), (2, 3, 2, 2), dict(stride=3, padding=2)),  # padding beyond the kernel's reach
    ((1, 3, 4, 4), (3, 2, 3, 3), dict(dilation=3, output_padding=2)),  # output_padding < dilation
    ((1, 2, 3, 4, 3), (2, 2, 3, 2, 3), dict(stride=2, padding=1, output_padding=(1, 0, 1))),
]


@pytest.mark.parametrize("x_shape,w_shape,kw", TRANSPOSED, ids=str)
def test_conv_transpose(no_fallbacks, x_shape, w_shape, kw):
    fn = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(x_shape)]
    groups = kw.get("groups", 1)
    x, w = make(x_shape, requires_grad=True), make(w_shape, seed=1, requires_grad=True)
    b = make((w_shape[1] * groups,), seed=2, requires_grad=True)
    compare_grad(lambda x, w, b: fn(x, w, b, **kw), x, w, b)


def test_conv_transpose_bfloat16(no_fallbacks):
    x, w = make((2, 4, 5, 5), torch.bfloat16, requires_grad=True), make((4, 3, 3, 3), torch.bfloat16, 1,
                                                                       requires_grad=True)
    compare_grad(lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), x, w, **BF16)


def assert_same_error(fn, *args):
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(Exception) as tpu:
        fn(*to_tpu(args))
    assert type(cpu.value) is type(tpu.value)
    assert str(cpu.value) == str(tpu.value)


def test_conv_errors():
    x = make((1, 2, 5, 5))
    assert_same_error(F.conv2d, x, make((3, 4, 3, 3)))  # channels
    assert_same_error(F.conv2d, x, make((3, 2, 7, 7)))  # kernel larger than input
    assert_same_error(F.conv2d, x, make((3, 2, 3, 3), torch.float64))  # dtypes
    assert_same_error(F.conv2d, x.bool(), make((3, 2, 3, 3)).bool())
    assert_same_error(F.conv_transpose2d, make((1, 2, 4, 4), torch.int8), make((2, 2, 3, 3), torch.int8))


# --- pooling -----------------------------------------------------------------------

MAX_POOLS = [
    ((2, 3, 8, 9), dict(kernel_size=3, stride=2, padding=1)),
    ((2, 3, 9, 8), dict(kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), dilation=(2, 1), ceil_mode=True)),
    ((1, 2, 7, 7), dict(kernel_size=2, ceil_mode=True)),  # the last window sticks out
    ((1, 2, 6, 6), dict(kernel_size=3, stride=3, ceil_mode=True)),  # ceil_mode adds nothing
    ((3, 7, 7), dict(kernel_size=2)),  # unbatched
    ((1, 1, 5, 5), dict(kernel_size=5, padding=2, stride=1)),
    ((1, 2, 8, 8), dict(kernel_size=3, stride=1, dilation=2, padding=1)),
]


@pytest.mark.parametrize("shape,kw", MAX_POOLS, ids=str)
def test_max_pool2d(no_fallbacks, shape, kw):
    x = make(shape)
    compare(lambda x: F.max_pool2d(x, return_indices=True, **kw), x)
    compare_grad(lambda x: F.max_pool2d(x, **kw), x.requires_grad_())


def test_max_pool2d_ties_and_nan(no_fallbacks):
    x = torch.zeros(1, 1, 6, 6)
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = float("nan")  # several NaNs in a window
    x[0, 0, 4:, 4:] = 5.0  # a tie
    x[0, 0, 2, 2] = float("-inf")
    x[0, 0, 3, 3] = float("inf")
    compare(lambda x: F.max_pool2d(x, 2, 1, return_indices=True), x)
    compare(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True, ceil_mode=True), x)
    # overlapping windows with ties: every gradient goes to the first index
    compare_grad(lambda x: F.max_pool2d(x, 3, 1), torch.ones(1, 1, 5, 5, requires_grad=True))


def test_max_pool2d_all_negative_infinity(no_fallbacks):
    # the index is the window's first element that is not padding
    compare(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), torch.full((1, 1, 5, 5), float("-inf")))


def test_max_pool2d_dtypes(no_fallbacks):
    compare(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), make((1, 2, 7, 7), torch.bfloat16))
    compare(lambda x: F.max_pool2d(x, 2, return_indices=True), make((1, 2, 5, 5), torch.int64))
    compare_grad(lambda x: F.max_pool2d(x, 3, 2, 1), make((1, 2, 7, 7), torch.bfloat16, requires_grad=True), **BF16)


def test_max_pool2d_non_contiguous(no_fallbacks):
    x = make((2, 3, 8, 9))
    compare(lambda x: F.max_pool2d(x.transpose(2, 3)[:, :, 1:], 2, return_indices=True), x)
    compare_grad(lambda x: F.max_pool2d(x, 3, 2), x.to(memory_format=torch.channels_last).requires_grad_())


def test_max_pool_1d_3d(no_fallbacks):
    compare(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True, ceil_mode=True), make((2, 3, 9)))
    compare_grad(lambda x: F.max_pool1d(x, 3, 2), make((2, 3, 9), requires_grad=True))
    x = make((1, 2, 6, 7, 5))
    compare(lambda x: F.max_pool3d(x, 3, 2, 1, ceil_mode=True, return_indices=True), x)
    compare_grad(lambda x: F.max_pool3d(x, (2, 3, 2), 1, dilation=(1, 1, 2)), x.requires_grad_())


def test_max_pool2d_out(no_fallbacks):
    def run(x):
        out, idx = torch.empty(0, device=x.device), torch.empty(0, dtype=torch.long, device=x.device)
        torch.ops.aten.max_pool2d_with_indices.out(x, [3, 3], [2, 2], [1, 1], [1, 1], False, out=out, indices=idx)
        return out, idx

    compare(run, make((1, 2, 7, 7)))


def test_pool_errors():
    assert_same_error(lambda x: F.max_pool2d(x, 2, padding=2), make((1, 2, 4, 4)))
    assert_same_error(lambda x: F.max_pool2d(x, 5), make((1, 2, 4, 4)))
    assert_same_error(lambda x: F.max_pool2d(x, 2), make((1, 2, 4, 4)).bool())
    assert_same_error(lambda x: F.avg_pool2d(x, 2), make((1, 2, 4, 4), torch.int32))
    assert_same_error(lambda x: F.adaptive_avg_pool2d(x, 2), make((1, 2, 4, 4), torch.int64))


AVG_POOLS = [
    ((2, 3, 8, 9), dict(kernel_size=3, stride=2, padding=1)),
    ((2, 3, 8, 9), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ((2, 3, 8, 9), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)),
    ((2, 3, 8, 9), dict(kernel_size=(2, 3), stride=(3, 2), padding=(1, 0))),
    ((1, 2, 7, 7), dict(kernel_size=2, ceil_mode=True)),
    ((1, 2, 7, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, divisor_override=5)),
    ((3, 6, 6), dict(kernel_size=2)),  # unbatched
    ((1, 1, 4, 4), dict(kernel_size=4, padding=2, stride=3, count_include_pad=False, ceil_mode=True)),
]


@pytest.mark.parametrize("shape,kw", AVG_POOLS, ids=str)
def test_avg_pool2d(no_fallbacks, shape, kw):
    x = make(shape)
    compare(lambda x: F.avg_pool2d(x, **kw), x)
    compare_grad(lambda x: F.avg_pool2d(x, **kw), x.requires_grad_())


def test_avg_pool2d_dtypes(no_fallbacks):
    compare(lambda x: F.avg_pool2d(x, 2, ceil_mode=True), make((1, 2, 5, 5), torch.int64) * 7)
    compare(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), make((1, 2, 7, 7), torch.bfloat16), **BF16)
    compare_grad(lambda x: F.avg_pool2d(x, 3, 2, 1), make((1, 2, 7, 7), torch.bfloat16, requires_grad=True), **BF16)


def test_avg_pool_1d_3d(no_fallbacks):
    compare_grad(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                 make((2, 3, 9), requires_grad=True))
    x = make((1, 2, 6, 7, 5))
    compare_grad(lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x.requires_grad_())
    compare_grad(lambda x: F.avg_pool3d(x, 2, divisor_override=3), x.requires_grad_())


def test_avg_pool2d_non_contiguous(no_fallbacks):
    x = make((2, 3, 8, 9))
    compare_grad(lambda x: F.avg_pool2d(x.transpose(2, 3), 3, 2, 1), x.requires_grad_())


@pytest.mark.parametrize("shape,size", [
    ((2, 3, 8, 8), (4, 4)),  # divisible
    ((2, 3, 7, 10), (3, 4)),  # overlapping windows of varying size
    ((1, 2, 3, 2), (5, 3)),  # larger than the input
    ((1, 2, 5, 7), (1, 1)),  # global (PyTorch takes a mean)
    ((3, 9, 5), (4, None)),  # unbatched, one size kept
], ids=str)
def test_adaptive_avg_pool2d(no_fallbacks, shape, size):
    x = make(shape)
    compare_grad(lambda x: F.adaptive_avg_pool2d(x, size), x.requires_grad_())


def test_adaptive_avg_pool_dtypes_and_dims(no_fallbacks):
    compare_grad(lambda x: F.adaptive_avg_pool2d(x, 3), make((1, 2, 7, 7), torch.bfloat16, requires_grad=True), **BF16)
    compare_grad(lambda x: F.adaptive_avg_pool1d(x, 4), make((2, 3, 9), requires_grad=True))
    compare_grad(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), make((1, 2, 5, 7, 9), requires_grad=True))
    compare_grad(lambda x: F.adaptive_avg_pool2d(x.transpose(2, 3), (3, 2)), make((1, 2, 5, 7), requires_grad=True))


@pytest.mark.parametrize("shape,size", [
    ((2, 3, 7, 10), (3, 4)),  # overlapping windows of varying size
    ((1, 2, 3, 2), (5, 3)),  # larger than the input
    ((3, 9, 5), (4, None)),  # unbatched, one size kept
], ids=str)
def test_adaptive_max_pool2d(no_fallbacks, shape, size):
    x = make(shape)
    compare_grad(lambda x: F.adaptive_max_pool2d(x, size, return_indices=True)[0], x.requires_grad_())
    compare(lambda x: F.adaptive_max_pool2d(x, size, return_indices=True), x)


def test_adaptive_max_pool_ties_nan_dims_dtypes(no_fallbacks):
    x = torch.tensor([[[[1.0, 5.0, 5.0, 0.0], [float("nan"), 2.0, 5.0, float("nan")],
                        [-float("inf"), -float("inf"), 3.0, 3.0], [0.0, 1.0, 3.0, 2.0]]]])
    compare(lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True), x)
    compare(lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True), torch.full((1, 2, 4, 4), -float("inf")))
    compare_grad(lambda x: F.adaptive_max_pool1d(x, 4), make((2, 3, 9), requires_grad=True))
    compare_grad(lambda x: F.adaptive_max_pool3d(x, (2, 3, 4)), make((1, 2, 5, 7, 9), requires_grad=True))
    compare_grad(lambda x: F.adaptive_max_pool2d(x, 3), make((1, 2, 7, 7), torch.bfloat16, requires_grad=True), **BF16)
    compare(lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True), make((0, 2, 4, 4)))
    assert_same_error(lambda x: F.adaptive_max_pool2d(x, 2), make((1, 2, 4, 4), torch.int64))
    assert_same_error(lambda x: F.adaptive_max_pool3d(x, 2), make((1, 2, 4, 4, 4), torch.int64))


FRACTIONAL = [
    ((2, 3, 9, 9), (2, 2), (4, 4)),
    ((2, 3, 10, 7), (3, 2), (5, 4)),
    ((3, 11, 8), (2, 3), (6, 5)),  # unbatched
    ((2, 3, 9, 9), (2, 2), (8, 8)),  # windows overlap: gradients add up
    ((2, 2, 7, 8, 9), (2, 2, 3), (4, 5, 3)),
    ((2, 7, 8, 9), (2, 3, 2), (3, 4, 5)),  # unbatched 3-d
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("shape,kernel,out", FRACTIONAL, ids=str)
def test_fractional_max_pool(no_fallbacks, shape, kernel, out, dtype):
    """Windows start where PyTorch's CPU kernel puts them, computed from the
    samples in the input's dtype (bfloat16's rounding moves windows), with
    the same argmax; the gradient goes to the argmaxes."""
    n = len(kernel)
    fn = F.fractional_max_pool2d if n == 2 else F.fractional_max_pool3d
    x = make(shape, dtype)
    samples = torch.rand(shape[0] if len(shape) == n + 2 else 1, shape[-n - 1], n,
                         generator=torch.Generator().manual_seed(1)).to(dtype)

    def pool(x, samples):
        return fn(x, kernel, output_size=out, return_indices=True, _random_samples=samples)

    compare(pool, x, samples)
    tol = BF16 if dtype == torch.bfloat16 else {}  # CPU rounds each bfloat16 sum, we round once
    compare_grad(lambda x, s: pool(x, s)[0], x.requires_grad_(), samples, **tol)


def test_fractional_max_pool_ties_nan_and_errors(no_fallbacks):
    x = torch.randn(1, 1, 6, 6, generator=torch.Generator().manual_seed(2))
    x[0, 0, 1, 1] = x[0, 0, 2, 2] = float("nan")
    x[0, 0, 4, :] = 5.0
    samples = torch.tensor([[[0.3, 0.8]]])
    compare(lambda x, s: F.fractional_max_pool2d(x, 2, output_size=3, return_indices=True, _random_samples=s),
            x, samples)
    # a sample batch larger than the input's: the first ones serve
    compare(lambda x, s: F.fractional_max_pool2d(x, 2, output_size=3, _random_samples=s), make((2, 3, 7, 7)),
            torch.rand(4, 3, 2, generator=torch.Generator().manual_seed(3)))
    ints = make((1, 2, 6, 6)).long()
    assert_same_error(lambda x: torch.ops.aten.fractional_max_pool2d(x, [2, 2], [3, 3], torch.ones_like(x[:, :, 0, :2])),
                      ints)
    assert_same_error(lambda x, s: F.fractional_max_pool2d(x, 4, output_size=5, _random_samples=s),
                      make((1, 2, 6, 6)), torch.rand(1, 2, 2))
    for samples in (torch.rand(1, 2, 2), torch.rand(1, 3, 3), torch.rand(2), torch.rand(1, 2, 3).double()):
        assert_same_error(lambda x, s: torch.ops.aten.fractional_max_pool3d(x, [2, 2, 2], [2, 2, 2], s),
                          make((2, 2, 6, 6, 6)), samples)


def test_pool_empty_batch(no_fallbacks):
    x = make((0, 2, 4, 4))
    compare(lambda x: F.max_pool2d(x, 2, return_indices=True), x)
    compare(lambda x: F.avg_pool2d(x, 2), x)
    compare(lambda x: F.adaptive_avg_pool2d(x, 3), x)


# (mode, spatial dims, interpolate keyword arguments)
UPSAMPLES = [
    ("nearest", 1, dict(size=7)),
    ("nearest", 2, dict(size=(10, 3))),  # twice, and smaller
    ("nearest", 3, dict(scale_factor=1.7, recompute_scale_factor=False)),
    ("nearest-exact", 1, dict(size=13)),
    ("nearest-exact", 2, dict(scale_factor=0.6)),
    ("nearest-exact", 3, dict(size=(3, 5, 7))),
    ("linear", 1, dict(size=9, align_corners=True)),
    ("linear", 1, dict(scale_factor=0.5, recompute_scale_factor=False)),
    ("bilinear", 2, dict(size=(7, 3))),
    ("bilinear", 2, dict(size=(1, 8), align_corners=True)),
    ("trilinear", 3, dict(size=(4, 6, 9))),
    ("bicubic", 2, dict(size=(9, 4))),  # taps clamped at both edges
    ("bicubic", 2, dict(scale_factor=1.5, align_corners=True)),
    ("bilinear", 2, dict(size=(2, 11), antialias=True)),  # 5 -> 2 widens the filter
    ("bicubic", 2, dict(size=(3, 4), antialias=True, align_corners=True)),
]


@pytest.mark.parametrize("mode,nd,kw", UPSAMPLES, ids=str)
def test_interpolate(no_fallbacks, mode, nd, kw):
    x = make((2, 3) + (5, 6, 4)[:nd])
    compare_grad(lambda x: F.interpolate(x, mode=mode, **kw), x.requires_grad_())


def test_interpolate_dtypes_and_edges(no_fallbacks):
    x = make((1, 2, 5, 6), torch.bfloat16)
    compare_grad(lambda x: F.interpolate(x, size=(7, 9), mode="bilinear"), x.requires_grad_(), **BF16)
    compare(lambda x: F.interpolate(x, size=(4, 9), mode="nearest"), make((1, 2, 5, 6), torch.uint8))
    compare_grad(lambda x: F.interpolate(x, size=(4, 3), mode="bilinear"), make((0, 2, 5, 6), requires_grad=True))
    # a NaN reaches only the outputs whose taps read it
    x = make((1, 1, 4, 4))
    x[0, 0, 1, 2] = float("nan")
    compare(lambda x: F.interpolate(x, size=(8, 8), mode="bilinear"), x)
    compare(lambda x: F.interpolate(x.transpose(2, 3), size=(3, 5), mode="nearest-exact"), x)


def test_interpolate_errors():
    assert_same_error(lambda x: F.interpolate(x, size=(3, 3), mode="bilinear"), make((2, 3, 4)))
    assert_same_error(lambda x: F.interpolate(x, size=3, mode="linear"), make((1, 2, 4), torch.int64))
    assert_same_error(lambda x: F.interpolate(x, size=3, antialias=True, mode="bilinear"), make((1, 2, 4, 4), torch.bfloat16))


@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(no_fallbacks, nd, mode, padding_mode, align_corners):
    if nd == 3 and mode == "bicubic":
        pytest.skip("bicubic is 2-D only")
    x = make((2, 3) + (5, 4, 6)[:nd])
    # points inside and outside [-1, 1], so padding and reflections matter
    g = torch.rand((2,) + (3, 4, 2)[:nd] + (nd,), generator=torch.Generator().manual_seed(nd)) * 2.6 - 1.3

    def fn(x, g):
        return F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    compare_grad(fn, x.requires_grad_(), g.requires_grad_(), rtol=1e-4, atol=1e-4)


def test_grid_sample_edges(no_fallbacks):
    x = make((1, 2, 4, 5), torch.bfloat16)
    g = torch.tensor([[[[-1.0, -1.0], [1.0, 1.0], [0.25, -0.5], [2.0, 0.0]]]]).bfloat16()
    compare(lambda x, g: F.grid_sample(x, g, align_corners=True), x, g, **BF16)
    sample = functools.partial(F.grid_sample, align_corners=False)
    compare_grad(sample, make((0, 2, 4, 5), requires_grad=True), torch.zeros(0, 3, 3, 2, requires_grad=True))
    compare_grad(sample, make((1, 2, 4, 5)), g.float().requires_grad_())
    assert_same_error(lambda x, g: torch.grid_sampler(x, g, 2, 0, False), make((1, 2, 3, 3, 3)), torch.zeros(1, 2, 2, 2, 3))


def test_small_cnn(no_fallbacks):
    torch.manual_seed(0)

    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 8, 3, stride=2, groups=2, bias=False), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(8, 4, 2, stride=2), torch.nn.AvgPool2d(2, ceil_mode=True),
            torch.nn.AdaptiveAvgPool2d((2, 2)), torch.nn.Flatten(), torch.nn.Linear(16, 5))

    cpu, tpu = net(), net().to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    x, target = make((2, 3, 12, 12)), make((2, 5), seed=1)
    loss_cpu = (cpu(x) - target).pow(2).sum()
    loss_tpu = (tpu(x.to("tpu")) - target.to("tpu")).pow(2).sum()
    torch.testing.assert_close(loss_tpu.cpu(), loss_cpu)
    loss_cpu.backward()
    loss_tpu.backward()
    for (name, p), q in zip(cpu.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, msg=lambda m: f"{name}: {m}")
