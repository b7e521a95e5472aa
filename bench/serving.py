"""Serving: vLLM on tpu (torchtpu's plugin) against vLLM's own CPU platform,
side by side in one run, medians of repeats.

    TORCHTPU_INTEGRATIONS_VENV=.venv-integrations \\
      python bench/serving.py [--prompts 64] [--input 128] [--output 128] \\
                              [--repeats 3] [--dtypes float32,bfloat16] [--eager] \\
                              [--concurrent 16] [--no-offline] [--no-server]

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

The server half starts vLLM's OpenAI server (`python -m
vllm.entrypoints.openai.api_server`, what `vllm serve` runs) per (dtype,
platform) and sends --concurrent streamed completions at once with the
`openai` client, --repeats times after a warm-up round: TTFT is the time to
a request's first token, TPOT the time per output token after it (one
chunk per token); medians over every request of the timed rounds.
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
    """The Llama, and a word-level tokenizer (word "wI" is token I) for the
    server, which takes text."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, CONFIG["vocab_size"])}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(path)
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


def client(url, model, concurrent, input_len, output_len, repeats):
    """In the integrations' Python: rounds of concurrent streamed
    completions -> TTFT and TPOT of each request, JSON on stdout."""
    import asyncio
    import random

    import openai

    async def one(api, prompt):
        t0 = time.perf_counter()
        stamps = []
        async for chunk in await api.completions.create(
                model=model, prompt=prompt, stream=True, temperature=0.0, max_tokens=output_len,
                extra_body={"ignore_eos": True, "return_token_ids": True}):
            stamps += [time.perf_counter()] * len(chunk.choices[0].token_ids or [])
        assert len(stamps) == output_len, len(stamps)
        return stamps[0] - t0, (stamps[-1] - stamps[0]) / (len(stamps) - 1)

    async def rounds():
        api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=3600)
        rng = random.Random(1)
        results = []
        for r in range(repeats + 1):
            batch = [" ".join(f"w{rng.randrange(3, CONFIG['vocab_size'])}" for _ in range(input_len))
                     for _ in range(concurrent)]
            got = await asyncio.gather(*(one(api, p) for p in batch))
            if r:  # round 0 warms up (compiles)
                results += got
        await api.close()
        return results

    results = asyncio.run(rounds())
    print("RESULT " + json.dumps({"ttft": [t for t, _ in results], "tpot": [t for _, t in results]}),
          flush=True)


def _env(platform):
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", TOKENIZERS_PARALLELISM="false",
               TORCHTPU_PROGRESS="0")
    if platform == "cpu":
        env["VLLM_PLUGINS"] = ""
    return env


def serve_one(python, path, dtype, platform, args):
    """vLLM's OpenAI server on |platform|, the client against it -> medians."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = _env(platform)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
    log = tempfile.NamedTemporaryFile("w+", suffix=".log")
    server = subprocess.Popen(
        [python, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--port", str(port),
         "--host", "127.0.0.1", "--dtype", dtype, "--max-model-len", str(args.input + args.output),
         "--max-num-seqs", str(args.concurrent), "--max-num-batched-tokens",
         str(max(2048, args.input)), "--no-enable-prefix-caching", "--kv-cache-memory-bytes",
         str(2 << 30), "--seed", "0", *(["--enforce-eager"] if args.eager else [])],
        env=env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 1800
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                sys.exit(f"{platform} {dtype} server did not start:\n{log.read()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(2)
        proc = subprocess.run([python, __file__, "--client", url, path, str(args.concurrent),
                               str(args.input), str(args.output), str(args.repeats)],
                              env=_env(platform), cwd=str(ROOT), capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        log.seek(0)
        served = log.read()
        if proc.returncode != 0 or not lines:
            sys.exit(f"{platform} {dtype} client failed:\n{proc.stderr[-4000:]}\n{served[-3000:]}")
        if f"device_config={platform}" not in served:
            sys.exit(f"asked for {platform}, the server's log names another device")
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    result = json.loads(lines[-1][len("RESULT "):])
    ttft, tpot = statistics.median(result["ttft"]), statistics.median(result["tpot"])
    print(f"  {dtype} {platform}: TTFT {ttft * 1e3:.0f} ms, TPOT {tpot * 1e3:.1f} ms "
          f"({len(result['ttft'])} requests)", flush=True)
    return ttft, tpot


def run_one(python, path, dtype, platform, args):
    env = _env(platform)
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
    parser.add_argument("--concurrent", type=int, default=16, help="server: requests at once")
    parser.add_argument("--no-offline", dest="offline", action="store_false")
    parser.add_argument("--no-server", dest="server", action="store_false")
    args = parser.parse_args()
    venv = Path(os.environ.get("TORCHTPU_INTEGRATIONS_VENV", ROOT / ".venv-integrations"))
    python = str(venv / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "llama")
        params = make_model(path)
        print(f"Llama {params / 1e6:.0f}M parameters, {args.prompts} prompts x {args.input} in, "
              f"{args.output} out, {'eager' if args.eager else 'compiled'}, "
              f"median of {args.repeats}; load average {os.getloadavg()[0]:.1f}")
        for dtype in args.dtypes.split(",") if args.offline else []:
            cpu, _ = run_one(python, path, dtype, "cpu", args)
            tpu, _ = run_one(python, path, dtype, "tpu", args)
            print(f"offline {dtype}: vLLM CPU {cpu:.1f} tok/s, tpu {tpu:.1f} tok/s, "
                  f"tpu/CPU {tpu / cpu:.2f}x", flush=True)
        for dtype in args.dtypes.split(",") if args.server else []:
            cpu = serve_one(python, path, dtype, "cpu", args)
            tpu = serve_one(python, path, dtype, "tpu", args)
            print(f"server {dtype}, {args.concurrent} at once: TTFT CPU {cpu[0] * 1e3:.0f} ms, "
                  f"tpu {tpu[0] * 1e3:.0f} ms ({tpu[0] / cpu[0]:.2f}x); TPOT CPU "
                  f"{cpu[1] * 1e3:.1f} ms, tpu {tpu[1] * 1e3:.1f} ms ({tpu[1] / cpu[1]:.2f}x)",
                  flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        url, model, concurrent, input_len, output_len, repeats = sys.argv[2:8]
        client(url, model, int(concurrent), int(input_len), int(output_len), int(repeats))
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker":
        path, dtype, eager, prompts, input_len, output_len, repeats = sys.argv[2:9]
        worker(path, dtype, bool(int(eager)), int(prompts), int(input_len), int(output_len),
               int(repeats))
    else:
        main()
