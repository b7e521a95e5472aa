"""Offline serving throughput: vLLM on tpu (torchtpu's plugin) against vLLM's
own CPU platform, side by side in one run, medians of repeats.

    TORCHTPU_INTEGRATIONS_VENV=.venv-integrations \\
      python bench/serving.py [--prompts 64] [--input 128] [--output 128] \\
                              [--repeats 3] [--dtypes float32,bfloat16] [--eager]

A Llama of about 100M parameters is built from its config with random
weights (no tokenizer: prompts are token ids, outputs are not detokenized).
Each (dtype, platform) runs in its own process of the integrations' Python
(VLLM_PLUGINS="" keeps vLLM's CPU platform): one engine, a warm-up generate
of the whole batch (compiles: programs, Inductor, disk caches), then
--repeats timed generates of --prompts prompts of --input tokens,
--output tokens each (ignore_eos). Reported: output tokens/s (median) and
tpu/CPU. By default each platform runs as vLLM would (compiled: torchtpu's
backend "tpu" with token buckets; the CPU platform's Inductor); --eager
runs both with enforce_eager. The timed part includes everything vLLM does
per step (scheduling, sampling, detokenization off).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=10, num_attention_heads=12,
              num_key_value_heads=4, head_dim=64, vocab_size=16384, max_position_embeddings=1024,
              rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.02)


def make_model(path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG, bos_token_id=1, eos_token_id=2))
    model.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def worker(path, dtype, eager, prompts, input_len, output_len, repeats):
    """In the integrations' Python: one engine, timed generates -> JSON on stdout."""
    import random

    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    llm = LLM(model=path, dtype=dtype, enforce_eager=eager, skip_tokenizer_init=True,
              max_model_len=input_len + output_len, max_num_seqs=prompts,
              max_num_batched_tokens=max(2048, input_len), enable_prefix_caching=False,
              kv_cache_memory_bytes=2 << 30, seed=0)
    rng = random.Random(0)
    batch = [{"prompt_token_ids": [rng.randrange(3, CONFIG["vocab_size"]) for _ in range(input_len)]}
             for _ in range(prompts)]
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True, detokenize=False)
    llm.generate(batch, params, use_tqdm=False)  # warm-up
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = llm.generate(batch, params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        rates.append(sum(len(o.outputs[0].token_ids) for o in out) / seconds)
    print("RESULT " + json.dumps({"platform": current_platform.device_type, "rates": rates}), flush=True)


def run_one(python, path, dtype, platform, args):
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", TOKENIZERS_PARALLELISM="false",
               TORCHTPU_PROGRESS="0")
    if platform == "cpu":
        env["VLLM_PLUGINS"] = ""
    cmd = [python, __file__, "--worker", path, dtype, str(int(args.eager)), str(args.prompts),
           str(args.input), str(args.output), str(args.repeats)]
    proc = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{platform} {dtype} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    if result["platform"] != platform:
        sys.exit(f"asked for {platform}, vLLM ran on {result['platform']}")
    print(f"  {dtype} {platform}: {['%.1f' % r for r in result['rates']]} tok/s", flush=True)
    return statistics.median(result["rates"]), result["rates"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--input", type=int, default=128)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--eager", action="store_true", help="enforce_eager on both platforms")
    args = parser.parse_args()
    venv = Path(os.environ.get("TORCHTPU_INTEGRATIONS_VENV", ROOT / ".venv-integrations"))
    python = str(venv / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "llama")
        params = make_model(path)
        print(f"Llama {params / 1e6:.0f}M parameters, {args.prompts} prompts x {args.input} in, "
              f"{args.output} out, {'eager' if args.eager else 'compiled'}, "
              f"median of {args.repeats}; load average {os.getloadavg()[0]:.1f}")
        print(f"{'dtype':<10} {'vLLM CPU tok/s':>15} {'tpu tok/s':>10} {'tpu/CPU':>8}")
        for dtype in args.dtypes.split(","):
            cpu, _ = run_one(python, path, dtype, "cpu", args)
            tpu, _ = run_one(python, path, dtype, "tpu", args)
            print(f"{dtype:<10} {cpu:>15.1f} {tpu:>10.1f} {tpu / cpu:>7.2f}x", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        path, dtype, eager, prompts, input_len, output_len, repeats = sys.argv[2:9]
        worker(path, dtype, bool(int(eager)), int(prompts), int(input_len), int(output_len),
               int(repeats))
    else:
        main()
