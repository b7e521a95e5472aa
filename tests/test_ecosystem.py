"""The libraries PyTorch users train with, on tpu against the CPU: transformers'
Trainer (which finds the device through accelerate), a peft LoRA model trained
through accelerate's Accelerator, and a text-generation pipeline. Models and
the tokenizer are built in place (nothing is downloaded)."""
import warnings

import pytest
import torch

import torchtpu  # noqa: F401

transformers = pytest.importorskip("transformers")
import accelerate  # noqa: E402
import peft  # noqa: E402
from accelerate.state import AcceleratorState  # noqa: E402


def llama():
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=99,
                                   max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def token_rows(n, length=16):
    return torch.randint(3, 99, (n, length), generator=torch.Generator().manual_seed(0))


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    # Accelerator (and Trainer, through it) keeps its device in a process-wide
    # state; each run here chooses its own.
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def train_with_trainer(tmp_path, on_cpu):
    AcceleratorState._reset_state(reset_partial_state=True)
    model = llama()
    data = [{"input_ids": ids, "labels": ids} for ids in token_rows(24)]
    args = transformers.TrainingArguments(output_dir=str(tmp_path / ("cpu" if on_cpu else "tpu")),
                                          per_device_train_batch_size=8, max_steps=3, learning_rate=1e-3,
                                          logging_steps=1, report_to=[], save_strategy="no", seed=0,
                                          use_cpu=on_cpu, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    device = trainer.args.device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return device, losses, {n: p.detach().cpu() for n, p in trainer.model.named_parameters()}


def test_trainer_trains_on_tpu_as_on_cpu(tmp_path):
    device, losses, params = train_with_trainer(tmp_path, on_cpu=False)
    assert device.type == "tpu"
    assert all(p.device.type == "cpu" for p in params.values())
    cpu_device, want_losses, want_params = train_with_trainer(tmp_path, on_cpu=True)
    assert cpu_device.type == "cpu"
    assert len(losses) == 3
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-5)
    for name, want in want_params.items():
        torch.testing.assert_close(params[name], want, rtol=1e-4, atol=1e-5, msg=name)


def lora_steps(on_cpu):
    AcceleratorState._reset_state(reset_partial_state=True)
    model = peft.get_peft_model(llama(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                         lora_dropout=0.0))
    acc = accelerate.Accelerator(cpu=on_cpu)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model, opt = acc.prepare(model, opt)
    ids = token_rows(4).to(acc.device)
    losses = []
    for _ in range(3):
        out = model(input_ids=ids, labels=ids)
        acc.backward(out.loss)
        opt.step()
        opt.zero_grad()
        losses.append(out.loss.item())
    merged = acc.unwrap_model(model).merge_and_unload()
    return acc.device, losses, {n: p.detach().cpu() for n, p in merged.named_parameters()}


def test_peft_lora_through_accelerate_on_tpu_as_on_cpu():
    device, losses, params = lora_steps(on_cpu=False)
    assert device.type == "tpu"
    _, want_losses, want_params = lora_steps(on_cpu=True)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-5)
    assert params.keys() == want_params.keys()
    for name, want in want_params.items():
        torch.testing.assert_close(params[name], want, rtol=1e-4, atol=1e-5, msg=name)


def test_text_generation_pipeline_on_tpu_gives_cpu_tokens():
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(96)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                                     eos_token="</s>")
    model = llama().eval()
    texts = {}
    for device in ("tpu", "cpu"):
        pipe = transformers.pipeline("text-generation", model=model, tokenizer=tokenizer, device=device)
        assert pipe.device.type == device
        texts[device] = pipe("w1 w2 w3 w4", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    assert texts["tpu"] == texts["cpu"]
    assert len(texts["tpu"].split()) > 4  # it generated
