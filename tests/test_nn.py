"""Normalization and loss ops on tpu vs PyTorch on CPU: forward values,
gradients, running statistics, out= variants and data-dependent errors."""
import copy
import re

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from conftest import compare, compare_grad, to_tpu

A = torch.ops.aten


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def assert_no_fallbacks_since_reset():
    """The no_fallbacks check inside a test body."""
    fallbacks = torchtpu.stats()["fallbacks"]
    assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"


def assert_module_state(tpu_mod, cpu_mod):
    for (name, a), (_, b) in zip(cpu_mod.state_dict().items(), tpu_mod.state_dict().items()):
        torch.testing.assert_close(b.cpu(), a, msg=lambda m: f"{name}: {m}")


# --- layer norm -------------------------------------------------------------------------

@pytest.mark.parametrize("shape,normalized", [((4, 6), (6,)), ((2, 3, 5), (5,)), ((2, 3, 4), (3, 4)),
                                              ((3, 2, 2, 5), (2, 2, 5)), ((7,), (7,))])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(no_fallbacks, shape, normalized, affine):
    x = (torch.randn(shape) * 3 + 1).requires_grad_()
    w = torch.randn(normalized, requires_grad=True) if affine else None
    b = torch.randn(normalized, requires_grad=True) if affine else None
    compare_grad(lambda x, w, b: F.layer_norm(x, normalized, w, b, eps=1e-5), x, w, b)


def test_layer_norm_weight_only_and_noncontiguous(no_fallbacks):
    x = torch.randn(5, 6).t().requires_grad_()  # (6, 5), transposed
    w = torch.randn(5, requires_grad=True)
    compare_grad(lambda x, w: F.layer_norm(x, (5,), w, None), x, w)


def test_native_layer_norm_stats_and_out(no_fallbacks):
    x = torch.randn(2, 3, 4)
    out = compare(lambda x: A.native_layer_norm(x, [3, 4], None, None, 1e-5), x)
    assert out[1].shape == (2, 1, 1) and out[2].shape == (2, 1, 1)
    outs = [torch.empty(0, device="tpu") for _ in range(3)]
    A.native_layer_norm.out(x.to("tpu"), [4], None, None, 1e-5, out0=outs[0], out1=outs[1], out2=outs[2])
    for got, want in zip(outs, A.native_layer_norm(x, [4], None, None, 1e-5)):
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("mask", [[True, False, False], [False, True, True], [True, True, False]])
def test_native_layer_norm_backward_mask(no_fallbacks, mask):
    x, g, w, b = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4), torch.randn(4)
    _, mean, rstd = A.native_layer_norm(x, [4], w, b, 1e-5)
    want = A.native_layer_norm_backward(g, x, [4], mean, rstd, w, b, mask)
    got = A.native_layer_norm_backward(*to_tpu([g, x]), [4], *to_tpu([mean, rstd, w, b]), mask)
    for m, gt, wt in zip(mask, got, want):
        assert (gt is None) == (wt is None) and m == (wt is not None)
        if m:
            torch.testing.assert_close(gt.cpu(), wt)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_half(no_fallbacks, dtype):
    x = (torch.randn(4, 16) * 4).to(dtype).requires_grad_()
    w = torch.randn(16).to(dtype).requires_grad_()
    b = torch.randn(16).to(dtype).requires_grad_()
    compare_grad(lambda x, w, b: F.layer_norm(x, (16,), w, b), x, w, b, rtol=1.6e-2, atol=2e-2)


def test_layer_norm_empty(no_fallbacks):
    compare(lambda x: A.native_layer_norm(x, [3], None, None, 1e-5), torch.randn(0, 3))
    compare(lambda x: A.native_layer_norm(x, [0], None, None, 1e-5), torch.randn(2, 0))


# --- batch norm -------------------------------------------------------------------------

@pytest.mark.parametrize("make,shape", [(torch.nn.BatchNorm1d, (6, 3)), (torch.nn.BatchNorm1d, (4, 3, 5)),
                                        (torch.nn.BatchNorm2d, (4, 3, 5, 5))])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_module_train(no_fallbacks, make, shape, affine):
    cpu = make(3, affine=affine, momentum=0.3)
    if affine:
        with torch.no_grad():
            cpu.weight.normal_()
            cpu.bias.normal_()
    tpu = copy.deepcopy(cpu).to("tpu")
    for step in range(2):
        x = torch.randn(shape) * 2 + 0.5
        xt = x.to("tpu").requires_grad_()
        x.requires_grad_()
        want, got = cpu(x), tpu(xt)
        torch.testing.assert_close(got.detach().cpu(), want.detach())
        assert_module_state(tpu, cpu)
        up = torch.randn(shape)
        want.backward(up)
        got.backward(up.to("tpu"))
        torch.testing.assert_close(xt.grad.cpu(), x.grad)
    if affine:
        torch.testing.assert_close(tpu.weight.grad.cpu(), cpu.weight.grad)
        torch.testing.assert_close(tpu.bias.grad.cpu(), cpu.bias.grad)


