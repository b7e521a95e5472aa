"""torchtpu demo: train a small GPT-style language model for a few steps on
the "tpu" device (XLA's CPU plugin by default) beside the same run on
PyTorch's CPU, and print both losses.

    python examples/train_demo.py [--steps 10]

Nothing is downloaded: the model is built from a config and the data is a
synthetic token stream with structure to learn (every token predicts the next
by a fixed rule, with noise).
"""
import argparse
import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=128, d=64, heads=4, layers=2, seq=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def batches(steps, batch=8, seq=32, vocab=128):
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        idx = (start + 3 * torch.arange(seq + 1)) % vocab  # a learnable rule
        noise = torch.rand(idx.shape, generator=g) < 0.1
        idx = torch.where(noise, torch.randint(0, vocab, idx.shape, generator=g), idx)
        yield idx[:, :-1], idx[:, 1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyGPT()
    runs = {}
    for device in ("cpu", "tpu"):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        losses, t0 = [], time.perf_counter()
        for x, y in batches(args.steps):
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = F.cross_entropy(m(x).flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs[device] = (losses, time.perf_counter() - t0)
    print(f"platform: {torchtpu._C._info()['platform']}  model: {sum(p.numel() for p in model.parameters()):,} parameters")
    print(f"{'step':>4}  {'cpu loss':>10}  {'tpu loss':>10}  {'rel. diff':>9}")
    for i, (a, b) in enumerate(zip(runs["cpu"][0], runs["tpu"][0])):
        print(f"{i:>4}  {a:>10.6f}  {b:>10.6f}  {abs(a - b) / abs(a):>9.1e}")
    s = torchtpu.stats()
    print(f"time: cpu {runs['cpu'][1]:.2f}s, tpu {runs['tpu'][1]:.2f}s (includes {s['compile_seconds']:.2f}s "
          f"compiling {s['cache_misses']} programs; {s['cache_hits']} cache hits)")
    print(f"CPU fallbacks: {s['fallbacks'] or 'none'}")


if __name__ == "__main__":
    main()
