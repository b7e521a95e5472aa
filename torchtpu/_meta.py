"""Repairs to PyTorch meta functions that tpu ops depend on: eager sizes every
op's outputs with its meta function, and compiled graphs trace through them.

_thnn_fused_lstm_cell (the cell nn.LSTM and nn.LSTMCell run on every device
but the CPU) fails without biases in torch 2.13: its size check reads
`.device` of each bias, None for `bias=False`. Without biases the check runs
with stand-ins for biases of the gates' width, which pass its bias checks.
The stand-ins are not tensors: dynamo, which traces this module's frames
when an LSTM runs eagerly inside a compiled function, then finds no graph.
"""
import torch
import torch._meta_registrations as _registrations


class _NoBias:
    """What the check reads of a [gates] bias on the gates' device."""

    def __init__(self, gates):
        self.shape = torch.Size(gates.shape[-1:])
        self.ndim = 1
        self.device = gates.device

    def numel(self):
        return self.shape[0]


def _repair_rnn_cell_check():
    check = getattr(_registrations, "rnn_cell_checkSizes", None)
    if check is None or getattr(check, "_torchtpu", False):
        return

    def checked(input_gates, hidden_gates, input_bias, hidden_bias, factor, prev_hidden):
        if input_bias is None and hidden_bias is None:
            input_bias = hidden_bias = _NoBias(input_gates)
        return check(input_gates, hidden_gates, input_bias, hidden_bias, factor, prev_hidden)

    checked._torchtpu = True
    _registrations.rnn_cell_checkSizes = checked


_repair_rnn_cell_check()
