"""Runs inside the vLLM environment (.venv-integrations, see scripts/integrations_env.sh) for
tests/test_vllm.py, which compares its outputs between platforms.

    python tests/vllm_generate.py make ARCH DIR        # a tiny model, random weights
    python tests/vllm_generate.py run OUT.json eager|compiled|tp2 DIR...

`run` generates greedily with vLLM's offline engine on whichever platform
vLLM picks (VLLM_PLUGINS="" keeps vLLM's CPU platform; with torchtpu's
plugin it is tpu): first a few prompts, then all of them, so the second
batch hits the prefix cache, with a token budget small enough that the long
prompts are prefilled in chunks. It writes the tokens and top logprobs;
on the first model in eager mode also sampling beyond greedy (`sampling`),
compiled, the XLA programs built after warm-up (`compiles`); tp2 is eager
with tensor_parallel_size=2 (two worker processes over tpu_dist).
"""
import json
import sys

WORDS = [f"w{i}" for i in range(250)]
# The tokenizer's chat template (for the server's chat completions): each
# message's words between <s> and </s>, then <s> for the assistant's turn.
CHAT_TEMPLATE = ("{% for m in messages %}<s> {{ m['content'] }} </s> {% endfor %}"
                 "{% if add_generation_prompt %}<s>{% endif %}")

# Two layers, 4 query heads over 2 KV heads (GQA), head_dim 64 (vLLM's CPU
# attention takes no smaller); where a model alternates sliding-window and
# global layers, a 16-token window, under the longest prompts.
_BASE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, max_position_embeddings=512, rms_norm_eps=1e-6)
# Gemma ties its output to the embedding it scales by sqrt(hidden): at the
# others' initializer range the last prompt token wins every step.
_WINDOWED = dict(sliding_window=16, layer_types=["sliding_attention", "full_attention"],
                 query_pre_attn_scalar=64, initializer_range=0.02)
