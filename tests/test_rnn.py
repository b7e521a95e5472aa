"""nn.LSTM, nn.GRU, nn.RNN and their cells on tpu against the CPU: PyTorch
runs the fused LSTM and GRU cells (_thnn_fused_*_cell, CUDA-only kernels)
on every device but the CPU, so these take torchtpu's rules (and, for GRU,
its meta functions), forward and backward, without falling back."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from conftest import compare_compiled_step, compare_grad


def state_sum(h):
    return sum(t.sum() for t in h) if isinstance(h, tuple) else h.sum()


def compare_recurrent(module, x, *state, dtype=torch.float32, rtol=None, atol=None):
    """Outputs, the final state and every gradient (input, initial state,
    parameters), CPU vs tpu."""
    def run(m, x, *state):
        if not state:
            return m(x)
        return m(x, tuple(state) if isinstance(m, (nn.LSTM, nn.LSTMCell)) else state[0])

    compare_grad(run, module.to(dtype), *(t.to(dtype).requires_grad_() for t in (x, *state)), rtol=rtol, atol=atol)


LAYERS = [(nn.LSTM, dict(batch_first=True)), (nn.LSTM, dict(num_layers=2, bidirectional=True)),
          (nn.LSTM, dict(bias=False)), (nn.LSTM, dict(proj_size=3)),
          (nn.GRU, dict(batch_first=True)), (nn.GRU, dict(num_layers=2, bidirectional=True)),
          (nn.GRU, dict(bias=False)), (nn.RNN, dict(nonlinearity="tanh")), (nn.RNN, dict(nonlinearity="relu"))]


@pytest.mark.parametrize("cls,kwargs", LAYERS, ids=[f"{c.__name__}-{'-'.join(k)}" for c, k in LAYERS])
def test_recurrent_layers(no_fallbacks, cls, kwargs):
    torch.manual_seed(0)
    compare_recurrent(cls(4, 8, **kwargs), torch.randn(3, 5, 4))


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_initial_state_and_float64(no_fallbacks, cls):
    """A given initial state gets its gradient; float64 computes in float64."""
    torch.manual_seed(0)
    layers, h = 2, torch.randn(2, 3, 8)
    state = (h, torch.randn(2, 3, 8)) if cls is nn.LSTM else (h,)
    compare_recurrent(cls(4, 8, num_layers=layers), torch.randn(5, 3, 4), *state)
    compare_recurrent(cls(4, 8), torch.randn(5, 3, 4), dtype=torch.float64)


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell, nn.RNNCell])
@pytest.mark.parametrize("batched", [True, False])
def test_cells(no_fallbacks, cls, batched):
    torch.manual_seed(0)
    x = torch.randn(3, 4) if batched else torch.randn(4)
    h = torch.randn(3, 8) if batched else torch.randn(8)
    compare_recurrent(cls(4, 8), x)
    compare_recurrent(cls(4, 8), x, *((h, torch.randn_like(h)) if cls is nn.LSTMCell else (h,)))


def test_lstm_half_cell_rounds_once(no_fallbacks):
    """bfloat16 cells compute in float32 and round each output once: at
    least as close to float64 as the CPU's bfloat16 LSTM."""
    torch.manual_seed(0)
    m, x = nn.LSTM(4, 8), torch.randn(6, 3, 4)
    ref = m.double()(x.double())[0]
    cpu = copy.deepcopy(m).bfloat16()(x.bfloat16())[0].double()
    tpu = copy.deepcopy(m).bfloat16().to("tpu")(x.bfloat16().to("tpu"))[0].cpu().double()
    assert (tpu - ref).abs().max() <= 1.5 * (cpu - ref).abs().max() + 1e-3


def test_packed_sequence(no_fallbacks):
    torch.manual_seed(0)
    m, x, lengths = nn.LSTM(4, 8, batch_first=True), torch.randn(3, 5, 4), torch.tensor([5, 3, 2])
    packed = pack_padded_sequence(x, lengths, batch_first=True)
    expected, _ = pad_packed_sequence(m(packed)[0], batch_first=True)
    got, _ = pad_packed_sequence(copy.deepcopy(m).to("tpu")(packed.to("tpu"))[0], batch_first=True)
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_compiled_training_step(no_fallbacks, cls, bias):
    """Dynamo runs recurrent modules eagerly inside the compiled function
    (and traces the frames their meta functions call: torchtpu's repair of
    the LSTM cell's check among them, which must leave no graph)."""
    torch.manual_seed(0)

    def step(m, x):
        y, h = m(x)
        loss = y.square().mean() + state_sum(h)
        loss.backward()
        return loss

    compare_compiled_step(step, cls(4, 8, batch_first=True, bias=bias), torch.randn(3, 5, 4), rtol=1e-5, atol=1e-5)
