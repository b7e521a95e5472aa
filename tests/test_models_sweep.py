"""python -m torchtpu.coverage models (torchtpu_tools/models_sweep.py): the
Hugging Face sweep's pieces, on one small architecture in this process, its
comparison failing where numbers differ, its time limit, and its report."""
import pytest
import torch

pytest.importorskip("transformers")

from torchtpu_tools import models_sweep as sweep  # noqa: E402


def test_one_class_per_model_type_from_a_small_config():
    archs = sweep.architectures()
    types = [t for t, _ in archs]
    assert len(types) == len(set(types)) > 500
    assert dict(archs)["gpt2"] == "GPT2LMHeadModel" and dict(archs)["vit"] == "ViTForImageClassification"
    model, inputs = sweep.build("gpt2", "GPT2LMHeadModel")
    assert model.config.n_embd == 32 and model.config.n_layer == 2 and model.config.vocab_size == 99
    assert model.config.eos_token_id < 99
    assert inputs["input_ids"].shape == (sweep.BATCH, sweep.SEQ)


def test_run_model_eager_and_compiled_match():
    sent = []
    sweep.run_model("gpt2", "GPT2LMHeadModel", ("eager", "compiled"), sent.append)
    results = dict(sent)
    assert results["cpu"]["status"] == "pass"
    for mode in ("eager", "compiled"):
        assert results[mode]["status"] == "pass", results[mode]
        assert "fallbacks" not in results[mode]


def test_compare_finds_forward_and_gradient_differences():
    out = [("out.logits", torch.ones(2, 3))]
    grads = {"w": torch.tensor([1.0, -2.0])}
    assert sweep._compare((out, grads), (out, grads)) is None
    assert sweep._compare(([("out.logits", torch.ones(2, 3) * 1.01)], grads), (out, grads)).startswith("forward")
    assert sweep._compare((out, {"w": torch.tensor([1.0, -2.01])}), (out, grads)).startswith("gradient w")
    assert sweep._compare((out, {"w": torch.tensor([1.0, float("nan")])}), (out, grads)).startswith("gradient w")
    assert "one side only" in sweep._compare((out, {}), (out, grads))


def test_time_limit_stops_the_process():
    results = sweep._run_one("gpt2", "GPT2LMHeadModel", ("eager",), timeout=0.5)
    assert results == {"cpu": {"status": "timeout", "reason": "over 0 s"}}


def test_report_rates_classes_and_cpu_failures(tmp_path):
    state = {
        "a": {"model_type": "a", "class_name": "A", "results": {
            "cpu": {"status": "pass"}, "eager": {"status": "pass"},
            "compiled": {"status": "error", "reason": "NotImplementedError: no rule for aten.foo"}}},
        "b": {"model_type": "b", "class_name": "B", "results": {
            "cpu": {"status": "pass"}, "eager": {"status": "mismatch", "reason": "forward out.logits: differs"},
            "compiled": {"status": "pass", "fallbacks": {"aten::foo": 1}}}},
        "c": {"model_type": "c", "class_name": "C", "results": {
            "cpu": {"status": "cpu_error", "reason": "ImportError: needs natten"}}},
    }
    out = tmp_path / "MODELS.md"
    sweep.report(state, str(out), "python -m torchtpu.coverage models --only a,b,c")
    text = out.read_text()
    assert "| eager | 2/2 (100.0%) | 1/2 (50.0%) | 0 |" in text
    assert "| compiled | 1/2 (50.0%) | 1/2 (50.0%) | 1 |" in text
    assert "| mismatch: forward | 1 | b (eager) |" in text
    assert "NotImplementedError: no rule for aten.foo | 1 | a (compiled) |" in text
    assert "| c | C | cpu_error: ImportError: needs natten |" in text
