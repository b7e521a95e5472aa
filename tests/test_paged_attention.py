"""torch.ops.torchtpu.paged_attention, vLLM's paged attention on tpu: one
ragged call over a batch mixing prefills, chunked prefills and decodes,
with the KV-cache write, against a float64 reference in plain PyTorch on the
CPU (tests/paged_reference.py). Eager and compiled; the hand-written kernel
here, XLA's composite in a subprocess (TORCHTPU_KERNELS=0)."""
import os
import re
import subprocess
import sys

import pytest
import torch

import torchtpu  # noqa: F401
from conftest import dumped_programs
from paged_reference import make_batch, reference

KERNEL = os.environ.get("TORCHTPU_KERNELS", "1") in ("1", "on", "all") or "paged_attention" in os.environ.get(
    "TORCHTPU_KERNELS", "")

MIXED = [(0, 7), (5, 1), (9, 3), (3, 1), (0, 1), (16, 5)]  # prefills, decodes, chunked prefills

# name: (requests, make_batch arguments, op arguments)
CASES = {
    "mixed_gqa": (MIXED, dict(pad_tokens=3), {}),
    "decode": ([(12, 1), (3, 1), (30, 1), (1, 1)], dict(heads=4, kv_heads=4), {}),
    "prefill": ([(0, 13)], dict(block_size=8), {}),
    "chunked_prefill": ([(16, 8), (7, 9)], dict(block_size=4), {}),
    "sliding_window": (MIXED, {}, dict(sliding_window=4)),
    "soft_cap": (MIXED, {}, dict(soft_cap=2.5)),
    "alibi": (MIXED, dict(heads=4, kv_heads=2), dict(alibi_slopes=torch.tensor([0.5, 0.25, 0.125, 0.0625]))),
    "all_at_once": (MIXED, dict(pad_tokens=2), dict(sliding_window=6, soft_cap=3.0,
                                                    alibi_slopes=torch.tensor([0.3, 0.2, 0.1, 0.05]))),
    "bf16_cache": (MIXED, dict(cache_dtype=torch.bfloat16), {}),
    "head_size_64_mqa": ([(40, 1), (0, 20), (33, 4)], dict(heads=12, kv_heads=1, head_size=64, block_size=16), {}),
}


def _run(b, scale, device="tpu", fn=None, write=True, **kw):
    t = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in b.items()}
    alibi = kw.get("alibi_slopes")
    args = (t["query"], t["key"] if write else None, t["value"] if write else None, t["kv_cache"],
            t["slot_mapping"], t["block_table"], t["seq_lens"], t["query_start_loc"], t["max_query_len"], scale,
            kw.get("sliding_window", 0), kw.get("soft_cap", 0.0), None if alibi is None else alibi.to(device))
    out = (fn or torch.ops.torchtpu.paged_attention)(*args)
    return out.cpu(), t["kv_cache"].cpu()


def _check(name, fn=None):
    requests, batch_args, op_args = CASES[name]
    b = make_batch(requests, **batch_args)
    scale = b["query"].shape[-1] ** -0.5
    expected, cache = reference(b, scale, **op_args)
    got, got_cache = _run(b, scale, fn=fn, **op_args)
    torch.testing.assert_close(got_cache, cache, rtol=0, atol=0)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_eager(name):
    _check(name)


@pytest.mark.parametrize("name", ["mixed_gqa", "all_at_once", "bf16_cache"])
def test_compiled(name):
    """Under torch.compile (backend "tpu"): FakeTensor sizes the op through
    its meta function, the cache write is functionalized and written back."""
    def step(*args):
        return torch.ops.torchtpu.paged_attention(*args) * 1.0

    _check(name, fn=torch.compile(step, backend="tpu", dynamic=False))


def test_bf16_queries():
    """bfloat16 queries, keys and values (and so output), float32 cache: the
    math in float32, one rounding of the result."""
    b = make_batch(MIXED, dtype=torch.bfloat16, pad_tokens=1)
    expected, cache = reference(b, 0.25)
    got, got_cache = _run(b, 0.25)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got_cache, cache, rtol=0, atol=0)
    torch.testing.assert_close(got.double(), expected, rtol=1.6e-2, atol=1e-2)


