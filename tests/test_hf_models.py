"""Hugging Face models built from small configs (nothing downloaded), on tpu
against CPU, forward and backward: the models whose paths broke before
(MoE layers through torch._grouped_mm in compiled mode, DeBERTa's tensor
constant in a compiled training graph, wav2vec2's weight-normed
convolution), and wav2vec2 trained with its CTC loss. A wider sweep of 60 architectures, eager and compiled, is in
the stop-12 note of issue 3."""
import copy
import warnings

import pytest
import torch

import torchtpu

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=100,
             max_position_embeddings=64)


def tokens():
    return {"input_ids": torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))}


MODELS = {
    "mixtral": (lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
        **SMALL, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)), tokens),
    "qwen2_moe": (lambda: transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        **SMALL, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32)), tokens),
    "deberta": (lambda: transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(**SMALL)), tokens),
    "wav2vec2": (lambda: transformers.Wav2Vec2ForCTC(transformers.Wav2Vec2Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=32,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4)),
        lambda: {"input_values": torch.randn(2, 800, generator=torch.Generator().manual_seed(0))}),
}


def ctc_labels():
    labels = torch.randint(1, 32, (2, 10), generator=torch.Generator().manual_seed(1))
    labels[1, 7:] = -100  # a shorter transcript: concatenated targets of two lengths
    return labels


def forward_backward(run, model, inputs):
    logits = run(**inputs).logits
    logits.float().pow(2).mean().backward()
    return logits.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_cpu(name, compiled):
    make, inputs = MODELS[name]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().eval()
    x = inputs()
    on_tpu = copy.deepcopy(model).to("tpu")
    want, want_grads = forward_backward(model, model, x)
    torch._dynamo.reset()
    torchtpu.reset_stats()
    run = torch.compile(on_tpu, backend="tpu") if compiled else on_tpu
    got, grads = forward_backward(run, on_tpu, {k: v.to("tpu") for k, v in x.items()})
    assert not torchtpu.stats()["fallbacks"]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert grads.keys() == want_grads.keys()
    for n, g in grads.items():
        scale = want_grads[n].abs().max().item() + 1e-6
        assert (g - want_grads[n]).abs().max().item() <= 1e-3 * scale, n
    torch._dynamo.reset()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_wav2vec2_ctc_loss_matches_cpu(compiled):
    """Wav2Vec2ForCTC's loss (F.ctc_loss on lengths it computes as tensors)
    and every gradient, on tpu, nothing on the CPU."""
    make, inputs = MODELS["wav2vec2"]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().eval()
    x, labels = inputs()["input_values"], ctc_labels()
    on_tpu = copy.deepcopy(model).to("tpu")
    want = model(input_values=x, labels=labels).loss
    want.backward()
    torch._dynamo.reset()
    torchtpu.reset_stats()
    run = torch.compile(on_tpu, backend="tpu") if compiled else on_tpu
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run(input_values=x.to("tpu"), labels=labels.to("tpu")).loss
    got.backward()
    assert not torchtpu.stats()["fallbacks"]
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    for (n, p), (_, q) in zip(model.named_parameters(), on_tpu.named_parameters()):
        assert (q.grad is None) == (p.grad is None), n
        if p.grad is not None:  # as test_model_matches_cpu: relative to the gradient's largest element
            assert (q.grad.cpu() - p.grad).abs().max().item() <= 1e-3 * (p.grad.abs().max().item() + 1e-6), n
    torch._dynamo.reset()
