"""How an op reaches its rule. The common signatures (pointwise ops and their
in-place and out= forms, addmm, softmax, the reductions, layer norm, the LSTM
cell, the loss) take an unboxed kernel that hands the rule its tensors
borrowed: no reference taken, none given back, nothing kept when the rule
raises, and an in-place op's self or an out= tensor returned as the caller's
own. And what a call's program key holds: the float32 matmul precision for
products and convolutions only."""
import gc

import pytest
import torch

import torchtpu

# Overloads a training step calls most; each must be served unboxed (a
# boxed kernel copies every tensor argument onto a stack, and for a tensor
# only Python holds, PyTorch then takes the GIL twice per argument).
HOT = [
    "aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor", "aten::mul.Scalar",
    "aten::add.Scalar", "aten::add_.Tensor", "aten::mul_.Tensor", "aten::mul_.Scalar", "aten::addcmul_",
    "aten::addcdiv_", "aten::lerp_.Scalar", "aten::zero_", "aten::fill_.Scalar", "aten::add.out",
    "aten::addmm", "aten::mm", "aten::bmm", "aten::relu", "aten::sigmoid", "aten::tanh", "aten::gelu",
    "aten::gelu_backward", "aten::threshold_backward", "aten::_softmax", "aten::_log_softmax",
    "aten::_log_softmax_backward_data", "aten::sum.dim_IntList", "aten::mean.dim", "aten::clamp",
    "aten::where.self", "aten::native_layer_norm", "aten::_thnn_fused_lstm_cell", "aten::nll_loss_forward",
    "aten::nll_loss_backward", "aten::embedding", "aten::embedding_dense_backward",
]


def test_common_overloads_take_the_unboxed_kernel():
    unboxed = set(torchtpu._C._unboxed_rules())
    assert [name for name in HOT if name not in unboxed] == []
    # Lists and index lists stay boxed.
    assert "aten::_foreach_add_.List" not in unboxed and "aten::index.Tensor" not in unboxed


CALLS = {
    "binary": lambda x, y: x * y,
    "number": lambda x, y: x - 0.5,
    "in_place": lambda x, y: x.add_(y, alpha=0.5),
    "out": lambda x, y: torch.add(x, y, out=torch.empty(0, device="tpu")),
    "addmm": lambda x, y: torch.addmm(y.view(4, 4), x.view(4, 4), x.view(4, 4)),
    "reduce": lambda x, y: x.sum(0, keepdim=True),
    "layer_norm": lambda x, y: torch.nn.functional.layer_norm(x.view(2, 8), (8,), y[:8], y[8:]),
    "lstm_cell": lambda x, y: torch.ops.aten._thnn_fused_lstm_cell(x.view(1, 16), y.view(1, 16), x[:4].view(1, 4)),
    "shape_error": lambda x, y: x.add_(torch.ones(3, device="tpu")),
    "dtype_error": lambda x, y: x.add_(torch.ones(16, dtype=torch.complex64, device="tpu")),
}


@pytest.mark.parametrize("name", CALLS)
def test_unboxed_calls_hold_no_reference(name):
    """The borrowed arguments are given up, not released: the tensors stay
    alive while Python holds them (a reference given back that was never
    taken would free their storage under them) and are freed once Python
    lets go (one taken and kept would hold it), on success and on error."""
    gc.collect()
    gc.disable()
    try:
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        x = torch.randn(16, device="tpu")
        y = torch.randn(16, device="tpu")
        x_data = x.cpu()
        for _ in range(3):
            try:
                result = CALLS[name](x, y)
                del result
            except RuntimeError:
                assert name.endswith("_error")
        torch.tpu.synchronize()
        assert torch.tpu.memory_allocated() == base + 2 * 16 * 4
        if name.endswith("_error"):
            torch.testing.assert_close(x.cpu(), x_data, rtol=0, atol=0)
        del x, y
        assert torch.tpu.memory_allocated() == base
    finally:
        gc.enable()


