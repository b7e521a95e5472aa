"""Bad input raises PyTorch's exception with PyTorch's message, and the
process and every other tensor survive."""
import pytest
import torch

import torchtpu  # noqa: F401


def error_of(fn, device):
    try:
        fn(device)
        if device == "tpu":
            torch.tpu.synchronize()  # fused eager raises a data check's error at the next cut
    except Exception as e:  # noqa: BLE001 - we compare whatever CPU raises
        return e
    return None


# case -> (fn, words the message must contain). The messages are PyTorch's:
# its CPU kernels' where torchtpu makes the check (broadcasting, the cases
# below), else its meta functions' (the wording torch.compile users see),
# which may differ from CPU's text.
CASES = {
    # TensorIterator's broadcast message (the refs' meta functions word it otherwise)
    "shape_mismatch": (lambda d: torch.ones(3, device=d) + torch.ones(4, device=d),
                       ["The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"]),
    "where_broadcast": (lambda d: torch.where(torch.ones(2, 3, dtype=torch.bool, device=d), torch.ones(3, device=d),
                                              torch.ones(4, 1, device=d)),
                        ["The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0"]),
    "cat_ranks": (lambda d: torch.cat([torch.ones(0, device=d), torch.ones(2, 3, device=d), torch.ones(2, 3, 4, device=d)]),
                  ["Tensors must have same number of dimensions: got 2 and 3"]),
    "cat_sizes": (lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(3, 4, device=d)], dim=-1),
                  ["Sizes of tensors must match except in dimension 1. Expected size 2 but got size 3 for tensor "
                   "number 1 in the list."]),
    "masked_scatter_mask": (lambda d: torch.ones(3, device=d).masked_scatter(torch.ones(3, device=d),
                                                                            torch.ones(3, device=d)),
                            ["masked_scatter_ only supports boolean masks, but got mask with dtype Float"]),
    "mean_of_long": (lambda d: torch.ones(3, 2, dtype=torch.long, device=d).mean(1),
                     ["Input dtype must be either a floating point or complex dtype. Got: Long"]),
    "mean_to_long": (lambda d: torch.ones(3, device=d).mean(dtype=torch.long),
                     ["Optional dtype must be either a floating point or complex dtype. Got: Long"]),
    # out= dtypes: structured kernels and TensorIterator's same-dtype ones
    # take only the functional op's dtype (the refs' meta functions cast)
    "softmax_out_dtype": (lambda d: torch.softmax(torch.ones(3, device=d), 0, out=torch.empty(3, dtype=torch.float64,
                                                                                            device=d)),
                          ["Expected out tensor to have dtype float, but got double instead"]),
    "neg_out_dtype": (lambda d: torch.neg(torch.ones(3, device=d), out=torch.empty(3, dtype=torch.float64, device=d)),
                      ["Found dtype Double but expected Float"]),
    "renorm_out_dtype": (lambda d: torch.renorm(torch.ones(3, 3, device=d), 2, 0, 1.0,
                                                out=torch.empty(3, 3, dtype=torch.float64, device=d)),
                         ["Expected out tensor to have dtype float, but got double instead"]),
    "all_out_dtype": (lambda d: torch.all(torch.ones(3, device=d), 0, out=torch.empty((), dtype=torch.float64,
                                                                                   device=d)),
                      ["all only supports bool tensor for result, got: Double"]),
    "amax_out_dtype": (lambda d: torch.amax(torch.ones(3, device=d), 0, out=torch.empty((), dtype=torch.float64,
                                                                                     device=d)),
                       ["Expected the dtype for input and out to match, but got Float for input's dtype and Double"]),
    "nonzero_out_dtype": (lambda d: torch.nonzero(torch.ones(3, device=d), out=torch.empty(0, dtype=torch.float64,
                                                                                          device=d)),
                          ["nonzero: Expected out tensor to have scalar type Long"]),
    # out= aliasing: these CPU kernels check before resizing
    "index_select_out_overlaps_itself": (lambda d: torch.index_select(
        torch.ones(3, 6, device=d), 1, torch.tensor([0, 1], device=d), out=torch.ones(1, 6, device=d).expand(2, 6)),
        ["more than one element of the written-to tensor refers to a single memory location"]),
    "take_out_is_input": (lambda d: (lambda x: torch.take(x, torch.tensor([0, 1, 2], device=d), out=x))(
        torch.ones(6, device=d)), ["some elements of the input tensor and the written-to tensor"]),
    "masked_select_out_is_input": (lambda d: (lambda x: torch.masked_select(
        x, torch.ones(6, dtype=torch.bool, device=d), out=x))(torch.ones(6, device=d)),
        ["some elements of the input tensor and the written-to tensor"]),
    "kthvalue_out_is_input": (lambda d: (lambda x: torch.kthvalue(
        x, 5, out=(x, torch.empty((), dtype=torch.long, device=d))))(torch.ones(10, device=d)),
        ["some elements of the input tensor and the written-to tensor"]),
    "cat_out_is_input": (lambda d: (lambda x: torch.cat([x, torch.ones(4, 6, device=d)], out=x))(
        torch.ones(0, device=d)), ["some elements of the input tensor and the written-to tensor"]),
    "inplace_broadcast_to_smaller": (lambda d: torch.ones(3, device=d).add_(torch.ones(2, 3, device=d)),
                                     ["3", "2"]),
    "matmul_shapes": (lambda d: torch.ones(2, 3, device=d) @ torch.ones(4, 5, device=d), ["3", "4"]),
    "bmm_batch": (lambda d: torch.bmm(torch.ones(2, 3, 4, device=d), torch.ones(3, 4, 5, device=d)), ["2", "3"]),
    "select_out_of_range": (lambda d: torch.ones(3, device=d)[5], ["5", "3"]),
    "invalid_view": (lambda d: torch.ones(2, 3, device=d).t().view(6), ["view"]),
    "view_wrong_numel": (lambda d: torch.ones(2, 3, device=d).view(4, 2), ["[4, 2]", "6"]),
    "inplace_dtype_cannot_cast": (lambda d: torch.ones(3, dtype=torch.int64, device=d).add_(1.5),
                                  ["float"]),
    # Checks PyTorch's meta functions miss or make with another exception
    # (mul_, addcmul_ and addcdiv_ truncate, bitwise ops take floats, fill_
    # wraps around, cat of a 0-dim tensor fails inside the meta function);
    # torchtpu makes the CPU kernels' checks.
    "inplace_mul_cannot_cast": (lambda d: torch.ones(3, dtype=torch.int64, device=d).mul_(1.5),
                                ["result type float can't be cast", "long"]),
    "inplace_add_cannot_cast": (lambda d: torch.ones(3, dtype=torch.int64, device=d).add_(torch.ones(3, device=d)),
                                ["result type Float can't be cast to the desired output type Long"]),
    "add_out_cannot_cast": (lambda d: torch.add(torch.ones(3, device=d), 1, out=torch.ones(3, dtype=torch.int64,
                                                                                         device=d)),
                            ["result type Float can't be cast to the desired output type Long"]),
    "inplace_addcmul_cannot_cast": (lambda d: torch.ones(3, dtype=torch.int64, device=d).addcmul_(
        torch.ones(3, device=d), torch.ones(3, device=d)), ["result type float can't be cast", "long"]),
    "bitwise_on_float": (lambda d: torch.ones(3, device=d) & torch.ones(3, device=d),
                         ['"bitwise_and_cpu" not implemented for \'Float\'']),
    "bitwise_not_on_float": (lambda d: torch.bitwise_not(torch.ones(3, device=d)), ["bitwise_not", "Float"]),
    "fill_overflow": (lambda d: torch.zeros(3, dtype=torch.uint8, device=d).fill_(1000),
                      ["value cannot be converted to type uint8_t without overflow"]),
    "masked_fill_overflow": (lambda d: torch.zeros(3, dtype=torch.float16, device=d).masked_fill(
        torch.ones(3, dtype=torch.bool, device=d), -1e30), ["c10::Half without overflow"]),
    "full_overflow": (lambda d: torch.full((2,), -200, dtype=torch.int8, device=d), ["int8_t without overflow"]),
    # An in-place op PyTorch writes as its out= form: self is not resized.
    "inplace_out_form_keeps_shape": (lambda d: torch.ones(5, 1, device=d).ldexp_(torch.ones(5, device=d)),
                                     ["output with shape [5, 1] doesn't match the broadcast shape [5, 5]"]),
    "cat_zero_dim": (lambda d: torch.cat([torch.ones(2, device=d), torch.tensor(1.0, device=d)]),
                     ["zero-dimensional tensor (at position 1) cannot be concatenated"]),
    "amax_zero_size_dim": (lambda d: torch.amax(torch.ones(2, 0, device=d), dim=-1),
                           ["amax(): Expected reduction dim -1 to have non-zero size."]),
    "amin_empty_all_dims": (lambda d: torch.amin(torch.ones(0, 3, device=d)), ["reduction dim to be specified"]),
    "embedding_weight_rank": (lambda d: torch.nn.functional.embedding(torch.tensor([0], device=d),
                                                                      torch.ones(2, 2, 2, device=d)), ["'weight' must be 2-D"]),
    "cat_dims": (lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)]), ["3", "4"]),
    "expand_write": (lambda d: torch.ones(1, 3, device=d).expand(4, 3).add_(1), ["single memory location"]),
    "reshape_negative": (lambda d: torch.ones(6, device=d).reshape(-1, -1), ["one dimension"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_error_as_cpu(name):
    fn, words = CASES[name]
    cpu_err = error_of(fn, "cpu")
    assert cpu_err is not None, "the case must fail on CPU"
    keep = torch.arange(5.0, device="tpu")
    tpu_err = error_of(fn, "tpu")
    assert tpu_err is not None, f"{name}: no error on tpu"
    assert type(tpu_err) is type(cpu_err)
    msg = str(tpu_err)
    assert "internal" not in msg
    for w in words:
        assert w.lower() in msg.lower(), f"{name}: {w!r} not in {msg!r}"
    # The process and other tensors are intact.
    torch.testing.assert_close(keep.cpu(), torch.arange(5.0))
    torch.testing.assert_close((keep * 2).cpu(), torch.arange(5.0) * 2)


def _t(v, d):
    return torch.tensor(v, device=d)


# Data-dependent errors: tpu reads back the check's flag and the values its
# message reports (the first offending index in row-major order, the dim and
# its size), so the message is the CPU kernel's, word for word.
DATA_DEPENDENT = {
    "index_select": lambda d: torch.ones(3, device=d).index_select(0, _t([0, 7], d)),
    "embedding": lambda d: torch.nn.functional.embedding(_t([[1, 9]], d), torch.ones(4, 2, device=d)),
    "gather": lambda d: torch.ones(3, device=d).gather(0, _t([4], d)),
    "gather_second_bad_of_two": lambda d: torch.zeros(5, 3, device=d).gather(0, _t([[0, 1, 2], [3, 8, 9]], d)),
    "gather_negative_int32": lambda d: torch.zeros(5, 3, device=d).gather(1, _t([[-1, 0, 0]], d).int()),
    "scatter": lambda d: torch.zeros(5, 3, device=d).scatter(1, _t([[0, 4, 0]], d), 1.0),
    "scatter_add": lambda d: torch.zeros(5, 3, device=d).scatter_add(0, _t([[0, 9, 0]], d), torch.ones(1, 3, device=d)),
    "index_add": lambda d: torch.zeros(5, 3, device=d).index_add(0, _t([6], d), torch.ones(1, 3, device=d)),
    "index_copy": lambda d: torch.zeros(5, 3, device=d).index_copy(0, _t([6], d), torch.ones(1, 3, device=d)),
    "index_fill_negative": lambda d: torch.zeros(5, 3, device=d).index_fill(0, _t([-6], d), 1.0),
    "advanced_index": lambda d: torch.ones(3, device=d)[_t([0, 3], d)],
    "advanced_index_negative": lambda d: torch.ones(5, device=d)[_t([-6], d)],
    "advanced_index_second_tensor": lambda d: torch.zeros(5, 3, device=d)[_t([1], d), _t([5], d)],
    "advanced_index_after_slice": lambda d: torch.zeros(5, 3, device=d)[:, _t([3], d)],
    "advanced_index_2d": lambda d: torch.zeros(5, 3, device=d)[_t([[0, 1], [2, 11]], d)],
    "index_put": lambda d: torch.zeros(5, 3, device=d).index_put((_t([1], d), _t([-4], d)), _t(1.0, d)),
    "setitem": lambda d: torch.zeros(5, device=d).__setitem__(_t([8], d), 1.0),
    "take": lambda d: torch.zeros(5, 3, device=d).take(_t([20], d)),
    "put_negative": lambda d: torch.zeros(5, 3, device=d).put(_t([-16], d), torch.ones(1, device=d)),
    "nll_loss_target": lambda d: torch.nn.functional.nll_loss(torch.zeros(2, 3, device=d), _t([0, 5], d)),
    "nll_loss_negative_target": lambda d: torch.nn.functional.nll_loss(torch.zeros(2, 3, device=d), _t([0, -3], d)),
    "cross_entropy_2d_target": lambda d: torch.nn.functional.cross_entropy(torch.zeros(2, 3, 2, 2, device=d),
                                                                           _t([[[0, 5], [0, 0]]] * 2, d)),
    "multi_margin_target": lambda d: torch.nn.functional.multi_margin_loss(torch.zeros(2, 3, device=d), _t([0, 5], d)),
}


def assert_cpu_error(fn):
    """fn raises on tpu the CPU's exception type with the CPU's first line."""
    cpu_err, tpu_err = error_of(fn, "cpu"), error_of(fn, "tpu")
    assert cpu_err is not None and type(tpu_err) is type(cpu_err), (cpu_err, tpu_err)
    assert str(tpu_err).splitlines()[0] == str(cpu_err).splitlines()[0]


@pytest.mark.parametrize("name", sorted(DATA_DEPENDENT))
def test_data_dependent_errors_as_cpu(name):
    assert_cpu_error(DATA_DEPENDENT[name])
    torch.testing.assert_close((torch.ones(2, device="tpu") + 1).cpu(), torch.full((2,), 2.0))


def test_empty_indices_pass_the_checks():
    x = torch.zeros(5, 3, device="tpu")
    empty = torch.zeros(0, 3, dtype=torch.long, device="tpu")
    assert x.gather(0, empty).shape == (0, 3)
    assert x.scatter_add(0, empty, torch.ones(0, 3, device="tpu")).sum().item() == 0
    assert x[torch.zeros(0, dtype=torch.long, device="tpu")].shape == (0, 3)
    assert x.take(torch.zeros(0, dtype=torch.long, device="tpu")).shape == (0,)
    assert torch.nn.functional.nll_loss(torch.zeros(0, 3, device="tpu"), torch.zeros(0, dtype=torch.long,
                                                                                        device="tpu"),
                                        reduction="sum").item() == 0


def test_compiled_graph_reports_the_failing_index():
    """Checks of one kind share a flag in a compiled graph; the values
    reported are the first failing check's."""
    def f(a, b, i, j):
        return a.gather(0, i).sum() + b.gather(1, j).sum()

    a, b = torch.zeros(5, 3, device="tpu"), torch.zeros(4, 6, device="tpu")
    cf = torch.compile(f, backend="tpu")
    good = _t([[0, 1, 2]], "tpu")
    with pytest.raises(RuntimeError, match="^index 9 is out of bounds for dimension 1 with size 6$"):
        cf(a, b, good, _t([[0, 9]], "tpu"))
    with pytest.raises(RuntimeError, match="^index 7 is out of bounds for dimension 0 with size 5$"):
        cf(a, b, _t([[0, 1, 7]], "tpu"), _t([[0, 9]], "tpu"))
    assert cf(a, b, good, _t([[0, 5]], "tpu")).item() == 0


def _o(*shape, d):
    return torch.ones(*shape, device=d)


# Shape and dtype mistakes of the matmul family (a Linear of the wrong width
# is the most common): the CPU kernels' messages, not the meta functions'.
MATMUL = {
    "mm": lambda d: _o(2, 3, d=d) @ _o(2, 3, d=d),
    "mm_vector": lambda d: torch.mm(_o(3, d=d), _o(3, 2, d=d)),
    "mm_dtype": lambda d: torch.mm(_o(2, 2, d=d), _o(2, 2, d=d).double()),
    "addmm_bias": lambda d: torch.addmm(_o(3, 3, d=d), _o(2, 3, d=d), _o(3, 2, d=d)),
    "addmm_3d_bias": lambda d: torch.addmm(_o(1, 2, 2, d=d), _o(2, 2, d=d), _o(2, 2, d=d)),
    "linear": lambda d: torch.nn.Linear(5, 4).to(d)(_o(2, 3, d=d)),
    "linear_3d": lambda d: torch.nn.functional.linear(_o(2, 2, 3, d=d), _o(4, 5, d=d)),
    "linear_bias": lambda d: torch.nn.functional.linear(_o(2, 3, d=d), _o(4, 3, d=d), _o(5, d=d)),
    "bmm_dtype": lambda d: torch.bmm(_o(2, 3, 3, d=d), _o(2, 3, 3, d=d).half()),
    "bmm_batch": lambda d: torch.bmm(_o(2, 2, 3, d=d), _o(3, 3, 3, d=d)),
    "baddbmm_dtype": lambda d: torch.baddbmm(_o(2, 3, 3, d=d), _o(2, 3, 3, d=d), _o(2, 3, 3, d=d).half()),
    "mv": lambda d: torch.mv(_o(2, 3, d=d), _o(2, d=d)),
    "mv_vector": lambda d: torch.mv(_o(3, d=d), _o(3, d=d)),
    "matmul_matrix_vector": lambda d: _o(2, 3, d=d) @ _o(2, d=d),
    "addmv_input": lambda d: torch.addmv(_o(3, d=d), _o(2, 3, d=d), _o(3, d=d)),
    "dot": lambda d: torch.dot(_o(3, d=d), _o(2, d=d)),
    "dot_dtype": lambda d: torch.dot(_o(3, d=d), _o(3, d=d).double()),
    "vdot_rank": lambda d: torch.vdot(_o(3, 1, d=d), _o(3, d=d)),
    "addr_vector": lambda d: torch.addr(_o(2, 2, d=d), _o(2, 1, d=d), _o(2, d=d)),
    "addr_input": lambda d: torch.addr(_o(3, 2, d=d), _o(2, d=d), _o(2, d=d)),
    "argmax_empty": lambda d: torch.empty(0, device=d).argmax(),
    "argmin_empty_dim": lambda d: torch.empty(2, 0, device=d).argmin(1),
    "argmax_scalar_dim": lambda d: torch.tensor(1.0, device=d).argmax(2),
    # a mask that does not broadcast to the scores: the math path's error, not an internal one
    "sdpa_mask": lambda d: torch.nn.functional.scaled_dot_product_attention(
        _o(1, 2, 4, 8, d=d), _o(1, 2, 4, 8, d=d), _o(1, 2, 4, 8, d=d), attn_mask=_o(3, 3, d=d)),
    "sdpa_bool_mask": lambda d: torch.nn.functional.scaled_dot_product_attention(
        _o(1, 2, 4, 8, d=d), _o(1, 2, 4, 8, d=d), _o(1, 2, 4, 8, d=d), attn_mask=_o(3, 3, d=d).bool()),
}


@pytest.mark.parametrize("name", sorted(MATMUL))
def test_matmul_family_errors_as_cpu(name):
    assert_cpu_error(MATMUL[name])


def test_addr_and_mv_still_compute():
    v1, v2, m = torch.randn(3), torch.randn(4), torch.randn(3, 4)
    want = torch.addr(m, v1, v2, beta=0.5, alpha=2.0)
    got = torch.addr(m.to("tpu"), v1.to("tpu"), v2.to("tpu"), beta=0.5, alpha=2.0)
    torch.testing.assert_close(got.cpu(), want)
    out = torch.empty(3, 4, device="tpu")
    torch.addr(m.to("tpu"), v1.to("tpu"), v2.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.addr(m, v1, v2))
    torch.testing.assert_close(torch.mv(m.to("tpu"), v2.to("tpu")).cpu(), torch.mv(m, v2))


def test_failed_in_place_write_leaves_target_intact():
    x = torch.arange(4.0, device="tpu")
    with pytest.raises(IndexError):
        x.index_put_((torch.tensor([1, 9], device="tpu"),), torch.tensor([5.0, 6.0], device="tpu"))
    torch.testing.assert_close(x.cpu(), torch.arange(4.0))
    with pytest.raises(RuntimeError):
        x.add_(torch.ones(5, device="tpu"))
    torch.testing.assert_close(x.cpu(), torch.arange(4.0))


def test_mixed_devices_error():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="tpu") + torch.ones(3)


def test_fallback_error_mode():
    torchtpu._C._set_fallback_mode("error")
    try:
        op = torch.ops.aten._compute_linear_combination  # an internal op without a rule: must refuse to fall back
        with pytest.raises(NotImplementedError, match="TORCHTPU_FALLBACK=error"):
            op(torch.eye(2, device="tpu"), torch.ones(2, 2, device="tpu"))
    finally:
        torchtpu._C._set_fallback_mode("warn")


# The class-index losses' meta functions (PyTorch's decompositions) check less
# than the CPU kernels, in another order and other words; torchtpu's make the
# kernels' checks. Each case: the same exception and message as the CPU, or
# the same result where the CPU takes it (uint8 targets, a [C, 1] weight).
_L, _B = torch.long, torch.uint8
_NLL = torch.ops.aten.nll_loss_forward
_NLL2D = torch.ops.aten.nll_loss2d_forward
_MULTI_MARGIN = torch.ops.aten.multi_margin_loss
LOSS_CASES = {
    "nll_input_rank": (_NLL, ((2, 3, 4), (2,), _L, None)),
    "nll_target_rank": (_NLL, ((2, 3), (2, 2), _L, None)),
    "nll_float_target": (_NLL, ((2, 3), (3,), torch.float32, None)),
    "nll_int_target": (_NLL, ((2, 3), (2,), torch.int32, None)),
    "nll_bool_target": (_NLL, ((2, 3), (2,), torch.bool, None)),
    "nll_byte_target": (_NLL, ((2, 3), (2,), _B, None)),
    "nll_size_mismatch": (_NLL, ((2, 3), (3,), _L, None)),
    "nll_1d_target_of_one": (_NLL, ((3,), (1,), _L, None)),
    "nll_1d_target_of_two": (_NLL, ((3,), (2,), _L, None)),
    "nll_0d_target_of_batch": (_NLL, ((2, 3), (), _L, None)),
    "nll_weight_size": (_NLL, ((2, 3), (2,), _L, torch.ones(7))),
    "nll_weight_rank": (_NLL, ((2, 3), (2,), _L, torch.ones(3, 1))),
    "nll_weight_dtype": (_NLL, ((2, 3), (2,), _L, torch.ones(3, dtype=torch.float64))),
    "nll_weight_dtype_empty": (_NLL, ((0, 0), (0,), _L, torch.ones(0, dtype=torch.float16))),
    "nll_integer_input": (_NLL, ((2, 3), (2,), _L, None, torch.int64)),
    "nll2d_target_rank": (_NLL2D, ((2, 3, 4, 4), (2, 4), _L, None)),
    "nll2d_input_rank": (_NLL2D, ((2, 3, 4), (2, 4, 4), _L, None)),
    "nll2d_size_mismatch": (_NLL2D, ((2, 3, 4, 4), (2, 4, 5), _L, None)),
    "nll2d_byte_target": (_NLL2D, ((2, 3, 4, 4), (2, 4, 4), _B, None)),
    "nll2d_weight_size": (_NLL2D, ((2, 3, 4, 4), (2, 4, 4), _L, torch.ones(7))),
    "nll2d_weight_of_c_by_1": (_NLL2D, ((2, 3, 4, 4), (2, 4, 4), _L, torch.ones(3, 1))),
    "nll2d_weight_dtype": (_NLL2D, ((2, 3, 4, 4), (2, 4, 4), _B, torch.ones(3, dtype=torch.float16))),
    "multi_margin_target_size": (_MULTI_MARGIN, ((5, 10), (3,), _L, None)),
    "multi_margin_empty_classes": (_MULTI_MARGIN, ((5, 0), (5,), _L, None)),
    "multi_margin_weight_size": (_MULTI_MARGIN, ((5, 10), (5,), _L, torch.ones(10, 1))),
    "multi_margin_weight_dtype": (_MULTI_MARGIN, ((5, 10), (5,), _L, torch.ones(10, dtype=torch.float64))),
    "multi_margin_0d_input_1d_target": (_MULTI_MARGIN, ((), (1,), _L, None)),
    "multi_margin_batch_of_one_0d_target": (_MULTI_MARGIN, ((1, 4), (), _L, None)),
}


def _loss_outcome(op, shapes, device, reduction):
    x_shape, t_shape, t_dtype, weight, *x_dtype = shapes
    torch.manual_seed(0)
    x = torch.randn(x_shape).to(*x_dtype).to(device)
    t = torch.zeros(t_shape, dtype=t_dtype, device=device)
    w = None if weight is None else weight.to(device)
    try:
        if op is _MULTI_MARGIN:
            out = op(x, t, 1, 1.0, w, reduction)
        else:
            out = op(x, t, w, reduction, -100)
    except Exception as e:  # noqa: BLE001 - compared with what the CPU raises
        return type(e), str(e)
    return tuple(o.cpu() for o in (out if isinstance(out, tuple) else (out,)))


@pytest.mark.parametrize("reduction", [0, 1])
@pytest.mark.parametrize("name", sorted(LOSS_CASES))
def test_class_loss_checks_as_cpu(name, reduction):
    op, shapes = LOSS_CASES[name]
    want = _loss_outcome(op, shapes, "cpu", reduction)
    got = _loss_outcome(op, shapes, "tpu", reduction)
    if isinstance(want[0], type):
        assert got == want
    else:
        assert not isinstance(got[0], type), got
        torch.testing.assert_close(got, want)


def test_max_pool2d_rank_message():
    """PyTorch's meta function reads the third-last size before the rank check."""
    fn = lambda d: torch.nn.functional.max_pool2d(torch.ones(3, 4, device=d), 2)  # noqa: E731
    want, got = error_of(fn, "cpu"), error_of(fn, "tpu")
    assert type(got) is type(want) and str(got) == str(want)


@pytest.mark.parametrize("shape", [(4,), ()])
def test_multilabel_margin_one_sample_unreduced_is_0_dim(shape):
    x = torch.randn(shape)
    t = torch.zeros(shape, dtype=torch.long)
    want = torch.nn.functional.multilabel_margin_loss(x, t, reduction="none")
    got = torch.nn.functional.multilabel_margin_loss(x.to("tpu"), t.to("tpu"), reduction="none")
    assert got.shape == want.shape == ()
    torch.testing.assert_close(got.cpu(), want)
    out = torch.empty(3, device="tpu")
    torch.ops.aten.multilabel_margin_loss_forward.output(x.to("tpu"), t.to("tpu"), 0, output=out,
                                                         is_target=torch.empty(0, device="tpu"))
    assert out.shape == ()


def test_out_dtype_safe_casts_still_taken():
    """TensorIterator's out= takes any dtype the result casts to safely."""
    x = torch.arange(4.0)
    for fn in (lambda t, out: torch.add(t, 1, out=out), lambda t, out: torch.exp(t, out=out),
               lambda t, out: torch.cumsum(t, 0, out=out)):
        want = fn(x, torch.empty(4, dtype=torch.float64))
        got = fn(x.to("tpu"), torch.empty(4, dtype=torch.float64, device="tpu"))
        assert want.dtype == got.dtype == torch.float64
        torch.testing.assert_close(got.cpu(), want)


def test_uploading_a_dtype_tpu_does_not_hold_raises():
    """A host tensor of a dtype the device has no buffers of (ComplexHalf,
    Float8_e8m0fnu, Bits8), copied to tpu, and torch.complex of two half
    tensors (its CPU fallback's ComplexHalf result) raise eager's message:
    the upload handed PJRT an invalid type and XLA aborted the process. In a
    child process, so that a regression fails this test, not the run."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import warnings
        import torch, torchtpu
        warnings.simplefilter("ignore")  # ComplexHalf is experimental
        cases = [lambda: torch.rand(2, dtype=torch.complex32).to("tpu"),
                 lambda: torch.zeros(2).to(torch.float8_e8m0fnu).to("tpu"),
                 lambda: torch.zeros(2, dtype=torch.uint8).view(torch.bits8).to("tpu"),
                 lambda: torch.complex(torch.rand(2, device="tpu").half(), torch.rand(2, device="tpu").half())]
        for case in cases:
            try:
                case()
                print("no error")
            except RuntimeError as e:
                print(str(e).splitlines()[0])
        print((torch.ones(2, device="tpu") * 2).cpu().tolist())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[:4] == ["tpu does not support tensors of dtype " + t
                         for t in ("ComplexHalf", "Float8_e8m0fnu", "Bits8", "ComplexHalf")]
    assert lines[4] == "[2.0, 2.0]"
