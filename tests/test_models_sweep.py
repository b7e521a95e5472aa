"""python -m torchtpu.coverage models (torchtpu_tools/models_sweep.py): the
Hugging Face sweep's pieces, on one small architecture in this process, its
comparison failing where numbers differ, its time limit, and its report."""
import pytest
import torch

pytest.importorskip("transformers")

from torchtpu_tools import models_config as config  # noqa: E402
from torchtpu_tools import models_sweep as sweep  # noqa: E402
from torchtpu_tools.models_inputs import BATCH, SEQ  # noqa: E402
from torchtpu_tools.models_modes import _compare  # noqa: E402
from torchtpu_tools.models_report import report  # noqa: E402


def test_one_class_per_model_type_from_a_small_config():
    archs = sweep.architectures()
    types = [t for t, _ in archs]
    assert len(types) == len(set(types)) > 500
    assert dict(archs)["gpt2"] == "GPT2LMHeadModel" and dict(archs)["vit"] == "ViTForImageClassification"
    model, inputs, recipe, _ = sweep.build("gpt2", "GPT2LMHeadModel")
    assert recipe == "small/0"
    assert model.config.n_embd == 32 and model.config.n_layer == 2 and model.config.vocab_size == 99
    assert model.config.eos_token_id < 99
    assert inputs["input_ids"].shape == (BATCH, SEQ)


def test_scaled_recipe_keeps_the_relations_between_sizes():
    from transformers import AutoConfig
    # DeepSeek-V3's attention: q/k head = nope + rope part, sizes of one
    # head scaled by F/G, the width by F, heads by G.
    c = config.shrink_scaled(AutoConfig.for_model("deepseek_v3"), 16, 4)
    assert (c.hidden_size, c.num_attention_heads, c.qk_rope_head_dim, c.qk_nope_head_dim) == (448, 32, 16, 32)
    assert c.qk_head_dim == c.qk_rope_head_dim + c.qk_nope_head_dim
    assert c.num_hidden_layers == 2 and c.first_k_dense_replace == 1 and c.n_routed_experts == 8
    # Gemma 4: per-layer lists follow the layers kept, one of each kind.
    c = config.shrink_scaled(AutoConfig.for_model("gemma4_text"), 16, 4)
    assert c.num_hidden_layers == len(c.layer_types) == 2
    assert set(c.layer_types) == {"sliding_attention", "full_attention"}
    # Swin: heads per stage divided, stages kept, one block each.
    c = config.shrink_scaled(AutoConfig.for_model("swin"), 16, 4)
    assert c.depths == [1, 1, 1, 1] and c.embed_dim == 6 and c.num_heads == [1, 1, 3, 6]


def test_recipes_keep_derived_sizes_coherent():
    import transformers
    from torchtpu_tools.models_build import _config_for
    recipes = {t: dict(config.recipes(t)) for t in ("glm4v", "cohere_compass", "hunyuan_v1_dense", "mimi", "llama4")}
    for name in ("small", "scaled/16/4"):
        # The rope sections split the rotary half-width the head size gives
        # (the model's code defaults to the released checkpoint's split).
        t = recipes["glm4v"][name]().text_config
        head_dim = t.hidden_size // t.num_attention_heads
        half = int(head_dim * t.rope_parameters.get("partial_rotary_factor", 1.0)) // 2
        assert sum(t.rope_parameters["mrope_section"]) == half
        # Rope parameters per layer type, head_dim where a default left it None.
        c = recipes["cohere_compass"][name]()
        assert set(c.get_text_config().layer_types) <= set(c.get_text_config().rope_parameters)
        c = recipes["hunyuan_v1_dense"][name]()
        assert c.head_dim * c.num_attention_heads == c.hidden_size
        # Depthwise upsampling groups stay as wide as the model.
        c = recipes["mimi"][name]()
        assert c.upsample_groups == c.hidden_size
    # A text-only head under a multimodal type takes the text config.
    c = recipes["llama4"]["small"]()
    assert isinstance(_config_for(transformers.Llama4ForCausalLM, c), transformers.Llama4TextConfig)


def test_inputs_from_the_forward_signature():
    _, inputs, recipe, _ = sweep.build("patchtst", "PatchTSTModel")
    assert inputs["past_values"].dim() == 3
    _, inputs, _, _ = sweep.build("decision_transformer", "DecisionTransformerModel")
    assert {"states", "actions", "rewards", "returns_to_go", "timesteps"} <= set(inputs)


def test_run_model_every_mode_matches():
    sent = []
    modes = ("eager", "compiled", "bf16", "generate", "train")
    sweep.run_model("gpt2", "GPT2LMHeadModel", modes, sent.append)
    results = dict(sent)
    assert results["cpu"]["status"] == "pass"
    assert results["generate"]["tokens"] == SEQ + 8
    for mode in modes:
        assert results[mode]["status"] == "pass", results[mode]
        assert "fallbacks" not in results[mode]


def test_compare_finds_forward_and_gradient_differences():
    out = [("out.logits", torch.ones(2, 3))]
    grads = {"w": torch.tensor([1.0, -2.0])}
    assert _compare((out, grads), (out, grads)) is None
    assert _compare(([("out.logits", torch.ones(2, 3) * 1.01)], grads), (out, grads)).startswith("forward")
    assert _compare((out, {"w": torch.tensor([1.0, -2.01])}), (out, grads)).startswith("gradient w")
    assert _compare((out, {"w": torch.tensor([1.0, float("nan")])}), (out, grads)).startswith("gradient w")
    assert "one side only" in _compare((out, {}), (out, grads))


def test_training_step_comparison():
    from torchtpu_tools.models_modes import _compare_params
    grads = {"w": torch.tensor([1.0, 1e-12]), "b": torch.tensor([0.5])}
    after = {"w": torch.tensor([0.999, 2.0]), "b": torch.tensor([0.1])}
    assert _compare_params(after, after, grads) is None
    # The element whose gradient is rounding noise may step either way.
    assert _compare_params({"w": torch.tensor([0.999, 2.002]), "b": torch.tensor([0.1])}, after, grads) is None
    assert _compare_params({"w": torch.tensor([0.998, 2.0]), "b": torch.tensor([0.1])}, after, grads).startswith(
        "parameter w")
    assert _compare_params({"w": after["w"], "b": torch.tensor([float("nan")])}, after, grads).startswith(
        "parameter b")


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
    report(state, str(out), "python -m torchtpu.coverage models --only a,b,c")
    text = out.read_text()
    assert "| eager | 2 | 2/2 (100.0%) | 1/2 (50.0%) | 0 |" in text
    assert "| compiled | 2 | 1/2 (50.0%) | 1/2 (50.0%) | 1 |" in text
    assert "| mismatch: forward | 1 | b (eager) |" in text
    assert "NotImplementedError: no rule for aten.foo | 1 | a (compiled) |" in text
    assert "| c | C | cpu_error: ImportError: needs natten |" in text
    assert "built and ran forward + backward on the CPU: **2**" in text
