"""A battery of wrong calls, as a new user makes them: each raises on tpu the
exception the CPU raises, with the CPU's message (its first line), and the
process lives on: a tpu tensor made before the call still reads back and
still computes after it.

Each case is a function of the device. Shapes, dims, dtypes, values, sizes,
indices, aliasing and the parameters of random ops; data checks (an index
out of range, an integer division by zero) raise by the next cut in fused
eager (the suite runs again under TORCHTPU_EAGER=fused). Device mixes have
no CPU counterpart: they are compared with the message PyTorch gives CUDA
tensors mixed with CPU ones, with tpu's name in it; so are the tensor type
names in messages ("torch.tpu.FloatTensor" where the CPU prints
"torch.FloatTensor" and CUDA "torch.cuda.FloatTensor")."""
import re

import pytest
import torch

import torchtpu  # noqa: F401

F = torch.nn.functional


def _t(v, d, dtype=None):
    return torch.tensor(v, device=d, dtype=dtype)


def _ones(*shape, d, dtype=torch.float32):
    return torch.ones(*shape, device=d, dtype=dtype)


def _long(*shape, d):
    return torch.zeros(*shape, device=d, dtype=torch.long)


# Dims out of range: PyTorch's IndexError "Dimension out of range (expected
# to be in range of [-1, 0], but got 5)" from every op that takes a dim.
DIMS = {
    "softmax": lambda d: torch.softmax(_ones(3, d=d), 5),
    "softmax_negative": lambda d: torch.softmax(_ones(2, 3, d=d), -3),
    "log_softmax": lambda d: F.log_softmax(_ones(3, d=d), 1),
    "softmax_0dim": lambda d: torch.softmax(_t(1.0, d), 1),
    "softmax_backward": lambda d: torch.ops.aten._softmax_backward_data(_ones(3, d=d), _ones(3, d=d), 2,
                                                                       torch.float32),
    "log_softmax_backward": lambda d: torch.ops.aten._log_softmax_backward_data(_ones(3, d=d), _ones(3, d=d), -2,
                                                                               torch.float32),
    "sum": lambda d: _ones(2, 3, d=d).sum(2),
    "sum_list": lambda d: _ones(2, 3, d=d).sum((0, 4)),
    "mean": lambda d: _ones(2, 3, d=d).mean(-3),
    "prod": lambda d: _ones(2, 3, d=d).prod(3),
    "amax": lambda d: _ones(2, 3, d=d).amax(2),
    "max_dim": lambda d: _ones(2, 3, d=d).max(2),
    "min_dim": lambda d: _ones(2, 3, d=d).min(-3),
    "argmax": lambda d: _ones(2, 3, d=d).argmax(2),
    "argmin": lambda d: _ones(2, 3, d=d).argmin(-4),
    "var": lambda d: _ones(2, 3, d=d).var(2),
    "std_mean": lambda d: torch.std_mean(_ones(2, 3, d=d), 5),
    "logsumexp": lambda d: _ones(2, 3, d=d).logsumexp(2),
    "norm": lambda d: _ones(2, 3, d=d).norm(dim=2),
    "vector_norm": lambda d: torch.linalg.vector_norm(_ones(2, 3, d=d), dim=3),
    "all": lambda d: _ones(2, 3, d=d).all(2),
    "any": lambda d: _ones(2, 3, d=d).any(-3),
    "count_nonzero": lambda d: _ones(2, 3, d=d).count_nonzero(2),
    "cumsum": lambda d: _ones(3, d=d).cumsum(1),
    "cumprod": lambda d: _ones(3, d=d).cumprod(-2),
    "cummax": lambda d: _ones(3, d=d).cummax(1),
    "cummin": lambda d: _ones(3, d=d).cummin(1),
    "logcumsumexp": lambda d: _ones(3, d=d).logcumsumexp(1),
    "sort": lambda d: _ones(3, d=d).sort(1),
    "sort_0dim": lambda d: _t(1.0, d).sort(2),
    "argsort": lambda d: _ones(2, 3, d=d).argsort(2),
    "topk": lambda d: _ones(3, d=d).topk(1, 1),
    "kthvalue": lambda d: _ones(3, d=d).kthvalue(1, 1),
    "median": lambda d: _ones(3, d=d).median(1),
    "mode": lambda d: _ones(3, d=d).mode(1),
    "gather": lambda d: _ones(3, d=d).gather(1, _long(3, d=d)),
    "scatter": lambda d: _ones(3, d=d).scatter(1, _long(3, d=d), 1.0),
    "scatter_add": lambda d: _ones(3, d=d).scatter_add(-2, _long(3, d=d), _ones(3, d=d)),
    "index_select": lambda d: _ones(3, d=d).index_select(1, _long(1, d=d)),
    "index_add": lambda d: _ones(3, d=d).index_add(1, _long(1, d=d), _ones(1, d=d)),
    "index_fill": lambda d: _ones(3, d=d).index_fill(1, _long(1, d=d), 2.0),
    "index_copy": lambda d: _ones(3, d=d).index_copy(1, _long(1, d=d), _ones(1, d=d)),
    "cat": lambda d: torch.cat([_ones(2, d=d), _ones(2, d=d)], 1),
    "stack": lambda d: torch.stack([_ones(2, d=d), _ones(2, d=d)], 3),
    "flip": lambda d: _ones(2, 3, d=d).flip(2),
    "roll": lambda d: _ones(2, 3, d=d).roll(1, 2),
    "transpose": lambda d: _ones(2, 3, d=d).transpose(0, 2),
    "permute": lambda d: _ones(2, 3, d=d).permute(0, 2),
    "squeeze": lambda d: _ones(2, 3, d=d).squeeze(2),
    "unsqueeze": lambda d: _ones(2, 3, d=d).unsqueeze(4),
    "select": lambda d: _ones(2, 3, d=d).select(2, 0),
    "narrow": lambda d: _ones(2, 3, d=d).narrow(2, 0, 1),
    "split": lambda d: _ones(2, 3, d=d).split(1, 2),
    "chunk": lambda d: _ones(2, 3, d=d).chunk(2, -3),
    "unbind": lambda d: _ones(2, 3, d=d).unbind(2),
    "flatten": lambda d: _ones(2, 3, d=d).flatten(0, 2),
    "movedim": lambda d: _ones(2, 3, d=d).movedim(2, 0),
    "diagonal": lambda d: _ones(2, 3, d=d).diagonal(0, 0, 2),
    "glu": lambda d: F.glu(_ones(2, 4, d=d), 2),
    "normalize": lambda d: F.normalize(_ones(2, 3, d=d), dim=2),
    "cosine_similarity": lambda d: F.cosine_similarity(_ones(2, 3, d=d), _ones(2, 3, d=d), dim=2),
    "cross": lambda d: torch.linalg.cross(_ones(2, 3, d=d), _ones(2, 3, d=d), dim=2),
    "fft": lambda d: torch.fft.fft(_ones(4, d=d), dim=1),
    "renorm": lambda d: _ones(2, 3, d=d).renorm(2, 2, 1.0),
    "repeat_interleave": lambda d: _ones(2, 3, d=d).repeat_interleave(2, 2),
    "unfold": lambda d: _ones(2, 3, d=d).unfold(2, 1, 1),
    "take_along_dim": lambda d: torch.take_along_dim(_ones(3, d=d), _long(3, d=d), 1),
}

