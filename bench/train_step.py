"""Training-step benchmark: a GPT-style model (~10M parameters), forward and
forward+backward+AdamW, side by side in one run:

  torchtpu compiled     torch.compile(model, backend="tpu"), optimizer step compiled too
  torchtpu eager        the same model on "tpu", op by op
  torch cpu eager       PyTorch on the CPU (on the GPU with --ref-device cuda)
  torch inductor        torch.compile with Inductor on the CPU (or the GPU)
  jax jit               the same model written in JAX, step under jax.jit (jaxlib's own XLA)
  jax jit, xla-cpu-pjrt the same JAX program compiled by the XLA CPU plugin torchtpu runs on

    python bench/train_step.py [--repeats 7] [--layers 8] [--skip inductor,jax]
                               [--ref-device cuda] [--json results.json]

Each system lives in a worker process of its own (four runtimes in one
process share thread pools, the allocator and the caches, and one system's
step changed the next one's timings by 15%), built and warmed up first (its
first step, compiles included, is reported separately). Then --repeats rounds
ask every worker in turn for one forward and one step, so drift of the
machine affects all alike; medians are reported with ratios against torchtpu
compiled. Timings include a device sync per step. The on-disk compile cache
is off (cold compiles) unless --disk-cache.

Model FLOPs (matmuls: 2 per multiply-add, backward twice the forward) give
each system's achieved GFLOP/s, beside the machine's float32 matmul ceiling
(the best of torchtpu, PyTorch and JAX on 2048^3 products).
"""
import argparse
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import time

SYSTEMS = {  # name ({ref}: --ref-device) -> (skip key, kind)
    "torchtpu compiled": ("tpu_compiled", "tpu"),
    "torchtpu eager": ("tpu_eager", "eager"),
    "torch {ref} eager": ("cpu", "cpu"),
    "torch inductor ({ref})": ("inductor", "inductor"),
    "jax jit (jaxlib)": ("jax", "jax"),
    "jax jit (xla-cpu-pjrt)": ("jax_plugin", "jax_plugin"),
}


def model_flops(a):
    """Matmul FLOPs of one forward (attention scores and values included)."""
    tokens = a.batch * a.seq
    linear = a.layers * 12 * a.d * a.d + a.d * a.vocab
    attention = a.layers * 2 * 2 * a.batch * a.seq * a.seq * a.d
    return 2 * tokens * linear + attention


# --- the worker: one system -----------------------------------------------------

def build_gpt(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

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

    torch.manual_seed(0)
    model = GPT(a.vocab, a.d, a.heads, a.layers, a.seq)
    data = (torch.randint(0, a.vocab, (a.batch, a.seq)), torch.randint(0, a.vocab, (a.batch, a.seq)))
    return model, data


def torch_case(a, kind):
    import torch
    model, data = build_gpt(a)
    device = "tpu" if kind in ("tpu", "eager") else a.ref_device
    if device == "tpu":
        import torchtpu  # noqa: F401
    m = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    x, y = (t.to(device) for t in data)
    if kind == "tpu":
        fwd, opt_step = torch.compile(m, backend="tpu"), torch.compile(opt.step, backend="tpu")
    elif kind == "inductor":
        fwd, opt_step = torch.compile(m), torch.compile(opt.step)
    else:
        fwd, opt_step = m, opt.step
    sync = {"tpu": torch.tpu.synchronize, "cuda": torch.cuda.synchronize}.get(device, lambda: None)

    def forward():
        with torch.no_grad():
            fwd(x, y)
        sync()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fwd(x, y)
        loss.backward()
        opt_step()
        sync()

    def matmul():
        p, q = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
        p @ q
        sync()
        t0 = time.perf_counter()
        for _ in range(5):
            p @ q
        sync()
        return 5 * 2 * 2048 ** 3 / (time.perf_counter() - t0)

    return forward, step, matmul


def jax_case(a, kind):
    if kind == "jax_plugin":
        import xla_plugins.xla_cpu_pjrt as plugin
        from jax._src import xla_bridge
        xla_bridge.register_plugin("xla_cpu_pjrt", library_path=os.path.join(os.path.dirname(plugin.__file__),
                                                                              "xla_cpu_pjrt.so"))
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "xla_cpu_pjrt" if kind == "jax_plugin" else "cpu")
    model, data = build_gpt(a)
    params = {k: jnp.asarray(v.detach().numpy()) for k, v in model.named_parameters()}
    heads, layers = a.heads, a.layers

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
        p = jax.tree_util.tree_map(lambda p, m, v: p * (1 - lr * wd) - lr * (m / c1) / (jnp.sqrt(v / c2) + eps),
                                   p, m, v)
        return p, m, v

    @jax.jit
    def train_step(p, m, v, step, idx, targets):
        loss, g = jax.value_and_grad(loss_fn)(p, idx, targets)
        p, m, v = adamw(p, g, m, v, step)
        return p, m, v, loss

    loss_jit = jax.jit(loss_fn)
    idx, targets = (jnp.asarray(t.numpy()) for t in data)
    state = {"p": params, "m": jax.tree_util.tree_map(jnp.zeros_like, params),
             "v": jax.tree_util.tree_map(jnp.zeros_like, params), "step": 0}

    def forward():
        loss_jit(state["p"], idx, targets).block_until_ready()

    def step():
        state["step"] += 1
        state["p"], state["m"], state["v"], loss = train_step(state["p"], state["m"], state["v"],
                                                              float(state["step"]), idx, targets)
        jax.block_until_ready((state["p"], state["m"], state["v"], loss))

    def matmul():
        p = jax.random.normal(jax.random.PRNGKey(0), (2048, 2048), jnp.float32)
        mm = jax.jit(lambda x: x @ x)
        mm(p).block_until_ready()
        t0 = time.perf_counter()
        for _ in range(5):
            mm(p).block_until_ready()
        return 5 * 2 * 2048 ** 3 / (time.perf_counter() - t0)

    return forward, step, matmul


