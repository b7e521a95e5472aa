"""Cached programs run again on changed data: a product whose operand was
rewritten in place (the buffer's address stays, donated) or freed and made
again (the allocator hands the address back) reads the new values, in every
layout and at sizes XLA's CPU plugin sends to its library kernels (XNNPACK
packed a right-hand operand once per address and reused it); Python numbers
as operands, many of them, from several threads (the runtime-scalar table
destroyed a buffer a pending call had looked up)."""
import threading

import pytest
import torch
import torch.nn.functional as F

import torchtpu

# Products XLA's cost model gave to XNNPACK (m, k, n), and one that Eigen
# took, for contrast.
SHAPES = [(512, 512, 128), (64, 512, 256), (256, 256, 256), (256, 256, 96), (512, 1024, 512), (8, 128, 16)]

PRODUCTS = {
    "mm": lambda x, w: torch.mm(x, w),
    "matmul": lambda x, w: x @ w,
    "addmm": lambda x, w: torch.addmm(torch.ones(w.shape[1], device=x.device), x, w),
    "einsum": lambda x, w: torch.einsum("ik,kj->ij", x, w),
    "bmm": lambda x, w: torch.bmm(x.unsqueeze(0), w.unsqueeze(0))[0],
    "linear": lambda x, w: F.linear(x, w.t()),
    "mm_t_lhs": lambda x, w: torch.mm(x.t().contiguous().t(), w),
}


def close(got, want, k):
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4 * k**0.5)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("product", sorted(PRODUCTS))
def test_product_after_in_place_update(product, shape):
    m, k, n = shape
    f = PRODUCTS[product]
    X, W = torch.randn(m, k), torch.randn(k, n)
    x, w = X.to("tpu"), W.to("tpu")
    for step in range(3):
        close(f(x, w), f(X, W), k)
        with torch.no_grad():  # in place, whole tensor: the buffer is donated, its address stays
            w.mul_(0.9)
            W.mul_(0.9)
            x.add_(0.5)
            X.add_(0.5)


@pytest.mark.parametrize("shape", SHAPES[:4], ids=lambda s: "x".join(map(str, s)))
def test_product_at_a_recycled_address(shape):
    m, k, n = shape
    X = torch.randn(m, k)
    x = X.to("tpu")
    for step in range(5):
        W = torch.randn(k, n) * (step + 1)
        w = W.to("tpu")
        close(x @ w, X @ W, k)
        del w  # its memory goes back to the allocator and comes out again next step


def test_linear_gradient_after_weight_update():
    """The user's report: the second X.grad used the W from before mul_."""
    W0, X0 = torch.randn(512, 128), torch.randn(512, 128)
    grads = {}
    for dev in ("cpu", "tpu"):
        W = W0.clone().to(dev).requires_grad_()
        X = X0.clone().to(dev).requires_grad_()
        grads[dev] = []
        for i in range(3):
            X.grad = None
            F.linear(X, W).pow(2).sum().backward()
            grads[dev].append(X.grad.cpu())
            with torch.no_grad():
                W.mul_(0.9)
    for got, want in zip(grads["tpu"], grads["cpu"]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_python_numbers_as_operands():
    x = torch.zeros(4, device="tpu")
    torch.testing.assert_close((x + 211).cpu(), torch.full((4,), 211.0))
    for i in range(1000):  # more numbers than the table's slots: they collide, with alpha too
        assert ((x + i).cpu() == i).all(), i
        assert ((x.add(i, alpha=2)).cpu() == 2 * i).all(), i
    for v in (0.5, -3.25, 1e-3, 7.0):
        torch.testing.assert_close((x * v + v).cpu(), torch.full((4,), v))


def test_python_numbers_from_threads():
    errors = []

    def work(seed):
        x = torch.zeros(8, device="tpu")
        try:
            for i in range(400):
                v = seed * 1000 + i
                got = (x + v).add(v, alpha=3).cpu()
                if not (got == 4 * v).all():
                    errors.append((seed, i, got[0].item()))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