@pytest.mark.parametrize("make,shape", [(torch.nn.BatchNorm1d, (6, 3)), (torch.nn.BatchNorm2d, (2, 3, 4, 4))])
def test_batch_norm_module_eval(no_fallbacks, make, shape):
    cpu = make(3)
    with torch.no_grad():
        cpu.running_mean.normal_()
        cpu.running_var.uniform_(0.5, 2.0)
        cpu.weight.normal_()
        cpu.bias.normal_()
    cpu.eval()
    tpu = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(shape, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    want, got = cpu(x), tpu(xt)
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    up = torch.randn(shape)
    want.backward(up)
    got.backward(up.to("tpu"))
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    torch.testing.assert_close(tpu.weight.grad.cpu(), cpu.weight.grad)
    torch.testing.assert_close(tpu.bias.grad.cpu(), cpu.bias.grad)
    assert_module_state(tpu, cpu)


def test_batch_norm_cumulative_average_and_no_running_stats(no_fallbacks):
    for kwargs in [dict(momentum=None), dict(track_running_stats=False)]:
        cpu = torch.nn.BatchNorm2d(3, **kwargs)
        tpu = copy.deepcopy(cpu).to("tpu")
        for _ in range(3):
            x = torch.randn(2, 3, 3, 3)
            torch.testing.assert_close(tpu(x.to("tpu")).cpu(), cpu(x))
        assert_module_state(tpu, cpu)


def test_batch_norm_channels_last(no_fallbacks):
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last).requires_grad_()
    w, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    compare_grad(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mixed", [True, False])
def test_batch_norm_half(no_fallbacks, dtype, mixed):
    # mixed: half input with float32 parameters and stats, as under autocast
    cpu = torch.nn.BatchNorm2d(3)
    if not mixed:
        cpu = cpu.to(dtype)
    tpu = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(4, 3, 3, 3).to(dtype)
    torch.testing.assert_close(tpu(x.to("tpu")).cpu(), cpu(x), rtol=1.6e-2, atol=2e-2)
    assert_module_state(tpu, cpu)


@pytest.mark.parametrize("training", [True, False])
def test_native_batch_norm_direct(no_fallbacks, training):
    x, w, b = torch.randn(5, 3, 4), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    rm_t, rv_t = rm.to("tpu"), rv.to("tpu")
    want = torch.native_batch_norm(x, w, b, rm, rv, training, 0.2, 1e-3)
    got = torch.native_batch_norm(*to_tpu([x, w, b]), rm_t, rv_t, training, 0.2, 1e-3)
    if not training:
        # PyTorch's meta function sizes the saved stats [C] where CPU returns
        # them empty; they are the running stats then, as on CUDA
        torch.testing.assert_close(got[1].cpu(), rm)
        torch.testing.assert_close(got[2].cpu(), (rv + 1e-3).rsqrt())
        got, want = got[:1], want[:1]
    for g, e in zip(got, want):
        torch.testing.assert_close(g.cpu(), e)
    torch.testing.assert_close(rm_t.cpu(), rm)
    torch.testing.assert_close(rv_t.cpu(), rv)


def test_native_batch_norm_out_updates_stats(no_fallbacks):
    x, rm, rv = torch.randn(5, 3, 2), torch.zeros(3), torch.ones(3)
    rm_t, rv_t = rm.to("tpu"), rv.to("tpu")
    outs = [torch.empty(0, device="tpu") for _ in range(3)]
    A.native_batch_norm.out(x.to("tpu"), None, None, rm_t, rv_t, True, 0.1, 1e-5,
                            out=outs[0], save_mean=outs[1], save_invstd=outs[2])
    want = A.native_batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5)
    for g, e in zip(outs, want):
        torch.testing.assert_close(g.cpu(), e)
    torch.testing.assert_close(rm_t.cpu(), rm)
    torch.testing.assert_close(rv_t.cpu(), rv)


def test_native_batch_norm_legit_variants(no_fallbacks):
    x, w, b = torch.randn(4, 3, 3), torch.randn(3), torch.randn(3)

    def check(fn, *stats, eval_mode=False):
        cpu_stats = [s.clone() for s in stats]
        tpu_stats = to_tpu(list(stats))
        want = fn(x, w, b, *cpu_stats)
        got = fn(*to_tpu([x, w, b]), *tpu_stats)
        if eval_mode:  # saved stats: see test_native_batch_norm_direct
            torch.testing.assert_close(got[1].cpu(), stats[0])
            got, want = got[:1], want[:1]
        for g, e in zip(got, want):
            torch.testing.assert_close(g.cpu(), e)
        for g, e in zip(tpu_stats, cpu_stats):
            torch.testing.assert_close(g.cpu(), e)

    stats = (torch.randn(3), torch.rand(3) + 0.5)
    check(lambda x, w, b, rm, rv: A._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5), *stats)
    check(lambda x, w, b, rm, rv: A._native_batch_norm_legit(x, w, b, rm, rv, False, 0.1, 1e-5), *stats,
          eval_mode=True)
    check(lambda x, w, b: A._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5))
    check(lambda x, w, b, rm, rv: A._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5), *stats,
          eval_mode=True)
    check(lambda x, w, b, rm, rv: A._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5), *stats)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("mask", [[True, True, True], [True, False, False], [False, True, True]])
