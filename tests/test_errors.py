"""Bad input raises PyTorch's exception with PyTorch's message, and the
process and every other tensor survive."""
import pytest
import torch

import torchtpu  # noqa: F401


def error_of(fn, device):
    try:
        fn(device)
    except Exception as e:  # noqa: BLE001 - we compare whatever CPU raises
        return e
    return None


# case -> (fn, words the message must contain). The messages are PyTorch's:
# its CPU kernels' or, for shape checks, its meta functions' (the wording
# torch.compile users see), so they may differ from CPU's text.
CASES = {
    "shape_mismatch": (lambda d: torch.ones(3, device=d) + torch.ones(4, device=d), ["3", "4"]),
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


DATA_DEPENDENT = {
    "index_select": (lambda d: torch.ones(3, device=d).index_select(0, torch.tensor([0, 7], device=d)), IndexError),
    "embedding": (lambda d: torch.nn.functional.embedding(torch.tensor([[1, 9]], device=d), torch.ones(4, 2, device=d)),
                  IndexError),
    "gather": (lambda d: torch.ones(3, device=d).gather(0, torch.tensor([4], device=d)), RuntimeError),
    "advanced_index": (lambda d: torch.ones(3, device=d)[torch.tensor([0, 3], device=d)], IndexError),
}


@pytest.mark.parametrize("name", sorted(DATA_DEPENDENT))
def test_data_dependent_index_errors(name):
    fn, kind = DATA_DEPENDENT[name]
    assert isinstance(error_of(fn, "cpu"), kind)
    assert isinstance(error_of(fn, "tpu"), kind)
    torch.testing.assert_close((torch.ones(2, device="tpu") + 1).cpu(), torch.full((2,), 2.0))


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
        op = torch.ops.aten.linalg_eig  # no rule for general eigenproblems: must refuse to fall back
        with pytest.raises(NotImplementedError, match="TORCHTPU_FALLBACK=error"):
            op(torch.eye(2, device="tpu"))
    finally:
        torchtpu._C._set_fallback_mode("warn")
