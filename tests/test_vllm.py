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
import subprocess
from pathlib import Path

import pytest

from conftest import write_dist_info

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("TORCHTPU_INTEGRATIONS_VENV", ROOT / ".venv-integrations"))
PYTHON = VENV / "bin" / "python"
SCRIPT = Path(__file__).with_name("vllm_generate.py")
ARCHS = ["llama", "qwen3_moe", "gemma3", "gemma2"]

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


@pytest.fixture(scope="module")
def runs(tmp_path_factory, metadata, models):
    """The engines side by side (each is one process): vLLM's CPU platform
    (VLLM_PLUGINS=""), tpu eager on every model, tpu compiled on Llama."""
    out = tmp_path_factory.mktemp("vllm_out")
    jobs = {"cpu": ("eager", models, ""), "tpu": ("eager", models, None),
            "tpu_compiled": ("compiled", models[:1], None)}
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
    reference, result = cpu["models"][path], tpu["models"][path]
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
    _compare(runs["cpu"]["models"][path], runs["tpu_compiled"]["models"][path])
