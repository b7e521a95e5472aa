"""Runs inside the vLLM environment (.venv-integrations, see scripts/integrations_env.sh) for
tests/test_vllm.py, which compares its outputs between platforms.

    python tests/vllm_generate.py make ARCH DIR        # a tiny model, random weights
    python tests/vllm_generate.py run OUT.json eager|compiled DIR...

`run` generates greedily with vLLM's offline engine on whichever platform
vLLM picks (VLLM_PLUGINS="" keeps vLLM's CPU platform; with torchtpu's
plugin it is tpu): first a few prompts, then all of them, so the second
batch hits the prefix cache, with a token budget small enough that the long
prompts are prefilled in chunks. It writes the tokens and top logprobs.
"""
import json
import sys

WORDS = [f"w{i}" for i in range(250)]

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


def generate(path, mode):
    import gc

    from vllm import LLM, SamplingParams

    llm = LLM(model=path, dtype="float32", enforce_eager=(mode == "eager"),
              enable_prefix_caching=True, enable_chunked_prefill=True,
              max_num_batched_tokens=64, max_num_seqs=16, max_model_len=256, block_size=32,
              kv_cache_memory_bytes=64 << 20, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=12, logprobs=5, ignore_eos=True)
    result = []
    for batch in [prompts()[:4], prompts()]:
        for request in llm.generate(batch, params, use_tqdm=False):
            o = request.outputs[0]
            result.append({
                "prompt_tokens": len(request.prompt_token_ids),
                "cached_tokens": request.num_cached_tokens or 0,
                "tokens": list(o.token_ids),
                "logprobs": [{str(k): v.logprob for k, v in step.items()} for step in o.logprobs],
            })
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
              "models": {p: generate(p, mode) for p in paths}}
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[2], sys.argv[3], sys.argv[4:])