CONFIGS = {
    "llama": dict(_BASE, model_type="llama", architectures=["LlamaForCausalLM"],
                  tie_word_embeddings=False),
    "qwen3": dict(_BASE, model_type="qwen3", architectures=["Qwen3ForCausalLM"],
                  tie_word_embeddings=False),
    "gemma3": dict(_BASE, **_WINDOWED, model_type="gemma3_text",
                   architectures=["Gemma3ForCausalLM"]),
    "gemma2": dict(_BASE, **_WINDOWED, model_type="gemma2", architectures=["Gemma2ForCausalLM"],
                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
    # Four experts, two per token, every layer sparse (torchtpu/vllm/moe.py).
    "qwen3_moe": dict(_BASE, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"],
                      num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128,
                      decoder_sparse_step=1, norm_topk_prob=True, tie_word_embeddings=False),
}


def make(arch, path):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    fields = dict(CONFIGS[arch])
    fields.setdefault("initializer_range", 0.2)
    config = AutoConfig.for_model(fields.pop("model_type"), vocab_size=len(vocab), bos_token_id=1,
                                  eos_token_id=2, dtype="float32", **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(path)


def prompts():
    """Ten prompts of 3 to 120 words; six share a 40-word prefix."""
    shared = " ".join(WORDS[(7 * i) % 250] for i in range(40))
    out = []
    for n, length in enumerate([3, 9, 17, 30, 58, 120, 5, 44, 75, 90]):
        words = " ".join(WORDS[(13 * n + 5 * i) % 250] for i in range(length))
        out.append(f"{shared} {words}" if n % 2 else words)
    return out


def _outputs(requests):
    result = []
    for request in requests:
        o = request.outputs[0]
        result.append({
            "prompt_tokens": len(request.prompt_token_ids),
            "cached_tokens": request.num_cached_tokens or 0,
            "tokens": list(o.token_ids),
            "text": o.text,
            "finish": o.finish_reason,
            "logprobs": [{str(k): v.logprob for k, v in step.items()} for step in o.logprobs or []],
        })
    return result


def sampling(llm, greedy):
    """vLLM's sampler beyond greedy, on prompts()[:6] (whose greedy outputs
    are |greedy|): what is deterministic (penalties, stop strings, filters
    that keep one token) the test compares between platforms; seeded
    sampling (tpu only) must repeat itself."""
    from vllm import SamplingParams

    batch = prompts()[:6]
    base = dict(max_tokens=12, ignore_eos=True)
    # A stop string: each prompt's greedy 5th word; the output ends before it.
    stops = [SamplingParams(temperature=0.0, stop=[g["text"].split()[4]], **base) for g in greedy]
    cases = {
        "penalties": SamplingParams(temperature=0.0, presence_penalty=0.8, frequency_penalty=0.6,
                                    repetition_penalty=1.4, **base),
        "top_k_1": SamplingParams(temperature=1.0, top_k=1, **base),
        "top_p_tiny": SamplingParams(temperature=1.0, top_p=1e-6, **base),
        "min_p_1": SamplingParams(temperature=1.0, min_p=1.0, **base),
        "stop": stops,
    }
    out = {name: _outputs(llm.generate(batch, params, use_tqdm=False))
           for name, params in cases.items()}
    from vllm.platforms import current_platform
    if current_platform.is_cpu():
        # vLLM's CPU platform fails a seeded request whose prompt is
        # prefilled in chunks: the runner rewinds the request's generator
        # by its offset, which CPU generators lack ("CPU Generator does not
        # use offset"); tpu's Philox generator has one.
        return out
    # Seeded: prompt 3 twice with seed 7 and once with 8 in one batch, twice.
    seeded = [SamplingParams(temperature=1.0, top_k=50, top_p=0.9, min_p=0.01, max_tokens=12,
                             ignore_eos=True, seed=seed) for seed in (7, 7, 8)]
    out["seeded"] = [[r.outputs[0].token_ids for r in llm.generate([batch[3]] * 3, seeded,
                                                                     use_tqdm=False)]
                     for _ in range(2)]
    return out


def compiles(llm, params):
    """Compiled: the token counts the forward's programs were built for
    (each signature's first input's first dimension; the first 16 per
    owner), the forward programs a new mix of prompts builds after the
    first batches, and what the same mix builds again (nothing)."""
    import re

    import torchtpu

    def forward(report):
        # The model's forward ("compiled forward (llama.py:...)"): vLLM
        # torch.compiles smaller functions too (the logprobs' ranks).
        return {name: v for name, v in report.items() if name.startswith("compiled forward")}

    before = torchtpu.compiles()
    counts = {int(re.search(r"\[(\d+)", example).group(1))
              for v in forward(before).values() for example in v["examples"]}
    mix = prompts()[5:] + prompts()[:3]
    torchtpu.reset_compiles()
    llm.generate(mix, params, use_tqdm=False)
    new_mix = torchtpu.compiles()
    torchtpu.reset_compiles()
    llm.generate(mix, params, use_tqdm=False)
    again = torchtpu.compiles()
    # The paged attention's programs: one per request bucket (its block
    # table's rows), not per step's request count.
    tables = {int(m.group(1)) for report in (before, new_mix)
              for example in report.get("torchtpu::paged_attention", {"examples": []})["examples"]
              for m in [re.search(r"; int32\[(\d+),\d+\]", example)] if m}
    return {"forward_token_counts": sorted(counts), "attention_request_counts": sorted(tables),
            "new_mix_forward": sum(v["signatures"] for v in forward(new_mix).values()),
            "new_mix_total": new_mix.total(),
            "repeat_total": again.total(), "repeat_table": str(again)}


def generate(path, mode, with_sampling):
    import gc

    from vllm import LLM, SamplingParams

    llm = LLM(model=path, dtype="float32", enforce_eager=(mode != "compiled"),
              tensor_parallel_size=2 if mode == "tp2" else 1,
              enable_prefix_caching=True, enable_chunked_prefill=True,
              max_num_batched_tokens=64, max_num_seqs=16, max_model_len=256, block_size=32,
              kv_cache_memory_bytes=64 << 20, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=12, logprobs=5, ignore_eos=True)
    result = {"greedy": []}
    for batch in [prompts()[:4], prompts()]:
        result["greedy"] += _outputs(llm.generate(batch, params, use_tqdm=False))
    if with_sampling:
        result["sampling"] = sampling(llm, result["greedy"][4:10])
    if mode == "compiled":
        result["compiles"] = compiles(llm, params)
    if mode != "tp2":
        # Each layer's KV cache a storage of its own (tpu's runner; vLLM's
        # places them in one allocation, as the CPU platform keeps them).
        caches = llm.llm_engine.model_executor.driver_worker.worker.model_runner.kv_caches
        storages = {t.untyped_storage().data_ptr() for t in caches}
        result["kv_cache_own_storages"] = len(storages) == len(caches) and all(
            t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in caches)
    del llm
    gc.collect()
    # Each model its own distributed environment, as vLLM's tests do between
    # engines (a MoE model after a dense one finds no expert-parallel group).
    from vllm.distributed import cleanup_dist_env_and_memory
    cleanup_dist_env_and_memory()
    return result


def run(out_path, mode, paths):
    from vllm.platforms import current_platform

    result = {"platform": current_platform.device_type,
              "models": {p: generate(p, mode, with_sampling=(i == 0 and mode == "eager"))
                         for i, p in enumerate(paths)}}
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[2], sys.argv[3], sys.argv[4:])