def test_unboxed_returns_are_the_callers_tensors():
    x = torch.zeros(4, device="tpu")
    assert x.add_(1) is x
    assert x.mul_(torch.full((4,), 3.0, device="tpu")) is x
    assert x.addcmul_(x, x, value=0.5) is x
    out = torch.empty(0, device="tpu")
    assert torch.add(x, x, out=out) is out
    assert out.shape == (4,)
    torch.testing.assert_close(out.cpu(), torch.full((4,), 15.0))


def programs_built():
    """Programs compiled or loaded from the disk cache: cache misses in memory."""
    s = torchtpu.stats()
    return s["cache_misses"] + s["cache_loads"]


@pytest.mark.strict_eager
def test_matmul_precision_keys_products_only():
    """torch.set_float32_matmul_precision changes the program of a product
    (a new cache entry), not of a pointwise op, whose call does not ask for
    the setting at all."""
    a = torch.randn(8, 8, device="tpu")
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        (a @ a, a * a)
        torch.set_float32_matmul_precision("high")
        built = programs_built()
        (a * a, a * a)
        assert programs_built() == built
        (a @ a)
        assert programs_built() == built + 1
    finally:
        torch.set_float32_matmul_precision(before)


def test_no_tpu_kernel_hides_a_composite_op():
    """An op the CPU runs as its composite (CompositeImplicitAutograd) has
    no tpu kernel: tensor subclasses (DTensor, FakeTensor, functional
    tensors) would see it instead of its parts, and they have rules for the
    parts only. Ops the CPU has a kernel for (silu_backward) are the CPU's
    pattern."""
    hidden = [name for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
              if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
              and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")]
    assert hidden == []


def test_dtensor_sees_the_parts_of_composite_ops(tmp_path):
    """bool(dtensor.any()) (nn.init.trunc_normal_'s check) as on the CPU:
    aten.is_nonzero reaches DTensor as _local_scalar_dense, which it has a
    rule for; and _has_compatible_shallow_copy_type (param.data = ...)."""
    import torch.distributed as dist
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    dist.init_process_group("tpu_dist", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        results = {}
        for device in ("cpu", "tpu"):
            mesh = init_device_mesh(device, (1,))
            x = distribute_tensor(torch.arange(8.0, device=device), mesh, [Shard(0)])
            y = distribute_tensor(torch.zeros(8, device=device), mesh, [Shard(0)])
            results[device] = (bool((x > 2).any()), bool((x > 9).any()), bool(x[3:4]),
                               torch._has_compatible_shallow_copy_type(x, y))
        assert results["tpu"] == results["cpu"] == (True, False, True, True)
    finally:
        dist.destroy_process_group()


def test_fake_tensors_see_the_parts_of_composite_ops():
    """Under FakeTensorMode, isfinite and bool() on tpu tensors behave as on
    CPU tensors: isfinite decomposes to ops with meta functions, bool() of a
    fake tensor is data-dependent."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    outcomes = {}
    for device in ("cpu", "tpu"):
        with FakeTensorMode():
            x = torch.empty(4, device=device)
            y = torch.isfinite(x)
            assert (y.shape, y.dtype, y.device.type) == ((4,), torch.bool, device)
            try:
                bool(x[0])
                outcomes[device] = None
            except Exception as e:
                outcomes[device] = type(e)
    assert outcomes["tpu"] == outcomes["cpu"] is not None


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_python_meta_functions_get_dtypes_not_ints(dtype):
    """tpu's Python meta functions (cumsum's, cumprod's) are called from C++
    with the call's arguments: a dtype there is a torch.dtype, not the int
    an IValue holds it as (`a.to(7)` took it for device index 7)."""
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
    for op in (torch.cumsum, torch.cumprod):
        got = op(x.to("tpu"), 1, dtype=dtype)
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), op(x, 1, dtype=dtype))