def test_native_batch_norm_backward_direct(no_fallbacks, train, mask):
    x, g, w = torch.randn(4, 3, 5), torch.randn(4, 3, 5), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    _, sm, si = torch.native_batch_norm(x, w, None, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    args = [g, x, w, rm, rv, sm, si]
    want = A.native_batch_norm_backward(*args, train, 1e-5, mask)
    got = A.native_batch_norm_backward(*to_tpu(args), train, 1e-5, mask)
    for i, (m, gt, wt) in enumerate(zip(mask, got, want)):
        # PyTorch's meta function always defines grad_input (CPU leaves it None)
        assert m == (wt is not None) and (gt is None) == (wt is None and i > 0)
        if m:
            torch.testing.assert_close(gt.cpu(), wt)
    reserve = torch.empty(0, dtype=torch.uint8)
    want = A.batch_norm_backward(*args, train, 1e-5, mask, reserve)
    got = A.batch_norm_backward(*to_tpu(args), train, 1e-5, mask, reserve.to("tpu"))
    for m, gt, wt in zip(mask, got, want):
        if m:
            torch.testing.assert_close(gt.cpu(), wt)


def test_batch_norm_empty(no_fallbacks):
    rm, rv = torch.zeros(3), torch.ones(3)
    with pytest.raises(RuntimeError) as cpu_err:
        torch.native_batch_norm(torch.randn(0, 3), None, None, rm, rv, True, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match=re.escape(str(cpu_err.value))):
        torch.native_batch_norm(torch.randn(0, 3).to("tpu"), None, None, *to_tpu([rm, rv]), True, 0.1, 1e-5)
    compare(lambda x, rm, rv: torch.native_batch_norm(x, None, None, rm, rv, False, 0.1, 1e-5)[0],
            torch.randn(0, 3), rm, rv)


def test_batch_norm_without_weight_grad(no_fallbacks):
    x = torch.randn(4, 3, 2, requires_grad=True)
    compare_grad(lambda x: F.batch_norm(x, None, None, training=True), x)


# --- group norm ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 4), 3), ((3, 4, 5), 2), ((2, 4), 2), ((2, 6, 2, 2, 2), 1)])
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm(no_fallbacks, shape, groups, affine):
    x = (torch.randn(shape) * 2 + 1).requires_grad_()
    c = shape[1]
    w = torch.randn(c, requires_grad=True) if affine else None
    b = torch.randn(c, requires_grad=True) if affine else None
    compare_grad(lambda x, w, b: F.group_norm(x, groups, w, b), x, w, b)


def test_group_norm_half_and_out(no_fallbacks):
    x = torch.randn(2, 4, 3).to(torch.bfloat16).requires_grad_()
    w = torch.randn(4).to(torch.bfloat16).requires_grad_()
    compare_grad(lambda x, w: F.group_norm(x, 2, w), x, w, rtol=1.6e-2, atol=2e-2)
    x = torch.randn(2, 4, 3)
    outs = [torch.empty(0, device="tpu") for _ in range(3)]
    A.native_group_norm.out(x.to("tpu"), None, None, 2, 4, 3, 2, 1e-5, out0=outs[0], out1=outs[1], out2=outs[2])
    for g, e in zip(outs, A.native_group_norm(x, None, None, 2, 4, 3, 2, 1e-5)):
        torch.testing.assert_close(g.cpu(), e)


def test_group_norm_backward_mask(no_fallbacks):
    x, g, w = torch.randn(2, 4, 3), torch.randn(2, 4, 3), torch.randn(4)
    _, mean, rstd = A.native_group_norm(x, w, None, 2, 4, 3, 2, 1e-5)
    for mask in ([True, False, False], [False, True, False], [False, False, True]):
        want = A.native_group_norm_backward(g, x, mean, rstd, w, 2, 4, 3, 2, mask)
        got = A.native_group_norm_backward(*to_tpu([g, x, mean, rstd, w]), 2, 4, 3, 2, mask)
        for m, gt, wt in zip(mask, got, want):
            assert (gt is None) == (wt is None)
            if m:
                torch.testing.assert_close(gt.cpu(), wt)


def test_group_norm_empty(no_fallbacks):
    compare(lambda x: A.native_group_norm(x, None, None, 0, 4, 3, 2, 1e-5), torch.randn(0, 4, 3))
    compare(lambda x: A.native_group_norm(x, None, None, 2, 4, 0, 2, 1e-5), torch.randn(2, 4, 0))


# --- nll_loss ----------------------------------------------------------------------------------

def log_probs(*shape, dim=1):
    return torch.randn(*shape).log_softmax(dim)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_nll_loss(no_fallbacks, reduction, weighted, ignore_index):
    x = log_probs(6, 4).requires_grad_()
    t = torch.tensor([0, 2, 3, ignore_index, 2, 1])
    w = torch.rand(4) + 0.5 if weighted else None
    compare_grad(lambda x, t, w: F.nll_loss(x, t, weight=w, ignore_index=ignore_index, reduction=reduction), x, t, w)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_unbatched(no_fallbacks, reduction):
    x = log_probs(5, dim=0).requires_grad_()
    w = torch.rand(5) + 0.5
    compare_grad(lambda x, t, w: F.nll_loss(x, t, weight=w, reduction=reduction), x, torch.tensor(3), w)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7), (2, 3, 2, 2, 3)])
def test_nll_loss_nd(no_fallbacks, reduction, shape):
    x = log_probs(*shape).requires_grad_()
    t = torch.randint(0, 3, (shape[0],) + shape[2:])
    t.view(-1)[::5] = -100
    w = torch.rand(3) + 0.5
    compare_grad(lambda x, t, w: F.nll_loss(x, t, weight=w, reduction=reduction), x, t, w)


def test_nll_loss_noncontiguous(no_fallbacks):
    x = log_probs(5, 6, dim=0).t().requires_grad_()  # (6, 5), transposed
    t = torch.tensor([4, 0, 1, 3, 2, 4])[::1]
    compare_grad(lambda x, t, w: F.nll_loss(x, t, weight=w), x, t, torch.rand(10)[::2])
    x4 = log_probs(2, 3, 4, 4)[:, :, ::2, 1:].requires_grad_()
    compare_grad(lambda x, t: F.nll_loss(x, t, reduction="sum"), x4, torch.randint(0, 3, (2, 3, 2)).transpose(1, 2))