# Everything else: the CPU's exception type and message, word for word.
WRONG = {
    # shapes and sizes
    "add_shapes": lambda d: _ones(3, d=d) + _ones(4, d=d),
    "mul_inplace_broadcast": lambda d: _ones(3, d=d).mul_(_ones(2, 3, d=d)),
    "mm_shapes": lambda d: _ones(2, 3, d=d) @ _ones(4, 5, d=d),
    "bmm_rank": lambda d: torch.bmm(_ones(2, 3, d=d), _ones(3, 2, d=d)),
    "linear_width": lambda d: F.linear(_ones(2, 3, d=d), _ones(4, 5, d=d)),
    "view_numel": lambda d: _ones(2, 3, d=d).view(4, 2),
    "view_strides": lambda d: _ones(2, 3, d=d).t().view(6),
    "reshape_two_minus_ones": lambda d: _ones(6, d=d).reshape(-1, -1),
    "expand_smaller": lambda d: _ones(2, 3, d=d).expand(3),
    "expand_mismatch": lambda d: _ones(2, 3, d=d).expand(2, 4),
    "cat_sizes": lambda d: torch.cat([_ones(2, 3, d=d), _ones(3, 4, d=d)], 1),
    "cat_empty_list": lambda d: torch.cat([]),
    "stack_shapes": lambda d: torch.stack([_ones(2, d=d), _ones(3, d=d)]),
    "conv2d_channels": lambda d: F.conv2d(_ones(1, 3, 5, 5, d=d), _ones(4, 2, 3, 3, d=d)),
    "conv2d_kernel_too_big": lambda d: F.conv2d(_ones(1, 1, 2, 2, d=d), _ones(1, 1, 3, 3, d=d)),
    "layer_norm_shape": lambda d: F.layer_norm(_ones(2, 3, d=d), [4]),
    "batch_norm_running_size": lambda d: F.batch_norm(_ones(2, 3, d=d), _ones(4, d=d), _ones(4, d=d)),
    "max_pool_kernel_too_big": lambda d: F.max_pool2d(_ones(1, 1, 2, 2, d=d), 3),
    "where_shapes": lambda d: torch.where(_ones(2, d=d, dtype=torch.bool), _ones(3, d=d), _ones(2, d=d)),
    "masked_fill_mask_shape": lambda d: _ones(2, 3, d=d).masked_fill(_ones(4, d=d, dtype=torch.bool), 0.0),
    "mse_loss_sizes": lambda d: F.mse_loss(_ones(2, 3, d=d), _ones(3, 2, d=d)),
    "embedding_weight_rank": lambda d: F.embedding(_long(2, d=d), _ones(2, 2, 2, d=d)),
    "nll_loss_batch": lambda d: F.nll_loss(_ones(2, 3, d=d), _long(3, d=d)),
    "cross_entropy_batch": lambda d: F.cross_entropy(_ones(2, 3, d=d), _long(4, d=d)),
    "matmul_0dim": lambda d: torch.matmul(_t(1.0, d), _ones(2, d=d)),
    "dot_sizes": lambda d: torch.dot(_ones(2, d=d), _ones(3, d=d)),
    "index_put_shape": lambda d: _ones(4, d=d).index_put_((_long(2, d=d),), _ones(3, d=d)),
    "unflatten_sizes": lambda d: _ones(6, d=d).unflatten(0, (4, 2)),
    "split_sizes_sum": lambda d: _ones(6, d=d).split([2, 3]),
    "repeat_fewer_dims": lambda d: _ones(2, 3, d=d).repeat(2),
    "narrow_past_end": lambda d: _ones(4, d=d).narrow(0, 2, 5),
    "select_index": lambda d: _ones(3, d=d)[5],
    "select_negative_index": lambda d: _ones(3, d=d).select(0, -4),
    "tril_1d": lambda d: _ones(3, d=d).tril(),
    "diag_3d": lambda d: torch.diag(_ones(2, 2, 2, d=d)),
    "flatten_order": lambda d: _ones(2, 3, 4, d=d).flatten(2, 1),
    "topk_k_too_big": lambda d: _ones(3, d=d).topk(4),
    "kthvalue_k_too_big": lambda d: _ones(3, d=d).kthvalue(4),
    "pad_too_long": lambda d: F.pad(_ones(3, d=d), (1, 1, 1, 1)),
    "interpolate_no_size": lambda d: F.interpolate(_ones(1, 1, 4, d=d)),
    "new_empty_negative": lambda d: _ones(2, d=d).new_empty((-1,)),
    "zeros_negative": lambda d: torch.zeros(-2, device=d),
    "arange_step_zero": lambda d: torch.arange(0, 10, 0, device=d),
    "linspace_negative_steps": lambda d: torch.linspace(0, 1, -1, device=d),
    "unfold_step_zero": lambda d: _ones(4, d=d).unfold(0, 2, 0),
    "chunk_zero": lambda d: _ones(4, d=d).chunk(0),
    "split_size_negative": lambda d: _ones(4, d=d).split(-1),
    # dtypes
    "mean_of_long": lambda d: _ones(3, d=d, dtype=torch.long).mean(),
    "bitwise_and_float": lambda d: _ones(3, d=d) & _ones(3, d=d),
    "bitwise_not_float": lambda d: torch.bitwise_not(_ones(3, d=d)),
    "add_inplace_cast": lambda d: _ones(3, d=d, dtype=torch.long).add_(_ones(3, d=d)),
    "mul_inplace_cast": lambda d: _ones(3, d=d, dtype=torch.long).mul_(1.5),
    "add_out_cast": lambda d: torch.add(_ones(3, d=d), 1, out=_ones(3, d=d, dtype=torch.long)),
    "softmax_out_dtype": lambda d: torch.softmax(_ones(3, d=d), 0, out=_ones(3, d=d, dtype=torch.float64)),
    "mm_dtypes": lambda d: torch.mm(_ones(2, 2, d=d), _ones(2, 2, d=d, dtype=torch.float64)),
    "matmul_int_float": lambda d: _ones(2, 2, d=d, dtype=torch.long) @ _ones(2, 2, d=d),
    "index_select_float_index": lambda d: _ones(3, d=d).index_select(0, _ones(1, d=d)),
    "gather_float_index": lambda d: _ones(3, d=d).gather(0, _ones(1, d=d)),
    "embedding_float_index": lambda d: F.embedding(_ones(2, d=d), _ones(3, 2, d=d)),
    "masked_fill_float_mask": lambda d: _ones(3, d=d).masked_fill(_ones(3, d=d), 0.0),
    "where_float_condition": lambda d: torch.where(_ones(3, d=d), _ones(3, d=d), _ones(3, d=d)),
    "nll_loss_float_target": lambda d: F.nll_loss(_ones(2, 3, d=d), _ones(2, d=d)),
    "floor_divide_bool": lambda d: _ones(2, d=d, dtype=torch.bool) // _ones(2, d=d, dtype=torch.bool),
    "sub_bool": lambda d: _ones(2, d=d, dtype=torch.bool) - _ones(2, d=d, dtype=torch.bool),
    "neg_bool": lambda d: -_ones(2, d=d, dtype=torch.bool),
    "argmax_bool": lambda d: _ones(3, d=d, dtype=torch.bool).argmax(0),
    "softmax_int": lambda d: torch.softmax(_ones(3, d=d, dtype=torch.long), 0),
    "abs_bool": lambda d: torch.abs(_ones(2, d=d, dtype=torch.bool)),
    "fill_overflow": lambda d: _ones(3, d=d, dtype=torch.uint8).fill_(1000),
    "full_overflow": lambda d: torch.full((2,), -200, dtype=torch.int8, device=d),
    "pow_int_negative": lambda d: _ones(3, d=d, dtype=torch.long) ** -1,
    "lerp_dtypes": lambda d: torch.lerp(_ones(2, d=d), _ones(2, d=d, dtype=torch.float64), 0.5),
    "atan2_out_cast": lambda d: torch.atan2(_ones(2, d=d, dtype=torch.long), _ones(2, d=d, dtype=torch.long),
                                            out=_ones(2, d=d, dtype=torch.long)),
    "rand_int_dtype": lambda d: torch.rand(3, dtype=torch.long, device=d),
    "randn_int_dtype": lambda d: torch.randn(3, dtype=torch.int32, device=d),
    # values: data the CPU checks
    "floor_divide_by_zero": lambda d: _t([5, 6], d) // _t([0, 1], d),
    "floor_divide_by_zero_scalar": lambda d: _t([5, 6], d) // 0,
    "remainder_by_zero": lambda d: _t([5, 6], d) % _t([1, 0], d),
    "remainder_by_zero_scalar": lambda d: _t([5, 6], d) % 0,
    "fmod_by_zero": lambda d: torch.fmod(_t([5, 6], d), _t([0, 0], d)),
    "fmod_by_zero_scalar": lambda d: torch.fmod(_t([5, 6], d), 0),
    "div_trunc_by_zero": lambda d: torch.div(_t([5, 6], d, torch.int32), _t([3, 0], d, torch.int32),
                                             rounding_mode="trunc"),
    "div_floor_by_zero_inplace": lambda d: _t([5, 6], d).div_(_t([0, 1], d), rounding_mode="floor"),
    "remainder_scalar_by_zero": lambda d: torch.remainder(5, _t([0, 1], d)),
    "floor_divide_uint8_by_zero": lambda d: _t([5], d, torch.uint8) // _t([0], d, torch.uint8),
    "index_select_out_of_range": lambda d: _ones(3, d=d).index_select(0, _t([0, 7], d)),
    "gather_out_of_range": lambda d: _ones(3, d=d).gather(0, _t([4], d)),
    "scatter_out_of_range": lambda d: torch.zeros(5, 3, device=d).scatter(1, _t([[0, 4, 0]], d), 1.0),
    "index_out_of_range": lambda d: _ones(3, d=d)[_t([0, 3], d)],
    "index_put_out_of_range": lambda d: torch.zeros(5, device=d).__setitem__(_t([8], d), 1.0),
    "embedding_out_of_range": lambda d: F.embedding(_t([[1, 9]], d), _ones(4, 2, d=d)),
    "take_out_of_range": lambda d: torch.zeros(5, 3, device=d).take(_t([20], d)),
    "nll_loss_target_out_of_range": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), _t([0, 5], d)),
    "cross_entropy_target_out_of_range": lambda d: F.cross_entropy(torch.zeros(2, 3, device=d), _t([0, -3], d)),
    "multinomial_negative": lambda d: torch.multinomial(_t([-1.0, 1.0], d), 1),
    "multinomial_zero_sum": lambda d: torch.multinomial(_t([0.0, 0.0], d), 1),
    "one_hot_out_of_range": lambda d: F.one_hot(_t([0, 3], d), 3),
    # parameters of random ops
    "normal_negative_std": lambda d: torch.normal(0.0, -1.0, (3,), device=d),
    "normal_nan_std": lambda d: torch.normal(0.0, float("nan"), (3,), device=d),
    "normal__negative_std": lambda d: _ones(3, d=d).normal_(0, -1),
    "normal_tensor_mean_negative_std": lambda d: torch.normal(_ones(2, d=d), -1.0),
    "normal_tensor_std_negative": lambda d: torch.normal(_ones(2, d=d), _t([1.0, -1.0], d)),
    "normal_float_mean_tensor_std_negative": lambda d: torch.normal(0.0, _t([1.0, -1.0], d)),
    "uniform_from_above_to": lambda d: _ones(3, d=d).uniform_(1, 0),
    "exponential_negative_lambda": lambda d: _ones(3, d=d).exponential_(-1),
    "geometric_p_zero": lambda d: _ones(3, d=d).geometric_(0),
    "geometric_p_above_one": lambda d: _ones(3, d=d).geometric_(1.5),
    "cauchy_negative_sigma": lambda d: _ones(3, d=d).cauchy_(0, -1),
    "log_normal_negative_std": lambda d: _ones(3, d=d).log_normal_(0, -1),
    "random_from_above_to": lambda d: _ones(3, d=d).random_(5, 2),
    "randint_low_above_high": lambda d: torch.randint(5, 2, (3,), device=d),
    "bernoulli_p_above_one": lambda d: _ones(3, d=d).bernoulli_(1.5),
    "bernoulli_p_negative": lambda d: torch.bernoulli(_ones(3, d=d), p=-0.5),
    "multinomial_too_many": lambda d: torch.multinomial(_ones(3, d=d), 4),
    "multinomial_zero_samples_rank3": lambda d: torch.multinomial(_ones(1, 1, 3, d=d), 1),
    "dropout_p": lambda d: F.dropout(_ones(3, d=d), 1.5),
    "randperm_negative": lambda d: torch.randperm(-1, device=d),
    # aliasing: writes through overlapping memory
    "expanded_write": lambda d: _ones(1, 3, d=d).expand(4, 3).add_(1),
    "add_inplace_partial_overlap": lambda d: (lambda x: x[1:].add_(x[:-1]))(_ones(4, d=d)),
    "add_out_partial_overlap": lambda d: (lambda x: torch.add(x[:3], 1, out=x[1:]))(_ones(4, d=d)),
    "take_out_is_input": lambda d: (lambda x: torch.take(x, _t([0, 1, 2], d), out=x))(_ones(6, d=d)),
    "cat_out_is_input": lambda d: (lambda x: torch.cat([x, _ones(4, 6, d=d)], out=x))(_ones(0, d=d)),
    "index_select_out_overlaps": lambda d: torch.index_select(_ones(3, 6, d=d), 1, _t([0, 1], d),
                                                              out=_ones(1, 6, d=d).expand(2, 6)),
    "leaf_inplace_requires_grad": lambda d: _ones(3, d=d).requires_grad_().add_(1),
    "backward_twice": lambda d: (lambda y: (y.backward(retain_graph=False), y.backward()))(
        (_ones(3, d=d).requires_grad_() * 2).sum()),
    "backward_non_scalar": lambda d: (_ones(3, d=d).requires_grad_() * 2).backward(),
    "item_of_many": lambda d: _ones(3, d=d).item(),
    "bool_of_many": lambda d: bool(_ones(3, d=d)),
}


