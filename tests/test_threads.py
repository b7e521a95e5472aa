"""Eager ops from several threads at once: eight threads, each a different
mix (Python numbers, products with weights updated in place, reductions,
writes through views, indexing with its runtime checks, random numbers on a
generator of its own, _foreach_ ops, a small model's training steps), run
for TORCHTPU_THREAD_SECONDS (default 60) and compare every result with the
same work on the CPU. No crash, no hang, the CPU's values."""
import os
import threading
import time

import torch
import torch.nn.functional as F

import torchtpu

SECONDS = float(os.environ.get("TORCHTPU_THREAD_SECONDS", "60"))


def close(got, want, **kw):
    torch.testing.assert_close(got.detach().cpu() if isinstance(got, torch.Tensor) else got, want, **kw)


def numbers(rng, it):
    x = torch.randn(33, generator=rng)
    t = x.to("tpu")
    for i in range(20):
        v = it * 131 + i
        close(t * v - v / 3 + (i % 7), x * v - v / 3 + (i % 7), rtol=1e-5, atol=1e-3)
        close(t.add(v, alpha=i), x.add(v, alpha=i), rtol=1e-5, atol=1e-3)


def products(rng, it):
    k = 512
    W = torch.randn(k, 128, generator=rng) / k ** 0.5
    X = torch.randn(256, k, generator=rng)
    w, x = W.to("tpu"), X.to("tpu")
    for _ in range(3):
        close(x @ w, X @ W, rtol=1e-4, atol=1e-4)
        close(F.linear(x, w.t()), F.linear(X, W.t()), rtol=1e-4, atol=1e-4)
        w.mul_(0.9).add_(0.01)  # in place: the next product must read the new weights
        W.mul_(0.9).add_(0.01)


def reductions(rng, it):
    x = torch.randn(64, 300, generator=rng)
    t = x.to("tpu")
    for d in (0, 1):
        close(t.sum(d), x.sum(d), rtol=1e-5, atol=1e-4)
        close(t.amax(d), x.amax(d))
        close(t.var(d), x.var(d), rtol=1e-4, atol=1e-5)
        close(torch.softmax(t, d), torch.softmax(x, d), rtol=1e-5, atol=1e-6)
        close(t.argmax(d), x.argmax(d))


def views(rng, it):
    x = torch.randn(16, 24, generator=rng)
    t = x.to("tpu")
    for a, b in ((t, x), (t.t(), x.t()), (t[2:10:2], x[2:10:2]), (t.diagonal(), x.diagonal())):
        a.mul_(2).add_(1)
        b.mul_(2).add_(1)
        close(t, x)
    t.view(4, 96)[1].copy_(torch.arange(96.0).to("tpu"))
    x.view(4, 96)[1].copy_(torch.arange(96.0))
    close(t, x)


def indexing(rng, it):
    x = torch.randn(50, 8, generator=rng)
    idx = torch.randint(0, 50, (20,), generator=rng)
    t, i = x.to("tpu"), idx.to("tpu")
    close(t.index_select(0, i), x.index_select(0, idx))
    close(t[i], x[idx])
    close(torch.gather(t, 0, i[:8].unsqueeze(1).expand(8, 8)), torch.gather(x, 0, idx[:8].unsqueeze(1).expand(8, 8)))
    close(t[t > 0.5], x[x > 0.5])
    try:
        t.index_select(0, torch.tensor([50]).to("tpu"))
        torch.tpu.synchronize()  # fused eager raises it at the next cut
    except IndexError as e:
        assert "out of range" in str(e) or "out of bounds" in str(e), e
    else:
        raise AssertionError("an index out of range was not refused")


def random_numbers(rng, it):
    g = torch.Generator(device="tpu")
    g.manual_seed(it)
    a = torch.randn(1000, device="tpu", generator=g)
    u = torch.empty(500, device="tpu").uniform_(-2, 3, generator=g)
    g.manual_seed(it)
    close(torch.randn(1000, device="tpu", generator=g), a.cpu())
    close(torch.empty(500, device="tpu").uniform_(-2, 3, generator=g), u.cpu())
    assert -2 <= u.min().item() and u.max().item() < 3
    assert abs(a.mean().item()) < 0.2


def foreach(rng, it):
    xs = [torch.randn(n, generator=rng) for n in (3, 17, 64, 1)]
    ys = [torch.randn(n, generator=rng) for n in (3, 17, 64, 1)]
    ts, us = [x.to("tpu") for x in xs], [y.to("tpu") for y in ys]
    torch._foreach_add_(ts, us, alpha=0.5)
    torch._foreach_add_(xs, ys, alpha=0.5)
    torch._foreach_mul_(ts, 1.5)
    torch._foreach_mul_(xs, 1.5)
    for t, x in zip(ts, xs):
        close(t, x, rtol=1e-6, atol=1e-6)
    for a, b in zip(torch._foreach_norm(ts), torch._foreach_norm(xs)):
        close(a, b, rtol=1e-5, atol=1e-6)


def training(rng, it):
    torch.manual_seed(it)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
    copy = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
    copy.load_state_dict(model.state_dict())
    copy.to("tpu")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, copy)]
    for step in range(3):
        x = torch.randn(32, 64, generator=rng)
        y = torch.randint(0, 10, (32,), generator=rng)
        for m, opt, dev in ((model, opts[0], "cpu"), (copy, opts[1], "tpu")):
            opt.zero_grad()
            F.cross_entropy(m(x.to(dev)), y.to(dev)).backward()
            opt.step()
        for p, q in zip(model.parameters(), copy.parameters()):
            close(q, p.detach(), rtol=1e-4, atol=1e-5)


MIXES = [numbers, products, reductions, views, indexing, random_numbers, foreach, training]


def test_eight_threads_of_eager_ops():
    deadline = time.monotonic() + SECONDS
    errors, counts = [], [0] * len(MIXES)

    def worker(n, mix):
        rng = torch.Generator().manual_seed(n)
        it = 0
        try:
            while time.monotonic() < deadline and not errors:
                mix(rng, it)
                it += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((mix.__name__, it, repr(e)))
        counts[n] = it

    threads = [threading.Thread(target=worker, args=(n, mix), daemon=True) for n, mix in enumerate(MIXES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=SECONDS + 300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == [], errors
    assert all(c > 0 for c in counts), dict(zip((m.__name__ for m in MIXES), counts))
    assert torchtpu.stats()["fallbacks"] == {}