def test_nll_loss_all_ignored_and_empty(no_fallbacks):
    x = log_probs(3, 4).requires_grad_()
    t = torch.full((3,), -100)
    got = compare_grad(F.nll_loss, x, t)
    assert got.isnan().item()
    compare(lambda x, t: A.nll_loss_forward(x, t, None, 1, -100), torch.randn(0, 4), torch.zeros(0, dtype=torch.long))
    compare(lambda x, t: A.nll_loss_forward(x, t, None, 0, -100), torch.randn(0, 4), torch.zeros(0, dtype=torch.long))


def test_nll_loss_total_weight_and_out(no_fallbacks):
    x, t, w = log_probs(4, 3), torch.tensor([0, 1, 2, 1]), torch.tensor([1.0, 2.0, 0.5])
    for reduction in range(3):
        compare(lambda x, t, w: A.nll_loss_forward(x, t, w, reduction, 1), x, t, w)
        compare(lambda x, t, w: A.nll_loss_forward(x, t, w, reduction, -100), x[0], t[1], w)
        compare(lambda x, t, w: A.nll_loss2d_forward(x, t, w, reduction, 0), log_probs(2, 3, 2, 2),
                torch.randint(0, 3, (2, 2, 2)), w)
    out, tw = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    A.nll_loss_forward.output(*to_tpu([x, t, w]), 1, -100, output=out, total_weight=tw)
    want = A.nll_loss_forward(x, t, w, 1, -100)
    torch.testing.assert_close(out.cpu(), want[0])
    torch.testing.assert_close(tw.cpu(), want[1])
    gi = torch.empty(0, device="tpu")
    A.nll_loss_backward.grad_input(*to_tpu([torch.tensor(1.0), x, t, w]), 1, -100, want[1].to("tpu"), grad_input=gi)
    torch.testing.assert_close(gi.cpu(), A.nll_loss_backward(torch.tensor(1.0), x, t, w, 1, -100, want[1]))


def test_nll_loss_half(no_fallbacks):
    x = log_probs(6, 5).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, 5, (6,))
    compare_grad(F.nll_loss, x, t, rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("bad", [5, -1, 3])
def test_nll_loss_target_out_of_range(no_fallbacks, bad):
    x = log_probs(4, 3)
    t = torch.tensor([0, 1, bad, 1])
    with pytest.raises(IndexError) as cpu_err:
        F.nll_loss(x, t)
    xt, tt = x.to("tpu"), t.to("tpu")
    with pytest.raises(type(cpu_err.value), match="out of bounds"):
        F.nll_loss(xt, tt)
    with pytest.raises(IndexError, match="out of bounds"):
        A.nll_loss_backward(torch.tensor(1.0, device="tpu"), xt, tt, None, 1, -100, torch.tensor(3.0, device="tpu"))
    x4, t4 = log_probs(2, 3, 2, 2), torch.zeros(2, 2, 2, dtype=torch.long)
    t4[1, 0, 1] = bad
    with pytest.raises(IndexError, match="out of bounds"):
        F.nll_loss(x4.to("tpu"), t4.to("tpu"))
    # the device is still usable, and an ignored target is not out of range
    t[2] = -100
    compare(lambda x, t: F.nll_loss(x, t, reduction="sum"), x, t)


# --- multi_margin_loss --------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss(no_fallbacks, reduction, p, weighted):
    x = torch.randn(6, 5)
    t = torch.tensor([0, 4, 2, 2, 1, 3])
    w = torch.rand(5) + 0.5 if weighted else None
    compare_grad(lambda x, t, w: F.multi_margin_loss(x, t, p=p, margin=0.7, weight=w, reduction=reduction),
                 x.requires_grad_(), t, w)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_multi_margin_loss_unbatched(no_fallbacks, reduction):
    # (reduction "none" of a 1-d input: PyTorch's meta function says [1] where CPU gives a scalar)
    x = torch.randn(5)
    compare(lambda x, t: F.multi_margin_loss(x, t, reduction=reduction), x, torch.tensor(3))
    compare(lambda x, t: F.multi_margin_loss(x, t, reduction=reduction), x, torch.tensor([1]))
    compare_grad(lambda x, t: F.multi_margin_loss(x, t, reduction=reduction), x.requires_grad_(), torch.tensor(3))
    compare_grad(lambda x, t: F.multi_margin_loss(x, t, reduction=reduction), torch.tensor(0.3, requires_grad=True),
                 torch.tensor(0))


def test_multi_margin_loss_target_out_of_range(no_fallbacks):
    x, t = torch.randn(3, 4), torch.tensor([0, 4, 1])
    with pytest.raises(RuntimeError) as cpu_err:
        F.multi_margin_loss(x, t)
    with pytest.raises(type(cpu_err.value), match=str(cpu_err.value)):
        F.multi_margin_loss(x.to("tpu"), t.to("tpu"))
    compare(lambda x, t: F.multi_margin_loss(x, t), x, torch.tensor([0, 3, 1]))


# --- multilabel_margin_loss ---------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(no_fallbacks, reduction):
    # targets end at the first -1 (PyTorch's decomposition gets that wrong); repeats count twice
    t = torch.tensor([[3, 0, -1, 1, 2], [0, 1, 2, 3, 4], [1, 1, -1, 2, 0], [-1, 0, 1, 2, 3], [4, -1, -1, 0, 0]])
    compare_grad(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction),
                 torch.randn(5, 5, requires_grad=True), t)
    compare(lambda x, t: A.multilabel_margin_loss_forward(x, t, 1)[1], torch.randn(5, 5), t)


