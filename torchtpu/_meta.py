"""Repairs to PyTorch meta functions that tpu ops depend on: eager sizes every
op's outputs with its meta function, and compiled graphs trace through them.

_thnn_fused_lstm_cell (the cell nn.LSTM and nn.LSTMCell run on every device
but the CPU) fails without biases in torch 2.13: its size check reads
`.device` of each bias, None for `bias=False`. Without biases the check is
the one with biases of the gates' width, which pass its size checks.
"""
import torch._meta_registrations as _registrations


def _repair_rnn_cell_check():
    check = getattr(_registrations, "rnn_cell_checkSizes", None)
    if check is None or getattr(check, "_torchtpu", False):
        return

    def checked(input_gates, hidden_gates, input_bias, hidden_bias, factor, prev_hidden):
        if input_bias is None and hidden_bias is None:
            input_bias = hidden_bias = input_gates.new_empty(input_gates.shape[-1:])
        return check(input_gates, hidden_gates, input_bias, hidden_bias, factor, prev_hidden)

    checked._torchtpu = True
    _registrations.rnn_cell_checkSizes = checked


_repair_rnn_cell_check()