def _error_of(fn, device):
    try:
        fn(device)
        if device == "tpu":
            torch.tpu.synchronize()  # fused eager raises a data check's error at the next cut
    except Exception as e:  # noqa: BLE001 - compared with what the CPU raises
        return e
    return None


def _first_line(e):
    return str(e).splitlines()[0] if str(e) else ""


@pytest.fixture(scope="module")
def live():
    return torch.arange(6.0).to("tpu")


def _assert_live(live):
    """The tpu tensor made before the wrong call reads back and computes."""
    torch.testing.assert_close(live.cpu(), torch.arange(6.0))
    torch.testing.assert_close((live * 2 + 1).sum().cpu(), torch.tensor(36.0))


def _as_tpu(message):
    """The CPU's message with the tensor type names PyTorch gives a CUDA
    tensor in it ("torch.cuda.FloatTensor"), with tpu's name."""
    return re.sub(r"\btorch\.(\w+Tensor)\b", r"torch.tpu.\1", message)


def _assert_as_cpu(fn, live):
    want = _error_of(fn, "cpu")
    assert want is not None, "the CPU takes this call"
    got = _error_of(fn, "tpu")
    assert got is not None, f"no error on tpu (the CPU's: {type(want).__name__}: {_first_line(want)})"
    assert (type(got), _first_line(got)) == (type(want), _as_tpu(_first_line(want)))
    _assert_live(live)