def test_margin_losses_unbatched_and_half(no_fallbacks):
    t = torch.tensor([2, 0, -1, 1])
    compare_grad(lambda x, t: F.multilabel_margin_loss(x, t), torch.randn(4, requires_grad=True), t)
    for fn, t in [(F.multilabel_margin_loss, t), (F.multi_margin_loss, torch.tensor(1))]:
        with pytest.raises(NotImplementedError) as cpu_err:
            fn(torch.randn(4).bfloat16(), t)
        with pytest.raises(NotImplementedError, match=re.escape(str(cpu_err.value))):
            fn(torch.randn(4).bfloat16().to("tpu"), t.to("tpu"))


# --- cross entropy (log_softmax + nll_loss) -------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(5, 4), (2, 4, 3, 3)])
def test_cross_entropy_indices(reduction, shape):
    torchtpu.reset_stats()
    x = torch.randn(shape, requires_grad=True)
    t = torch.randint(0, 4, (shape[0],) + shape[2:])
    t.view(-1)[0] = 1
    t.view(-1)[1] = -100
    w = torch.rand(4) + 0.5
    compare_grad(lambda x, t, w: F.cross_entropy(x, t, weight=w, reduction=reduction), x, t, w)
    t = t.masked_fill(t == -100, 1)
    compare_grad(lambda x, t: F.cross_entropy(x, t, ignore_index=1, label_smoothing=0.1, reduction=reduction), x, t)
    assert_no_fallbacks_since_reset()


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_probabilities(reduction):
    torchtpu.reset_stats()
    x = torch.randn(5, 4, requires_grad=True)
    p = torch.rand(5, 4).softmax(1)
    compare_grad(lambda x, p: F.cross_entropy(x, p, reduction=reduction, label_smoothing=0.2), x, p)
    x4 = torch.randn(2, 4, 3, 3, requires_grad=True)
    p4 = torch.rand(2, 4, 3, 3).softmax(1)
    compare_grad(lambda x, p, w: F.cross_entropy(x, p, weight=w, reduction=reduction), x4, p4, torch.rand(4))
    assert_no_fallbacks_since_reset()


# --- pointwise losses ------------------------------------------------------------------------------

REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_loss(no_fallbacks, reduction):
    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    compare_grad(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, y)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
def test_smooth_l1_loss(no_fallbacks, reduction, beta):
    x = torch.randn(4, 5, requires_grad=True)
    y = torch.randn(4, 5)
    y[0, :2] = x[0, :2].detach()  # d == 0 on both sides of the beta == 0 case
    y.requires_grad_()
    # F.smooth_l1_loss turns beta == 0 into l1_loss; the op itself keeps it
    r = REDUCTIONS.index(reduction)
    compare_grad(lambda x, y: A.smooth_l1_loss(x, y, r, beta), x, y)
    if beta > 0:
        compare_grad(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=beta), x, y)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("delta", [1.0, 0.3, 2.5])
def test_huber_loss(no_fallbacks, reduction, delta):
    x, y = torch.randn(4, 5, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    compare_grad(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=delta), x, y)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(no_fallbacks, reduction, weighted):
    x = torch.rand(4, 5).clamp(0.02, 0.98).requires_grad_()
    y = torch.rand(4, 5)
    y[0] = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.5])
    w = torch.rand(5) if weighted else None
    compare_grad(lambda x, y, w: F.binary_cross_entropy(x, y, weight=w, reduction=reduction), x, y, w)


def test_binary_cross_entropy_log_clamp(no_fallbacks):
    # log(0) is clamped at -100, as PyTorch does
    x = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.5])
    y = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.5])
    compare(lambda x, y: F.binary_cross_entropy(x, y, reduction="none"), x, y)
    compare(lambda g, x, y: A.binary_cross_entropy_backward(g, x, y, None, 0), torch.ones(5), x, y)


@pytest.mark.parametrize("x,y", [([0.5, 1.5], [0.0, 1.0]), ([0.5, float("nan")], [0.0, 1.0]),
                                 ([0.5, 0.5], [0.0, -0.5])])
