"""Paged attention benchmark: torch.ops.torchtpu.paged_attention (the
hand-written kernel, and XLA's composite with TORCHTPU_KERNELS=attention,
matmul), against the PyTorch-ops path vLLM's tpu backend ran before it
(scatter the step's keys and values, gather each request's blocks, pad the
queries, masked attention: about 30 eager ops per layer) on tpu and on the
CPU, side by side in one run.

    python bench/paged_attention.py [--repeats 7] [--calls 8]

Two steps of vLLM's: a decode batch (32 requests, contexts of 100-1000
tokens) and a mixed batch (two prefills of 128 tokens, a chunk of 64 over
256 cached, 13 decodes); 8 query heads over 2 key heads of 64, blocks of
16, a float32 cache. A call is --calls layers (each writes the step's keys
and values, then attends), one sync at the end. Each system runs in a
process of its own (the kernel switch is read at import); rounds interleave
the systems. Medians in ms per call, ratios against the kernel. The
PyTorch-ops path gets its host-side metadata (rows, positions) built once,
outside the timing, as vLLM's builder did once per step.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

SYSTEMS = {"tpu kernel": ("tpu", "1"), "tpu composite": ("tpu", "attention,matmul"),
           "tpu PyTorch ops": ("ops", "1"), "cpu PyTorch ops": ("cpu", None)}
STEPS = {
    "decode": [(100 + 29 * i, 1) for i in range(32)],
    "mixed": [(0, 128), (0, 128), (256, 64)] + [(150 + 60 * i, 1) for i in range(13)],
}


def ops_metadata(b, device):
    """The old builder's host-side arrays: each token's row in the padded
    [requests * longest query] and each padded query's position."""
    import torch
    starts, lens = b["query_start_loc"].long(), b["seq_lens"].long()
    num_reqs, n = len(lens), int(starts[-1])
    query_lens = starts[1:] - starts[:-1]
    longest = int(query_lens.max())
    request = torch.repeat_interleave(torch.arange(num_reqs), query_lens)
    rows = request * longest + torch.arange(n) - starts[request]
    i = torch.arange(longest)
    query_pos = torch.where(i < query_lens[:, None], (lens - query_lens)[:, None] + i, torch.full_like(i, -1))
    return rows.to(device), query_pos.to(device), longest


def ops_attention(q, k, v, cache, slots, table, rows, query_pos, longest, scale):
    """The PyTorch-ops path of torchtpu/vllm/attention.py before the op."""
    import torch
    n, d = slots.shape[0], q.shape[-1]
    bs = cache.shape[2]
    s = slots.clamp(min=0)
    cache[s // bs, :, s % bs] = torch.cat([k[:n], v[:n]], dim=-1).to(cache.dtype)
    num_reqs, blocks = table.shape
    _, kv_heads, _, _ = cache.shape
    num_keys = blocks * bs
    kv = cache[table.long()].transpose(1, 2).reshape(num_reqs, kv_heads, num_keys, 2 * d).to(q.dtype)
    kk, vv = kv[..., :d], kv[..., d:]
    heads = q.shape[1]
    kk, vv = kk.repeat_interleave(heads // kv_heads, dim=1), vv.repeat_interleave(heads // kv_heads, dim=1)
    qp = q.new_zeros(num_reqs * longest, heads, d).index_copy(0, rows, q[:n])
    qp = qp.reshape(num_reqs, longest, heads, d).transpose(1, 2)
    scores = torch.matmul(qp, kk.transpose(-1, -2)).float() * scale
    key = torch.arange(num_keys, device=q.device)
    seen = (key <= query_pos[:, :, None])[:, None]
    scores = scores.masked_fill(~seen, torch.finfo(torch.float32).min)
    out = torch.matmul(torch.softmax(scores, dim=-1).to(vv.dtype), vv).transpose(1, 2).reshape(-1, heads, d)
    return out.index_select(0, rows)


def worker(a):
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import torch
    from paged_reference import make_batch
    kind = SYSTEMS[a.worker][0]
    device = "cpu" if kind == "cpu" else "tpu"
    if device == "tpu":
        import torchtpu  # noqa: F401
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    calls = {}
    for name, requests in STEPS.items():
        b = make_batch(requests, heads=8, kv_heads=2, head_size=64, block_size=16, seed=1)
        t = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in b.items()}
        scale = 64 ** -0.5
        if kind in ("ops", "cpu"):
            rows, query_pos, longest = ops_metadata(b, device)

            def call(t=t, rows=rows, query_pos=query_pos, longest=longest, scale=scale):
                for _ in range(a.calls):
                    ops_attention(t["query"], t["key"], t["value"], t["kv_cache"], t["slot_mapping"],
                                  t["block_table"], rows, query_pos, longest, scale)
                sync()
        else:
            def call(t=t, scale=scale):
                for _ in range(a.calls):
                    torch.ops.torchtpu.paged_attention(
                        t["query"], t["key"], t["value"], t["kv_cache"], t["slot_mapping"], t["block_table"],
                        t["seq_lens"], t["query_start_loc"], t["max_query_len"], scale)
                sync()
        call()
        call()
        calls[name] = call
    out.write("ready\n")
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        t0 = time.perf_counter()
        calls[line.strip()]()
        out.write(json.dumps((time.perf_counter() - t0) * 1e3) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    os.environ["TORCHTPU_CACHE_DIR"] = "off"
    if a.worker:
        return worker(a)
    procs = {}
    for name, (_, kernels) in SYSTEMS.items():
        env = dict(os.environ, **({"TORCHTPU_KERNELS": kernels} if kernels else {}))
        procs[name] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", name,
                                        f"--calls={a.calls}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, env=env)
        if procs[name].stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {name} worker failed to start (its error is above)")
    samples = {n: {s: [] for s in STEPS} for n in procs}

    def ask(name, what):
        procs[name].stdin.write(what + "\n")
        procs[name].stdin.flush()
        return json.loads(procs[name].stdout.readline())

    for _ in range(a.repeats):
        for name in procs:
            for step in STEPS:
                samples[name][step].append(ask(name, step))
    for name in procs:
        procs[name].stdin.write("quit\n")
        procs[name].stdin.flush()
        procs[name].wait()
    med = {n: {s: statistics.median(v) for s, v in x.items()} for n, x in samples.items()}
    base = med["tpu kernel"]
    print(f"{a.calls} paged-attention layers per call (write + attend), 8 heads over 2, head 64, blocks of 16, "
          f"float32; medians of {a.repeats} interleaved rounds, ms per call")
    print("| system | decode (ms) | mixed (ms) | decode / kernel | mixed / kernel |")
    print("|---|---|---|---|---|")
    for name, r in med.items():
        print(f"| {name} | {r['decode']:.2f} | {r['mixed']:.2f} | {r['decode'] / base['decode']:.2f}x | "
              f"{r['mixed'] / base['mixed']:.2f}x |")


if __name__ == "__main__":
    main()