def test_without_write_reads_the_cache_as_it_is():
    """key and value None (a layer that shares another's cache): nothing is
    written, the step's tokens read what the cache holds."""
    b = make_batch(MIXED)
    b_nowrite = dict(b, slot_mapping=torch.full_like(b["slot_mapping"], -1))
    expected, cache = reference(b_nowrite, 0.3)
    got, got_cache = _run(b, 0.3, write=False)
    torch.testing.assert_close(got_cache, b["kv_cache"], rtol=0, atol=0)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=2e-5)


def test_padding_tokens_give_zeros_and_write_nothing():
    b = make_batch([(3, 2), (0, 4)], pad_tokens=4)
    got, got_cache = _run(b, 0.5)
    assert (got[6:] == 0).all()
    _, cache = reference(b, 0.5)
    torch.testing.assert_close(got_cache, cache, rtol=0, atol=0)


def test_bad_arguments_raise_and_the_process_lives():
    b = {k: (v.to("tpu") if torch.is_tensor(v) else v) for k, v in make_batch(MIXED).items()}
    op = torch.ops.torchtpu.paged_attention

    def call(**over):
        a = dict(b, **over)
        return op(a["query"], a["key"], a["value"], a["kv_cache"], a["slot_mapping"], a["block_table"],
                  a["seq_lens"], a["query_start_loc"], a["max_query_len"], 0.5)

    with pytest.raises(RuntimeError, match=r"query heads \(4\) must be a multiple of the cache's kv heads \(3\)"):
        call(kv_cache=torch.zeros(4, 3, 4, 32, device="tpu"))
    with pytest.raises(RuntimeError, match="need seq_lens of 6 and query_start_loc of 7"):
        call(seq_lens=b["seq_lens"][:5])
    with pytest.raises(RuntimeError, match="block_table must be int32 or int64"):
        call(block_table=b["block_table"].float())
    with pytest.raises(RuntimeError, match=r"kv_cache must be \[blocks, kv_heads, block_size, 2 \* head_size\]"):
        call(kv_cache=torch.zeros(4, 2, 4, 16, device="tpu"))
    _check("decode")


@pytest.mark.strict_eager
@pytest.mark.skipif(not KERNEL, reason="the composite run")
def test_kernel_is_called(tmp_path):
    """On the CPU plugin the program is the hand-written kernel: it writes
    the cache in place (its cache result aliases the operand) and reads the
    blocks where they lie; no scatter, gather or dot is left."""
    code = ("import sys, torch, torchtpu\n"
            f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
            "from paged_reference import make_batch\n"
            "b = {k: (v.to('tpu') if torch.is_tensor(v) else v) for k, v in make_batch([(0, 3), (4, 1)]).items()}\n"
            "torch.ops.torchtpu.paged_attention(b['query'], b['key'], b['value'], b['kv_cache'], "
            "b['slot_mapping'], b['block_table'], b['seq_lens'], b['query_start_loc'], 3, 0.5).cpu()\n")
    texts = [t for n, t in dumped_programs(tmp_path, code).items() if "paged_attention" in n]
    assert len(texts) == 1, sorted(dumped_programs(tmp_path, code))
    assert 'call_target_name = "torchtpu_paged_attention"' in texts[0]
    assert "output_operand_aliases" in texts[0]
    assert not re.search(r"stablehlo\.(dot_general|gather|scatter)", texts[0])


@pytest.mark.skipif(os.environ.get("TORCHTPU_KERNELS") == "0", reason="already the composite run")
def test_composite():
    """The same cases on XLA's composite (TORCHTPU_KERNELS=0)."""
    env = dict(os.environ, TORCHTPU_KERNELS="0")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__, "-k",
                        "not test_composite"], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"\b1[0-9] passed", r.stdout), r.stdout[-500:]