def test_binary_cross_entropy_range_error(no_fallbacks, x, y):
    x, y = torch.tensor(x), torch.tensor(y)
    with pytest.raises(RuntimeError) as cpu_err:
        F.binary_cross_entropy(x, y)
    with pytest.raises(type(cpu_err.value), match=str(cpu_err.value)):
        F.binary_cross_entropy(x.to("tpu"), y.to("tpu"))
    compare(lambda x: F.binary_cross_entropy(x, torch.full_like(x, 0.5)), torch.tensor([0.25, 0.75]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_losses_half(no_fallbacks, dtype):
    x = torch.randn(4, 6).to(dtype).requires_grad_()
    y = torch.randn(4, 6).to(dtype)
    tol = dict(rtol=1.6e-2, atol=2e-2)
    compare_grad(F.mse_loss, x, y, **tol)
    compare_grad(lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), x, y, **tol)
    compare_grad(lambda x, y: F.huber_loss(x, y, delta=0.7), x, y, **tol)
    p = torch.rand(4, 6).clamp(0.05, 0.95).to(dtype).requires_grad_()
    compare_grad(F.binary_cross_entropy, p, torch.rand(4, 6).to(dtype), **tol)


def test_losses_broadcast_empty_noncontiguous_out(no_fallbacks):
    x, y = torch.randn(3, 4), torch.randn(4)
    for fn in (A.mse_loss, A.smooth_l1_loss, A.huber_loss):
        for reduction in range(3):
            compare(lambda x, y: fn(x, y, reduction), x, y)
            compare(lambda x, y: fn(x, y, reduction), x.t(), torch.randn(3))
    e = torch.randn(0, 3)
    for reduction in range(3):
        compare(lambda x: A.mse_loss(x, x, reduction), e)
        compare(lambda x: A.binary_cross_entropy(x, x, None, reduction), e)
    out = torch.empty(0, device="tpu")
    A.mse_loss.out(*to_tpu([x, y]), 2, out=out)
    torch.testing.assert_close(out.cpu(), A.mse_loss(x, y, 2))
    gi = torch.empty(3, 4, device="tpu")
    A.huber_loss_backward.out(*to_tpu([torch.tensor(2.0), x, y]), 1, 0.5, grad_input=gi)
    torch.testing.assert_close(gi.cpu(), A.huber_loss_backward(torch.tensor(2.0), x, y, 1, 0.5))
    A.smooth_l1_loss_backward.grad_input(*to_tpu([torch.tensor(2.0), x, y]), 2, 0.5, grad_input=gi)
    torch.testing.assert_close(gi.cpu(), A.smooth_l1_loss_backward(torch.tensor(2.0), x, y, 2, 0.5))


def test_float64(no_fallbacks):
    x = torch.randn(4, 3, 2, dtype=torch.float64, requires_grad=True)
    compare_grad(lambda x: F.layer_norm(x, (2,)), x)
    compare_grad(lambda x: F.batch_norm(x, None, None, training=True), x)
    compare_grad(lambda x: F.group_norm(x, 3), x)
    compare_grad(lambda x: F.mse_loss(x, torch.zeros_like(x)), x)
    compare_grad(lambda x, t: F.nll_loss(x[:, :, 0], t), x, torch.tensor([0, 1, 2, 0]))



def _out_cases():
    x, g, w, b = torch.randn(4, 3, 5), torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    _, sm, si = torch.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    xl, gl, wl = torch.randn(4, 5), torch.randn(4, 5), torch.randn(5)
    _, lm, lr = A.native_layer_norm(xl, [5], wl, None, 1e-5)
    _, gm, gr = A.native_group_norm(x, w, b, 4, 3, 5, 3, 1e-5)
    x4, t4 = log_probs(2, 3, 2, 2), torch.randint(0, 3, (2, 2, 2))
    p, y = torch.rand(3, 4).clamp(0.05, 0.95), torch.rand(3, 4)
    tw = A.nll_loss2d_forward(x4, t4, w, 1, -100)[1]
    full = [True, True, True]
    # (functional, out= overload, arguments, out names, how many outputs CPU and tpu agree on)
    return [
        (A.native_layer_norm_backward.default, A.native_layer_norm_backward.out,
         (gl, xl, [5], lm, lr, wl, torch.randn(5), full), ("out0", "out1", "out2"), 3),
        (A.native_group_norm_backward.default, A.native_group_norm_backward.out,
         (g, x, gm, gr, w, 4, 3, 5, 3, full), ("out0", "out1", "out2"), 3),
        (A.native_batch_norm_backward.default, A.native_batch_norm_backward.out,
         (g, x, w, rm, rv, sm, si, True, 1e-5, full), ("out0", "out1", "out2"), 3),
        (A._native_batch_norm_legit_no_training.default, A._native_batch_norm_legit_no_training.out,
         (x, w, b, rm, rv, 0.1, 1e-5), ("out0", "out1", "out2"), 1),
        (A.nll_loss2d_forward.default, A.nll_loss2d_forward.output, (x4, t4, w, 1, -100),
         ("output", "total_weight"), 2),
        (A.nll_loss2d_backward.default, A.nll_loss2d_backward.grad_input,
         (torch.tensor(1.5), x4, t4, w, 1, -100, tw), ("grad_input",), 1),
        (A.mse_loss_backward.default, A.mse_loss_backward.grad_input, (torch.tensor(1.5), p, y, 1), ("grad_input",), 1),
        (A.smooth_l1_loss.default, A.smooth_l1_loss.out, (p, y, 0, 0.5), ("out",), 1),
        (A.huber_loss.default, A.huber_loss.out, (p, y, 2, 0.5), ("out",), 1),
        (A.binary_cross_entropy.default, A.binary_cross_entropy.out, (p, y, None, 1), ("out",), 1),
        (A.binary_cross_entropy_backward.default, A.binary_cross_entropy_backward.grad_input,
         (torch.ones(3, 4), p, y, torch.rand(4), 0), ("grad_input",), 1),
    ]


@pytest.mark.parametrize("case", range(11))
def test_out_variants(no_fallbacks, case):
    functional, out_overload, args, out_names, agree = _out_cases()[case]
    cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    tpu_args = to_tpu(list(args))
    want = functional(*cpu_args)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    outs = {n: torch.empty(0, dtype=w_.dtype, device="tpu") for n, w_ in zip(out_names, want)}
    out_overload(*tpu_args, **outs)
    for n, w_ in list(zip(out_names, want))[:agree]:
        torch.testing.assert_close(outs[n].cpu(), w_)


# --- CTC loss ---------------------------------------------------------------------------------

def ctc_batch(T=12, N=4, C=6, S=5, seed=0):
    """log_probs [T, N, C], padded targets [N, S] and lengths: the first
    sample's labels repeat (its alignment needs the blanks between them)."""
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.randn(T, N, C, generator=g).log_softmax(2).requires_grad_()
    targets = torch.randint(1, C, (N, S), generator=g)
    targets[0, :3] = 2
    input_lengths = torch.randint(T // 2, T + 1, (N,), generator=g)
    input_lengths[0] = T
    target_lengths = torch.randint(0, S + 1, (N,), generator=g)
    target_lengths[0] = S
    return log_probs, targets, input_lengths, target_lengths


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("concatenated", [False, True])
@pytest.mark.parametrize("lengths_as", ["lists", "tensors"])
def test_ctc_loss(no_fallbacks, reduction, concatenated, lengths_as):
    log_probs, targets, il, tl = ctc_batch()
    if concatenated:
        targets = torch.cat([targets[i, :tl[i]] for i in range(len(tl))])
    if lengths_as == "lists":
        il, tl = il.tolist(), tl.tolist()
    compare_grad(lambda lp, tg, il, tl: F.ctc_loss(lp, tg, il, tl, reduction=reduction), log_probs, targets, il, tl)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_impossible_and_empty(no_fallbacks, zero_infinity):
    """A target longer than its input allows (infinite loss; NaN gradient
    unless zero_infinity), an empty input, an empty target, float64."""
    log_probs = torch.randn(4, 4, 5, dtype=torch.float64).log_softmax(2).requires_grad_()
    targets = torch.tensor([[1, 1, 1], [2, 3, 4], [1, 2, 1], [3, 3, 1]])
    il, tl = [4, 4, 0, 3], [3, 3, 2, 0]
    compare_grad(lambda lp: F.ctc_loss(lp, targets, il, tl, reduction="none", zero_infinity=zero_infinity),
                 log_probs)


@pytest.mark.strict_eager
def test_ctc_loss_one_program_per_shape():
    """Eager compiles one program per padded shape, whatever the lengths."""
    log_probs, targets, _, _ = ctc_batch()
    lp = log_probs.detach().to("tpu").requires_grad_()
    tg = targets.to("tpu")
    torch.autograd.grad(F.ctc_loss(lp, tg, [12, 9, 8, 10], [5, 2, 3, 0]), lp)
    torchtpu.reset_stats()
    for il, tl in (([12, 10, 7, 6], [5, 4, 1, 1]), ([11, 12, 12, 9], [5, 0, 2, 3])):
        loss = F.ctc_loss(lp, tg, il, tl)
        grad, = torch.autograd.grad(loss, lp)
        expected = F.ctc_loss(log_probs, targets, il, tl)
        torch.testing.assert_close(loss.detach().cpu(), expected.detach())
        torch.testing.assert_close(grad.cpu(), torch.autograd.grad(expected, log_probs)[0])
    stats = torchtpu.stats()
    assert stats["cache_misses"] == 0 and stats["cache_loads"] == 0, stats


def test_ctc_loss_errors():
    """PyTorch's messages for bad lengths, types and blanks."""
    log_probs, targets, il, tl = ctc_batch()
    cases = [(log_probs, targets, [12, 13, 12, 12], [5, 1, 1, 1], {}),
             (log_probs, targets, [12, 12, 12, 12], [6, 1, 1, 1], {}),
             (log_probs, targets, [12, 12, 12], [5, 1, 1], {}),
             (log_probs, targets, il.tolist(), tl.tolist(), {"blank": 6}),
             (log_probs.bfloat16(), targets, il.tolist(), tl.tolist(), {}),
             (log_probs[:0], targets, [0] * 4, [0] * 4, {}),
             (log_probs, targets, il, tl.float(), {})]
    for lp, tg, il, tl, kw in cases:
        with pytest.raises(Exception) as cpu_err:
            F.ctc_loss(lp, tg, il, tl, **kw)
        with pytest.raises(type(cpu_err.value), match=re.escape(str(cpu_err.value))):
            F.ctc_loss(lp.to("tpu"), tg.to("tpu"), *to_tpu([il, tl]), **kw)


# --- activations ------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [F.hardshrink, F.softshrink])
@pytest.mark.parametrize("lambd", [0.5, 0.0, 2.0])
def test_shrink_backward(no_fallbacks, fn, lambd):
    x = torch.tensor([-3.0, -2.0, -0.5, -0.2, 0.0, 0.2, 0.5, 1.0, 2.0, float("nan")], requires_grad=True)
    compare_grad(lambda x: fn(x, lambd), x)
    compare_grad(lambda x: fn(x, lambd), torch.randn(3, 4).bfloat16().requires_grad_(), rtol=1e-2, atol=1e-2)
    compare_grad(lambda x: fn(x, lambd), torch.randn(0, 4, requires_grad=True))


# --- pdist ------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_pdist(no_fallbacks, p):
    x = torch.randn(6, 3)
    x[1] = x[0]  # a zero distance: its gradient is 0
    x[2, 0] = x[0, 0]  # a zero difference
    compare_grad(lambda x: torch.pdist(x, p), x.requires_grad_())
    compare_grad(lambda x: torch.pdist(x, p), torch.randn(1, 4, requires_grad=True))
    compare(lambda x: torch.pdist(x, p), torch.randn(4, 0))


def test_pdist_dtype_error():
    with pytest.raises(NotImplementedError) as cpu_err:
        torch.pdist(torch.randn(3, 2).bfloat16())
    with pytest.raises(NotImplementedError, match=re.escape(str(cpu_err.value))):
        torch.pdist(torch.randn(3, 2).bfloat16().to("tpu"))


# --- embedding_renorm_ (embedding's max_norm) ---------------------------------------------------


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 0.5, float("inf"), 0.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_renorm(no_fallbacks, norm_type, dtype):
    w = torch.randn(6, 4).to(dtype)
    idx = torch.tensor([[0, 2, 2], [5, 0, 1]])  # repeats renormalize once

    def renorm(w, idx):
        w = w.clone()
        torch.embedding_renorm_(w, idx, 1.5, norm_type)
        return w
    compare(renorm, w, idx)
    compare(renorm, w, torch.zeros(0, dtype=torch.long))
    compare(lambda w, idx: F.embedding(idx, w.clone(), max_norm=1.0, norm_type=norm_type), w, idx)


# --- embedding_bag (forward) -------------------------------------------------------------------

BAGS = [
    dict(input=torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), offsets=torch.tensor([0, 0, 3, 8])),  # empty bags
    dict(input=torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), offsets=torch.tensor([0, 3, 8]), include_last_offset=True),
    dict(input=torch.tensor([[2, 2, 2], [4, 3, 2]]), padding_idx=2),  # a bag of padding only
    dict(input=torch.tensor([1, 1, 1, 3]), offsets=torch.tensor([0, 2])),  # repeats
    dict(input=torch.tensor([], dtype=torch.long), offsets=torch.tensor([0, 0])),
]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("kw", BAGS, ids=range(len(BAGS)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_bag(no_fallbacks, mode, kw, dtype):
    w = torch.randn(10, 5).to(dtype)
    if mode == "max":
        w = w.round()  # ties: the first index wins
    compare(lambda w, kw: F.embedding_bag(weight=w, mode=mode, **kw), w, kw)


def test_embedding_bag_per_sample_weights_and_errors(no_fallbacks):
    w, i, o = torch.randn(10, 5), torch.tensor([1, 2, 4, 5]), torch.tensor([0, 2])
    compare(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p), w, i, o, torch.randn(4))
    with pytest.raises(RuntimeError, match="not in the valid range"):
        F.embedding_bag(torch.tensor([1, 10]), w, torch.tensor([0]))
    with pytest.raises(RuntimeError, match="not in the valid range"):
        F.embedding_bag(torch.tensor([1, 10]).to("tpu"), w.to("tpu"), torch.tensor([0]).to("tpu"))


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_norm_backward(no_fallbacks, dim, dtype):
    """torch._weight_norm's fused pair: the backward (wav2vec2's and HuBERT's
    positional convolution) fell back to the CPU."""
    g = torch.Generator().manual_seed(0)
    v = torch.randn(6, 4, 5, generator=g).to(dtype).requires_grad_()
    gain = (torch.rand(6, 1, 1, generator=g) + 0.5 if dim == 0 else torch.rand(1, 1, 5, generator=g) + 0.5)
    gain = gain.to(dtype).requires_grad_()
    tol = {} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
    grads = []
    for device in ("cpu", "tpu"):
        x, s = v.detach().to(device).requires_grad_(), gain.detach().to(device).requires_grad_()
        w = torch._weight_norm(x, s, dim)
        (w.float() * torch.arange(w.numel(), device=device).view(w.shape).cos()).sum().backward()
        grads.append((w.detach().cpu(), x.grad.cpu(), s.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0], **tol)


BAG_INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0, 7])
BAG_OFFSETS = torch.tensor([0, 2, 2, 6, 9])  # an empty bag