@pytest.mark.parametrize("name", sorted(DIMS))
def test_dim_out_of_range(name, live):
    fn = DIMS[name]
    assert "Dimension out of range" in _first_line(_error_of(fn, "cpu"))
    _assert_as_cpu(fn, live)


# one_hot is a CompositeImplicitAutograd op: a tpu kernel for it would hide
# it from DTensor, FakeTensor and functionalization (test_dispatch's audit),
# and its composite leaves the class check to scatter's index check on
# devices other than the CPU. Strict, so that a fix shows.
KNOWN_GAPS = {"one_hot_out_of_range": "one_hot's composite checks the classes as scatter's index, not as one_hot"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[n]))
                                  if n in KNOWN_GAPS else n for n in sorted(WRONG)])
def test_wrong_call(name, live):
    _assert_as_cpu(WRONG[name], live)


DEVICES = {
    "add": (lambda: _ones(3, d="tpu") + _ones(3, d="cpu"), "tpu:0 and cpu"),
    "mm": (lambda: torch.mm(_ones(2, 2, d="tpu"), _ones(2, 2, d="cpu")), "tpu:0 and cpu"),
    "index_select": (lambda: _ones(3, d="cpu").index_select(0, _long(1, d="tpu")), "tpu:0 and cpu"),
    "cat": (lambda: torch.cat([_ones(2, d="tpu"), _ones(2, d="cpu")]), "tpu:0 and cpu"),
}


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_device_mix(name, live):
    """PyTorch's message for a CUDA tensor mixed with a CPU one, with tpu's
    name: there is no CPU counterpart to compare with."""
    fn, devices = DEVICES[name]
    with pytest.raises(RuntimeError, match=f"Expected all tensors to be on the same device, but found at least "
                                           f"two devices, {devices}!"):
        fn()
    _assert_live(live)


