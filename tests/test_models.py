"""Whole models trained on tpu and on CPU from the same seed: the losses agree
to 1e-4 (relative) step by step, and nothing falls back to the CPU."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from models import CNN, GPT, MLP


def train(model, batches, loss_fn, make_opt, device):
    model = copy.deepcopy(model).to(device)
    opt = make_opt(model.parameters())
    losses = []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def check_training(model, batches, loss_fn, make_opt):
    torchtpu.reset_stats()
    cpu_losses, cpu_model = train(model, batches, loss_fn, make_opt, "cpu")
    tpu_losses, tpu_model = train(model, batches, loss_fn, make_opt, "tpu")
    assert torchtpu.stats()["fallbacks"] == {}
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=0)
    assert min(cpu_losses) > 1e-2  # far from 0, where a relative comparison means nothing
    for (name, p_cpu), p_tpu in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-3, atol=1e-4, msg=name)
    assert sum(cpu_losses[-4:]) < sum(cpu_losses[:4])  # it learned something


def classification_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def lm_loss(model, x, y):
    return model(x, y)


def teacher_batches(shape, n, classes=10):
    """Inputs labelled by a fixed random linear map: balanced labels a
    student can learn, so losses fall steadily without reaching 0."""
    teacher = torch.randn(torch.Size(shape[1:]).numel(), classes)
    xs = [torch.randn(shape) for _ in range(n)]
    return [(x, (x.flatten(1) @ teacher).argmax(1)) for x in xs]


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_mlp_trains_like_cpu(opt):
    torch.manual_seed(0)
    model = MLP()
    batches = teacher_batches((16, 32), 4) * 5  # 20 steps over 4 batches: it can fit them
    make_opt = (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)) if opt == "sgd" else (
        lambda p: torch.optim.AdamW(p, lr=1e-2))
    check_training(model, batches, classification_loss, make_opt)


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_cnn_trains_like_cpu(opt):
    torch.manual_seed(0)
    model = CNN()
    batches = teacher_batches((8, 3, 16, 16), 4) * 5
    make_opt = (lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)) if opt == "sgd" else (
        lambda p: torch.optim.AdamW(p, lr=1e-3))
    check_training(model, batches, classification_loss, make_opt)


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_transformer_trains_like_cpu(opt):
    torch.manual_seed(0)
    model = GPT()
    data = (torch.randint(0, 64, (20, 4, 1)) + 5 * torch.arange(17)) % 64  # a learnable sequence rule
    batches = [(d[:, :-1], d[:, 1:]) for d in data]
    make_opt = (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)) if opt == "sgd" else (
        lambda p: torch.optim.AdamW(p, lr=3e-3))
    check_training(model, batches, lm_loss, make_opt)


def test_transformer_with_dropout_is_reproducible():
    """Dropout draws from the device generator: the same seed gives the same
    run; the run still learns."""
    data = (torch.randint(0, 64, (10, 4, 1)) + 5 * torch.arange(17)) % 64
    batches = [(d[:, :-1], d[:, 1:]) for d in data]
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = GPT(dropout=0.1)
        torch.manual_seed(1)
        losses, _ = train(model, batches, lm_loss, lambda p: torch.optim.AdamW(p, lr=3e-3), "tpu")
        runs.append(losses)
    assert runs[0] == runs[1]
    assert runs[0][-1] < runs[0][0]
