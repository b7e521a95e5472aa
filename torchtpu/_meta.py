"""Repairs to PyTorch meta functions that tpu ops depend on: eager sizes every
op's outputs with its meta function, and compiled graphs trace through them.

_thnn_fused_lstm_cell (the cell nn.LSTM and nn.LSTMCell run on every device
but the CPU) fails without biases in torch 2.13: its size check reads
`.device` of each bias, None for `bias=False`. Without biases the check runs
with stand-ins for biases of the gates' width, which pass its bias checks.
The stand-ins are not tensors: dynamo, which traces this module's frames
when an LSTM runs eagerly inside a compiled function, then finds no graph.

_grouped_mm's meta function admits only bfloat16 (the CUDA fast path's
dtype), while PyTorch's CPU kernel and CUDA's fallback take float32 and
float16 too; Hugging Face's MoE layers call it in float32 on tpu, eager and
compiled. Those dtypes get the CPU kernel's checks and messages and the meta
function's output; bfloat16 keeps PyTorch's meta function.

fractional_max_pool2d's meta function (Python's, which replaces the C++ one
the CPU and CUDA kernels share) words its window check in its own way; the
check runs first here with the kernels' message.
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


_SCALAR_TYPE = {torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
                torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                torch.uint8: "Byte", torch.bool: "Bool"}


def _grouped_mm_strides(mat):
    """The CPU kernel's layout check: one of the last two dims dense, the
    other's stride a multiple of 16 bytes."""
    size, stride, alignment = mat.shape, mat.stride(), 16 // mat.element_size()
    if stride[-2] == 1 and stride[-1] >= max(1, size[-2]):
        lead = stride[-1]
    elif stride[-1] == 1 and stride[-2] >= max(1, size[-1]):
        lead = stride[-2]
    else:
        raise RuntimeError(f"Invalid strides/sizes, got {list(stride)} for strides and {list(size)} for sizes")
    torch._check(lead % alignment == 0, lambda: "strides should be multiple of 16 bytes")


def _repair_grouped_mm_dtypes():
    common = getattr(_registrations, "_meta_grouped_mm_common", None)
    make_output = getattr(_registrations, "_create_grouped_mm_output_tensor", None)
    if common is None or make_output is None or getattr(common, "_torchtpu", False):
        return

    def checked(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype, *args, **kwargs):
        if scale_a is not None or scale_b is not None or mat_a.dtype == torch.bfloat16:
            return common(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype, *args, **kwargs)
        for name, mat in (("mat_a", mat_a), ("mat_b", mat_b)):
            torch._check(mat.dtype in (torch.float32, torch.bfloat16, torch.float16),
                         lambda: f"Expected {name} to be Float32, BFloat16 or Float16 matrix, got "
                                 f"{_SCALAR_TYPE.get(mat.dtype, mat.dtype)}")
        torch._check(mat_a.dim() in (2, 3), lambda: "mat_a has to be 2 or 3d")
        torch._check(mat_b.dim() in (2, 3), lambda: "mat_b has to be 2 or 3d")
        two_d = mat_a.dim() == 2 and mat_b.dim() == 2
        torch._check(two_d or mat_a.size(-1) == mat_b.size(-2),
                     lambda: "contraction dimension of mat_a and mat_b must match")
        _grouped_mm_strides(mat_a)
        _grouped_mm_strides(mat_b)
        torch._check((offs is not None) == (mat_a.dim() == 2 or mat_b.dim() == 2),
                     lambda: "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d")
        if offs is not None:
            torch._check(offs.dim() == 1, lambda: "offs has to be 1D")
            torch._check(offs.dtype == torch.int32, lambda: "Offsets have to be int32")
        torch._check(bias is None, lambda: "Bias not supported yet")
        torch._check(out_dtype is None or out_dtype == mat_a.dtype,
                     lambda: "Grouped gemm output dtype must match `mat_a` dtype")
        torch._check(mat_a.dtype == mat_b.dtype,
                     lambda: f"expected mat_a and mat_b to have the same dtype, but got: {mat_a.dtype} != {mat_b.dtype}")
        torch._check(not two_d or mat_a.size(1) == mat_b.size(0),
                     lambda: "contraction dimension of mat_a and mat_b must match")
        return make_output(mat_a, mat_b, offs, out_dtype)

    checked._torchtpu = True
    _registrations._meta_grouped_mm_common = checked


_repair_grouped_mm_dtypes()


_LIB = torch.library.Library("aten", "IMPL")


def _repair_fractional_max_pool2d_message():
    meta = getattr(_registrations, "meta_fractional_max_pool2d", None)
    if meta is None:
        return

    def checked(self, kernel_size, output_size, random_samples):
        if self.ndim in (3, 4) and len(kernel_size) == 2 and len(output_size) == 2:
            for i, name in enumerate(("height", "width")):
                size = self.size(i - 2)
                torch._check(output_size[i] + kernel_size[i] - 1 <= size,
                             lambda: f"fractional_max_pool2d(): pool {name} {kernel_size[i]} too large relative to "
                                     f"input {name} {size}")
        return meta(self, kernel_size, output_size, random_samples)

    _LIB.impl("fractional_max_pool2d", checked, "Meta")


_repair_fractional_max_pool2d_message()