def test_battery_size():
    assert len(DIMS) + len(WRONG) - len(KNOWN_GAPS) + len(DEVICES) >= 100


def test_compiled_dim_out_of_range():
    """Dynamo's meta function of softmax lets the dim through: the rule's
    dim check (tpu_lower_wrap_dim) raises PyTorch's IndexError, where XLA
    failed to compile before."""
    f = torch.compile(lambda x: torch.softmax(x, 5) * 2, backend="tpu")
    with pytest.raises(IndexError, match=r"^Dimension out of range \(expected to be in range of \[-1, 0\], "
                                         r"but got 5\)$"):
        f(torch.ones(3, device="tpu"))


def test_compiled_integer_division_by_zero(live):
    f = torch.compile(lambda a, b: (a // b) + (a % b), backend="tpu")
    a = torch.tensor([5, 6], device="tpu")
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        f(a, torch.tensor([0, 1], device="tpu"))
    torch.testing.assert_close(f(a, torch.tensor([2, 4], device="tpu")).cpu(), torch.tensor([3, 3]))
    _assert_live(live)


def test_float_division_by_zero_still_divides():
    """Only integer division checks its divisor: floats give inf and NaN."""
    a = torch.tensor([1.0, -1.0, 0.0])
    b = torch.zeros(3)
    for fn in (lambda x, y: x // y, lambda x, y: x % y, torch.fmod, lambda x, y: torch.div(x, y, rounding_mode="trunc")):
        torch.testing.assert_close(fn(a.to("tpu"), b.to("tpu")).cpu(), fn(a, b), equal_nan=True)
    torch.testing.assert_close((torch.tensor([5, 6], device="tpu") // 2).cpu(), torch.tensor([2, 3]))
