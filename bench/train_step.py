"""Training-step benchmark: a GPT-style model (~10M parameters), forward and
forward+backward+AdamW, side by side in one process:

  torchtpu compiled   torch.compile(model, backend="tpu"), optimizer step compiled too
  torchtpu eager      the same model on "tpu", op by op
  torch cpu eager     PyTorch on the CPU
  torch inductor      torch.compile with Inductor on the CPU
  jax jit             the same model written in JAX, step under jax.jit

    python bench/train_step.py [--repeats 7] [--layers 8] [--skip inductor,jax]

Every system is built and warmed up first (its first step, compiles
included, is reported separately); then --repeats rounds each time one step
of every system in turn, so drift of the machine affects all alike, and the
medians are reported with ratios against torchtpu compiled. Timings include
a device sync per step. The on-disk compile cache is off (cold compiles)
unless --disk-cache.
"""
import argparse
import os
import sys

# Compile times here are cold compiles: keep the on-disk cache out of the
# measurement unless asked (--disk-cache).
if "--disk-cache" not in sys.argv:
    os.environ["TORCHTPU_CACHE_DIR"] = "off"
import copy
import math
import statistics
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
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def first_call_ms(fn, device):
    """The first call (compiles included), then one warm-up call."""
    t0 = time.perf_counter()
    fn()
    sync(device)
    first = (time.perf_counter() - t0) * 1e3
    fn()
    sync(device)
    return first


def timed_ms(fn, device):
    t0 = time.perf_counter()
    fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e3


def torch_case(model, data, device, mode):
    m = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    x, y = (t.to(device) for t in data)
    if mode == "tpu":
        fwd = torch.compile(m, backend="tpu")
        opt_step = torch.compile(opt.step, backend="tpu")
    elif mode == "inductor":
        fwd = torch.compile(m)
        opt_step = torch.compile(opt.step)
    else:
        fwd, opt_step = m, opt.step

    def forward():
        with torch.no_grad():
            return fwd(x, y)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fwd(x, y)
        loss.backward()
        opt_step()
        return loss

    return device, forward, step


def jax_case(model, data):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_platforms", "cpu")
    params = {k: jnp.asarray(v.detach().numpy()) for k, v in model.named_parameters()}
    heads = model.blocks[0].heads
    layers = len(model.blocks)

    def layer_norm(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * w + b

    def linear(p, name, x, bias=True):
        y = x @ p[name + ".weight"].T
        return y + p[name + ".bias"] if bias else y

    def loss_fn(p, idx, targets):
        b, t = idx.shape
        x = p["tok.weight"][idx] + p["pos.weight"][jnp.arange(t)]
        d = x.shape[-1]
        mask = jnp.tril(jnp.ones((t, t), bool))
        for i in range(layers):
            pre = f"blocks.{i}."
            qkv = linear(p, pre + "qkv", layer_norm(x, p[pre + "ln1.weight"], p[pre + "ln1.bias"]))
            q, k, v = jnp.split(qkv, 3, axis=-1)
            q, k, v = (z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for z in (q, k, v))
            att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(d // heads)
            att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
            y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
            x = x + linear(p, pre + "proj", y)
            h = layer_norm(x, p[pre + "ln2.weight"], p[pre + "ln2.bias"])
            x = x + linear(p, pre + "fc2", jax.nn.gelu(linear(p, pre + "fc1", h), approximate=True))
        logits = linear(p, "head", layer_norm(x, p["ln.weight"], p["ln.bias"]), bias=False)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()

    def adamw(p, g, m, v, step, lr=1e-4, b1=0.9, b2=0.999, eps=1e-8, wd=0.01):
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** step, 1 - b2 ** step
        p = jax.tree_util.tree_map(lambda p, m, v: p * (1 - lr * wd) - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), p, m, v)
        return p, m, v

    @jax.jit
    def train_step(p, m, v, step, idx, targets):
        loss, g = jax.value_and_grad(loss_fn)(p, idx, targets)
        p, m, v = adamw(p, g, m, v, step)
        return p, m, v, loss

    forward = jax.jit(loss_fn)
    idx, targets = (jnp.asarray(t.numpy()) for t in data)
    state = {"p": params, "m": jax.tree_util.tree_map(jnp.zeros_like, params),
             "v": jax.tree_util.tree_map(jnp.zeros_like, params), "step": 0}

    def run_forward():
        forward(state["p"], idx, targets).block_until_ready()

    def run_step():
        state["step"] += 1
        state["p"], state["m"], state["v"], loss = train_step(state["p"], state["m"], state["v"],
                                                              float(state["step"]), idx, targets)
        loss.block_until_ready()

    return "cpu", run_forward, run_step


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--skip", default="", help="comma-separated cases to skip: tpu_eager,cpu,inductor,jax")
    p.add_argument("--disk-cache", action="store_true", help="use the on-disk compile cache")
    args = p.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d, 8, args.layers, args.seq)
    nparams = sum(q.numel() for q in model.parameters())
    data = (torch.randint(0, args.vocab, (args.batch, args.seq)), torch.randint(0, args.vocab, (args.batch, args.seq)))
    cases = {"torchtpu compiled": torch_case(model, data, "tpu", "tpu")}
    if "tpu_eager" not in skip:
        cases["torchtpu eager"] = torch_case(model, data, "tpu", "eager")
    if "cpu" not in skip:
        cases["torch cpu eager"] = torch_case(model, data, "cpu", "eager")
    if "inductor" not in skip:
        cases["torch inductor (cpu)"] = torch_case(model, data, "cpu", "inductor")
    if "jax" not in skip:
        case = jax_case(model, data)
        if case:
            cases["jax jit (cpu)"] = case
    results = {}
    for name, (device, forward, step) in cases.items():
        results[name] = {"first_forward": first_call_ms(forward, device), "first_step": first_call_ms(step, device),
                         "forward": [], "step": []}
    for _ in range(args.repeats):  # interleaved rounds
        for name, (device, forward, step) in cases.items():
            results[name]["forward"].append(timed_ms(forward, device))
            results[name]["step"].append(timed_ms(step, device))
    for r in results.values():
        r["forward"] = statistics.median(r["forward"])
        r["step"] = statistics.median(r["step"])
    base = results["torchtpu compiled"]
    print(f"GPT: {nparams / 1e6:.1f}M parameters, batch {args.batch} x seq {args.seq}; platform "
          f"{torchtpu._C._info()['platform']}, torch {torch.__version__}; medians of {args.repeats} interleaved rounds")
    print("| system | forward (ms) | train step (ms) | step / torchtpu compiled | first step (ms) |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['forward']:.1f} | {r['step']:.1f} | {r['step'] / base['step']:.2f}x | "
              f"{r['first_step']:.0f} |")
    print(f"stats: {torchtpu.stats()['fallbacks'] or 'no fallbacks'}")


if __name__ == "__main__":
    main()
