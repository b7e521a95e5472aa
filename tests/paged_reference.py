"""Paged attention batches and their float64 reference in plain PyTorch on
the CPU, shared by tests/test_paged_attention.py and bench/paged_attention.py."""
import torch


def make_batch(requests, heads=4, kv_heads=2, head_size=16, block_size=4, cache_dtype=torch.float32,
               dtype=torch.float32, seed=0, pad_tokens=0, spare_blocks=3):
    """A step of vLLM's: |requests| is a list of (cached, new) token counts
    (new == 1 and cached > 0: a decode; cached > 0: a chunked prefill or a
    prefix-cache hit; cached == 0: a prefill). Returns a dict of CPU tensors:
    the cache with every request's cached tokens in random blocks (block 0
    is vLLM's null block, never used), the step's queries, keys and values,
    slot_mapping (-1 on |pad_tokens| trailing padding tokens), block_table
    (width the longest request's blocks, plus garbage ids past a request's
    own), seq_lens, query_start_loc, max_query_len."""
    g = torch.Generator().manual_seed(seed)
    lens = [c + n for c, n in requests]
    width = max([-(-s // block_size) for s in lens] + [1])
    num_blocks = 1 + sum(-(-s // block_size) for s in lens) + spare_blocks
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    table = torch.zeros(len(requests), width, dtype=torch.int32)
    cache = torch.randn(num_blocks, kv_heads, block_size, 2 * head_size, generator=g).to(cache_dtype)
    slots, starts = [], [0]
    for r, (cached, new) in enumerate(requests):
        own = -(-(cached + new) // block_size)
        table[r, :own] = torch.tensor(perm[:own], dtype=torch.int32)
        table[r, own:] = torch.randint(0, num_blocks, (width - own,), generator=g, dtype=torch.int32)
        perm = perm[own:]
        for p in range(cached, cached + new):
            slots.append(int(table[r, p // block_size]) * block_size + p % block_size)
        starts.append(starts[-1] + new)
    tokens = starts[-1] + pad_tokens
    slots += [-1] * pad_tokens
    return dict(
        query=torch.randn(tokens, heads, head_size, generator=g).to(dtype),
        key=torch.randn(tokens, kv_heads, head_size, generator=g).to(dtype),
        value=torch.randn(tokens, kv_heads, head_size, generator=g).to(dtype),
        kv_cache=cache, slot_mapping=torch.tensor(slots, dtype=torch.int64), block_table=table,
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        query_start_loc=torch.tensor(starts, dtype=torch.int32),
        max_query_len=max([n for _, n in requests] + [0]))


def reference(b, scale, sliding_window=0, soft_cap=0.0, alibi_slopes=None):
    """(output [tokens, heads, head_size] in float64, the written cache in
    its dtype): the write slot by slot, then each query token's attention
    over its request's keys, one at a time."""
    cache = b["kv_cache"].clone()
    d = b["query"].shape[-1]
    bs = cache.shape[2]
    for t, slot in enumerate(b["slot_mapping"].tolist()):
        if slot >= 0:
            cache[slot // bs, :, slot % bs] = torch.cat([b["key"][t], b["value"][t]], -1).to(cache.dtype)
    q = b["query"].double()
    heads, kv_heads = q.shape[1], cache.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    starts, lens = b["query_start_loc"].tolist(), b["seq_lens"].tolist()
    for r in range(len(lens)):
        blocks = b["block_table"][r].long()
        kv = cache[blocks].double().transpose(0, 1).reshape(kv_heads, -1, 2 * d)  # [kv_heads, keys, 2d]
        for t in range(starts[r], starts[r + 1]):
            pos = lens[r] - (starts[r + 1] - t)
            lo = max(0, pos - sliding_window + 1) if sliding_window else 0
            keys = torch.arange(lo, min(pos, kv.shape[1] - 1) + 1)
            for h in range(heads):
                k = kv[h // (heads // kv_heads), keys, :d]
                v = kv[h // (heads // kv_heads), keys, d:]
                s = (k @ q[t, h]) * scale
                if soft_cap:
                    s = soft_cap * torch.tanh(s / soft_cap)
                if alibi_slopes is not None:
                    s = s + float(alibi_slopes[h]) * (keys - pos).double()
                out[t, h] = torch.softmax(s, 0) @ v
    return out, cache
