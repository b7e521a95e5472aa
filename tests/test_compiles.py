"""Compiles a user can see: torchtpu.compiles() reports, per eager op, fused
eager trace and compiled function, the distinct signatures compiled, the
seconds and the disk-cache loads; an op or function past the compile limit
warns once, naming what changed and the remedy; TORCHTPU_LOG=compiles logs
each compile. A steady state compiles nothing."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

import torchtpu


@pytest.fixture
def limit():
    old = torchtpu.get_compile_limit()
    torchtpu.reset_compiles()
    torchtpu.set_compile_limit(8)  # the default; conftest raises it for the rest of the suite
    yield
    torchtpu.set_compile_limit(old)
    torchtpu.reset_compiles()


def _new_programs():
    """Programs compiled or loaded since reset_compiles(), and distinct signatures built."""
    report = torchtpu.compiles()
    return report.total("compiled") + report.total("loaded"), report.total("signatures")


@pytest.mark.strict_eager  # each op compiles its own program (fused eager builds them, compiles its traces)
def test_report_counts_signatures_and_warns_once_past_the_limit(limit):
    torchtpu.set_compile_limit(3)
    base = 7919  # shapes no other test compiles
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(base, base + 5):
            torch.ones(n, device="tpu").neg()
        for n in range(base, base + 5):  # the same signatures again: nothing new
            torch.ones(n, device="tpu").neg()
    report = torchtpu.compiles()
    neg = report["aten::neg"]
    assert neg["kind"] == "op" and neg["signatures"] == 5 and neg["compiled"] + neg["loaded"] == 5, neg
    assert neg["examples"][0] == f"float32[{base}]" and neg["seconds"] > 0
    ours = [str(w.message) for w in caught if "'aten::neg' hit the compile limit" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "(3 signatures" in ours[0]
    assert f"what changed: shape of argument 0 (float32[{base}] -> float32[{base + 3}])" in ours[0], ours[0]
    assert "Pad inputs to a few fixed sizes (buckets)" in ours[0] and "mark_dynamic" in ours[0], ours[0]
    assert "aten::neg" in str(report)


def test_warning_names_a_changed_dtype_and_layout(limit):
    torchtpu.set_compile_limit(2)
    x = torch.ones(6091, 3, device="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x.exp()
        x.t().exp()  # layout
        x.double().exp()  # dtype
    msgs = [str(w.message) for w in caught if "'aten::exp' hit the compile limit" in str(w.message)]
    assert len(msgs) == 1 and "dtype of argument 0 (float32[6091,3] -> float64[6091,3])" in msgs[0], msgs
    assert torchtpu.compiles()["aten::exp"]["examples"][1] == "float32[3,6091]{1,3}"


def _train_steps(model, opt, steps, step_fn=None):
    """|steps| steps of a training loop that logs its loss each step (a sync:
    fused eager's programs then end where a step ends)."""
    for _ in range(steps):
        x = torch.randn(8, 16, device="tpu")
        if step_fn is not None:
            loss = step_fn(x)
        else:
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        assert torch.isfinite(torch.tensor(loss.item()))


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
def test_training_loop_compiles_nothing_after_warm_up(limit, mode):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step_fn = None
    if mode == "compiled":
        torch._dynamo.reset()

        @torch.compile(backend="tpu")
        def step_fn(x):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
    with torchtpu.eager_mode("fused" if mode == "fused" else "strict"):
        _train_steps(model, opt, 3, step_fn)
        programs, signatures = _new_programs()
        assert programs > 0 or mode != "strict"  # the warm-up compiled (or loaded) its programs
        if mode == "compiled":
            assert any(v["kind"] == "compiled" and k.startswith("compiled step_fn (")
                       for k, v in torchtpu.compiles().items()), str(torchtpu.compiles())
        torchtpu.reset_compiles()
        _train_steps(model, opt, 4, step_fn)
    assert _new_programs() == (0, 0), str(torchtpu.compiles())


def _tiny_causal_lm():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to("tpu").eval()


def _generate(model, **kw):
    ids = torch.tensor([[5, 9, 12, 3]], device="tpu")
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                              pad_token_id=0, **kw)


def test_generate_with_a_static_cache_compiles_nothing_after_warm_up(limit):
    model = _tiny_causal_lm()
    first = _generate(model, cache_implementation="static")
    torchtpu.reset_compiles()
    again = _generate(model, cache_implementation="static")
    assert _new_programs() == (0, 0), str(torchtpu.compiles())
    assert torch.equal(first.cpu(), again.cpu())


def test_generate_with_the_dynamic_cache_warns_with_the_remedy(limit):
    model = _tiny_causal_lm()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _generate(model)
    msgs = [str(w.message) for w in caught if "hit the compile limit" in str(w.message)]
    assert msgs, [str(w.message) for w in caught]
    assert any("shape of argument" in m and 'cache_implementation="static"' in m for m in msgs), msgs
    assert max(v["signatures"] for v in torchtpu.compiles().values()) > torchtpu.get_compile_limit()


def test_log_compiles(tmp_path):
    code = ("import torch, torchtpu\n"
            "torch.ones(7907, device='tpu').sin().cpu()\n")
    env = dict(os.environ, TORCHTPU_LOG="compiles", TORCHTPU_CACHE_DIR=str(tmp_path), TORCHTPU_EAGER="strict")
    for run, how in enumerate((" s\n", " s from the disk cache\n")):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        lines = [l for l in r.stderr.splitlines(keepends=True) if l.startswith("torchtpu: ")]
        word = "compiled" if run == 0 else "loaded"
        assert any(l.startswith(f"torchtpu: {word} aten::sin (float32[7907]) in ") and l.endswith(how)
                   for l in lines), r.stderr
    env["TORCHTPU_LOG"] = "compile"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "TORCHTPU_LOG='compile': unknown topic(s) compile; expected: compiles" in r.stderr


def test_stats_count_what_the_report_counts():
    """torchtpu.stats()' compile fields are the report's totals: programs
    compiled (cache_misses), loaded from the disk cache (cache_loads), and
    the seconds spent on both (compile_seconds; it counted XLA's compiles
    only, not loads)."""
    torchtpu.reset_stats()
    torchtpu.reset_compiles()
    x = torch.arange(6.0, device="tpu")
    (x.sin() * 3).cpu()  # programs most likely on disk from an earlier run
    torch.arange(float(1000 + os.getpid() % 4096), device="tpu").cos().cpu()  # a shape not seen before
    stats, report = torchtpu.stats(), torchtpu.compiles()
    assert report.total("compiled") + report.total("loaded") > 0
    assert stats["cache_misses"] == report.total("compiled")
    assert stats["cache_loads"] == report.total("loaded")
    assert stats["compile_seconds"] == pytest.approx(report.total("seconds"), rel=1e-6, abs=1e-6)