def bag_grads(device, mode, psw=None, **kw):
    w = torch.randn(10, 5, generator=torch.Generator().manual_seed(0)).to(device).requires_grad_()
    p = None if psw is None else psw.clone().to(device).requires_grad_()
    offsets = torch.cat([BAG_OFFSETS, torch.tensor([11])]) if kw.get("include_last_offset") else BAG_OFFSETS
    out = F.embedding_bag(BAG_INDICES.to(device), w, offsets.to(device), mode=mode, per_sample_weights=p, **kw)
    (out * torch.arange(out.numel(), device=device).view(out.shape).float().cos()).sum().backward()
    return [t.cpu() for t in (out.detach(), w.grad) + (() if p is None else (p.grad,))]


BAG_CASES = [(mode, kw) for mode in ("sum", "mean", "max")
             for kw in ({}, {"padding_idx": 4}, {"include_last_offset": True})] + [("sum", {"weights": True})]


@pytest.mark.parametrize("mode, kw", BAG_CASES, ids=[f"{m}-{'-'.join(k) or 'plain'}" for m, k in BAG_CASES])
def test_embedding_bag_backward(no_fallbacks, mode, kw):
    """The weight's (and per-sample weights', mode sum) gradients of
    embedding_bag on tpu, not the CPU fallback."""
    kw = dict(kw)
    psw = torch.rand(len(BAG_INDICES), generator=torch.Generator().manual_seed(1)) if kw.pop("weights", False) else None
    torch.testing.assert_close(bag_grads("tpu", mode, psw, **kw), bag_grads("cpu", mode, psw, **kw))


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_backward_scaled_by_frequency(no_fallbacks, mode):
    """scale_grad_by_freq divides each index's gradient by how often the
    index occurs, as documented and as CUDA does. PyTorch's CPU kernel divides
    by the count of another index (the i-th of the sorted indices for the
    i-th distinct one), so the reference is the unscaled CPU gradient over
    the counts."""
    _, plain = bag_grads("cpu", mode)
    counts = torch.bincount(BAG_INDICES, minlength=10).clamp(min=1).unsqueeze(1).float()
    _, got = bag_grads("tpu", mode, scale_grad_by_freq=True)
    torch.testing.assert_close(got, plain / counts)


def test_embedding_bag_backward_without_offset2bag(no_fallbacks):
    """A backward given no offset2bag (the CPU forward leaves it empty for
    some modes) finds each index's bag from the offsets, as CPU's does."""
    grad = torch.randn(len(BAG_OFFSETS), 5, generator=torch.Generator().manual_seed(2))
    sizes = torch.diff(BAG_OFFSETS, append=torch.tensor([len(BAG_INDICES)]))
    for mode in (0, 1):
        args = (grad, BAG_INDICES, BAG_OFFSETS, torch.empty(0, dtype=torch.long), sizes,
                torch.empty(0, dtype=torch.long), 10, False, mode, False, None, -1)
        compare(torch.ops.aten._embedding_bag_backward, *args)
