"""vLLM on tpu through torchtpu's platform plugin (torchtpu/vllm), against
vLLM's own CPU platform on the same float32 weights.

vLLM lives in its own environment (scripts/vllm_env.sh makes .venv-vllm,
which scripts/test.sh does when it is missing); these tests run its python
on tests/vllm_generate.py and are skipped only where that environment is
absent. The engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0): one
vLLM import per platform instead of three.
"""
import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("TORCHTPU_VLLM_VENV", ROOT / ".venv-vllm"))
PYTHON = VENV / "bin" / "python"
SCRIPT = Path(__file__).with_name("vllm_generate.py")
ARCHS = ["llama", "qwen3", "gemma3", "gemma2"]

pytestmark = pytest.mark.skipif(not (VENV / ".complete").exists(),
                                reason="no vLLM environment: bash scripts/vllm_env.sh")


@pytest.fixture(scope="module")
def metadata(tmp_path_factory):
    """torchtpu's distribution metadata as pyproject.toml declares it (what a
    pip install writes), first on the path: vLLM finds this checkout's
    plugin whatever torchtpu the system has installed."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    base = tmp_path_factory.mktemp("metadata")
    info = base / f"torchtpu-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torchtpu\nVersion: {project['version']}\n")
    lines = []
    for group, points in project["entry-points"].items():
        lines += [f"[{group}]", *(f"{name} = {target}" for name, target in points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return base


def _venv(metadata, *args, plugins=None, timeout=900):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(metadata), str(ROOT)]),
               VLLM_ENABLE_V1_MULTIPROCESSING="0",
               TORCHTPU_PROGRESS="0", TOKENIZERS_PARALLELISM="false")
    env.pop("TORCHTPU_EAGER", None)
    if plugins is not None:
        env["VLLM_PLUGINS"] = plugins
    proc = subprocess.run([str(PYTHON), str(SCRIPT), *args], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


@pytest.fixture(scope="module")
def models(tmp_path_factory, metadata):
    base = tmp_path_factory.mktemp("vllm_models")
    paths = [str(base / arch) for arch in ARCHS]
    for arch, path in zip(ARCHS, paths):
        _venv(metadata, "make", arch, path)
    return paths


def _generate(tmp_path_factory, metadata, models, mode, plugins):
    out = tmp_path_factory.mktemp("vllm_out") / "out.json"
    _venv(metadata, "run", str(out), mode, *models, plugins=plugins)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def cpu(tmp_path_factory, metadata, models):
    return _generate(tmp_path_factory, metadata, models, "eager", plugins="")


@pytest.fixture(scope="module")
def tpu(tmp_path_factory, metadata, models):
    return _generate(tmp_path_factory, metadata, models, "eager", plugins=None)


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