def timed_ms(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def worker(a):
    """Serves one system: "forward" / "step" / "matmul" requests on stdin, one
    JSON answer per line on the original stdout (libraries' prints go to
    stderr)."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    kind = SYSTEMS[a.worker][1]
    forward, step, matmul = jax_case(a, kind) if kind.startswith("jax") else torch_case(a, kind)
    first_forward = timed_ms(forward)
    forward()
    first_step = timed_ms(step)
    step()
    model, _ = build_gpt(a)
    info = {"first_forward": first_forward, "first_step": first_step,
            "params": sum(q.numel() for q in model.parameters())}
    if kind == "tpu":
        import torch
        import torchtpu
        info["platform"] = torchtpu._C._info()["platform"]
        info["torch"] = torch.__version__
        info["fallbacks"] = torchtpu.stats()["fallbacks"]
    out.write(json.dumps(info) + "\n")
    for line in sys.stdin:
        what = line.strip()
        if what == "quit":
            break
        value = matmul() / 1e9 if what == "matmul" else timed_ms(forward if what == "forward" else step)
        out.write(json.dumps(value) + "\n")


# --- the driver -----------------------------------------------------------------

class Worker:
    def __init__(self, system, name, argv):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", system] + argv,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {name} worker failed to start (its error is above)")
        self.info = json.loads(line)

    def ask(self, what):
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--skip", default="", help="comma-separated systems to skip: "
                   + ",".join(k for k, _ in SYSTEMS.values() if k != "tpu_compiled"))
    p.add_argument("--disk-cache", action="store_true", help="use the on-disk compile cache")
    p.add_argument("--ref-device", default="cpu", help="the device of the torch eager and Inductor systems (cuda)")
    p.add_argument("--json", help="also write the medians to this file, as JSON")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    # Compile times here are cold compiles: keep the on-disk cache out of the
    # measurement unless asked.
    if not a.disk_cache:
        os.environ["TORCHTPU_CACHE_DIR"] = "off"
    if a.worker:
        return worker(a)
    argv = [f"--{k.replace('_', '-')}={getattr(a, k)}"
            for k in ("layers", "d", "heads", "vocab", "seq", "batch", "ref_device")]
    if a.disk_cache:
        argv.append("--disk-cache")
    skip = set(filter(None, a.skip.split(",")))
    workers = []
    for name, (key, kind) in SYSTEMS.items():
        if key in skip:
            continue
        if kind.startswith("jax"):
            try:
                import jax  # noqa: F401
            except ImportError:
                continue
        workers.append(Worker(name, name.format(ref=a.ref_device), argv))
    samples = {w.name: {"forward": [], "step": []} for w in workers}
    for _ in range(a.repeats):  # interleaved rounds
        for w in workers:
            samples[w.name]["forward"].append(w.ask("forward"))
            samples[w.name]["step"].append(w.ask("step"))
    ceiling = max(w.ask("matmul") for w in workers)
    for w in workers:
        w.close()
    fwd_flops = model_flops(a)
    med = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    base = med["torchtpu compiled"]
    info = workers[0].info
    print(f"GPT: {info['params'] / 1e6:.1f}M parameters, batch {a.batch} x seq {a.seq}; platform {info['platform']}, "
          f"torch {info['torch']}; medians of {a.repeats} interleaved rounds, one process per system")
    print("| system | forward (ms) | train step (ms) | forward / torchtpu | step / torchtpu | step GFLOP/s "
          "| first step (ms) |")
    print("|---|---|---|---|---|---|---|")
    for w in workers:
        r = med[w.name]
        print(f"| {w.name} | {r['forward']:.1f} | {r['step']:.1f} | {r['forward'] / base['forward']:.2f}x | "
              f"{r['step'] / base['step']:.2f}x | {3 * fwd_flops / r['step'] / 1e6:.0f} | "
              f"{w.info['first_step']:.0f} |")
    print(f"model: {fwd_flops / 1e9:.1f} GFLOP per forward, {3 * fwd_flops / 1e9:.1f} per step; float32 matmul "
          f"ceiling here (best 2048^3 product): {ceiling:.0f} GFLOP/s")
    if "torchtpu eager" in med:
        need = 3 * (3 * fwd_flops) / med["torchtpu eager"]["step"] / 1e6
        print(f"a compiled step 3x faster than torchtpu eager would run at {need:.0f} GFLOP/s")
    print(f"stats: {info['fallbacks'] or 'no fallbacks'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"platform": info["platform"], "torch": info["torch"], "params": info["params"],
                       "repeats": a.repeats, "fallbacks": info["fallbacks"], "matmul_ceiling_gflops": ceiling,
                       "systems": {w.name: {"forward_ms": med[w.name]["forward"], "step_ms": med[w.name]["step"],
                                            "first_step_ms": w.info["first_step"]} for w in workers}}, f, indent=1)


if __name__ == "__main__":
    main()
