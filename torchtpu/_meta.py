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

nll_loss_forward's, nll_loss2d_forward's and multi_margin_loss's meta
functions are PyTorch's decompositions, which check less than the CPU
kernels, in another order and other words (AssertionError for a weight of the
wrong size, gather's message for a float target), and refuse the uint8
targets the CPU takes. Their meta functions here make the CPU kernels'
checks, in their order and with their messages; the checks the kernels make
on dtypes after them (a floating input, the weight's dtype) are in the
rules. multinomial's meta function checks the rank only, with its own
words; the CPU kernel's checks are in the one here. max_pool2d's meta function reads the input's third-last size before
checking its rank.

cumsum's and cumprod's meta functions (PyTorch's decompositions) add a dim
to their input, which PyTorch refuses for a tensor of 64 dims, the most its
CPU kernels and tpu take. There they run on the one dim scanned, which gives
the same checks and dtype, and the result takes the input's shape.

multilabel_margin_loss_forward's meta function (PyTorch's decomposition)
gives one sample (a 1-D target) an unreduced loss of size [1]; the CPU
kernel's is 0-dim, as every other loss's. Its shape checks run first here,
with the kernel's messages. (Compiled graphs run the
decomposition above autograd, as they do on the CPU.)

Convolutions: PyTorch's CPU kernels give a channels-last result (and input
and weight gradients) when the input or the weight is channels-last; CUDA's
cuDNN does too. The meta function answers contiguous for every device, and
FakeTensor's convolution asks ATen which backend would run, which for a
PrivateUse1 device is "Overrideable", laid out contiguous. tpu follows the
CPU: in eager through its meta functions (csrc/torch/meta.cpp), in compiled
graphs through FakeTensor's convolution, wrapped here for tpu tensors.
"""
import torch
import torch._decomp
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
                torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
                torch.complex128: "ComplexDouble", torch.complex32: "ComplexHalf"}


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



def _class_target_dtype(target):
    torch._check(target.dtype in (torch.int64, torch.uint8),
                 lambda: f"expected target dtype to be Long or Byte, but got {_SCALAR_TYPE.get(target.dtype)}")


def _nll_loss_forward(self, target, weight, reduction, ignore_index):
    torch._check(1 <= self.dim() <= 2, lambda: "input tensor should be 1D or 2D")
    torch._check(target.dim() <= 1, lambda: "0D or 1D target tensor expected, multi-target not supported")
    _class_target_dtype(target)
    if self.dim() == 1 and target.dim() == 1:
        torch._check_value(target.size(0) == 1, lambda: "For 1D input, 1D target must have size 1, but got target "
                                                         f"size: {target.size(0)}")
    elif self.dim() == 2:
        torch._check_index(target.dim() == 1, lambda: "Dimension specified as 0 but tensor has no dimensions")
        torch._check(self.size(0) == target.size(0),
                     lambda: f"size mismatch (got input: {list(self.shape)}, target: {list(target.shape)})")
    classes = self.size(-1)
    torch._check(weight is None or (weight.dim() == 1 and weight.numel() == classes),
                 lambda: f"weight tensor should be defined either for all {classes} classes or no classes but got "
                         f"weight tensor of shape: {list(weight.shape)}")
    unreduced = reduction == 0 and self.dim() == 2
    return self.new_empty(self.shape[:1] if unreduced else ()), self.new_empty(())


def _nll_loss2d_forward(self, target, weight, reduction, ignore_index):
    torch._check(target.dim() == 3, lambda: "only batches of spatial targets supported (3D tensors) but got targets "
                                            f"of dimension: {target.dim()}")
    torch._check(self.dim() == 4, lambda: "only batches of spatial inputs supported (4D tensors), but got input of "
                                          f"dimension: {self.dim()}")
    _class_target_dtype(target)
    torch._check(weight is None or weight.numel() == self.size(1),
                 lambda: "weight tensor should be defined either for all or no classes")
    torch._check(self.size(0) == target.size(0) and self.shape[2:] == target.shape[1:],
                 lambda: f"size mismatch (got input: {list(self.shape)} , target: {list(target.shape)}")
    return self.new_empty(target.shape if reduction == 0 else ()), self.new_empty(())


def _multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=1):
    torch._check((self.dim() == 2 and self.size(1) != 0) or (self.dim() == 1 and self.size(0) != 0)
                 or self.dim() == 0,
                 lambda: f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                         f"{list(self.shape)}")
    samples = self.size(0) if self.dim() == 2 else 1
    classes = self.size(-1) if self.dim() > 0 else 1
    torch._check(target.dim() <= 1 and target.numel() == samples,
                 lambda: "multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                         f"samples (batch size). Expected target size [{samples}], but got {list(target.shape)}. "
                         f"Input has shape {list(self.shape)}.")
    torch._check(p == 1 or p == 2, lambda: "only p == 1 and p == 2 supported")
    torch._check(weight is None or (weight.dim() <= 1 and weight.numel() == classes),
                 lambda: f"inconsistent weight size, expected {classes} but got {list(weight.shape)}")
    return self.new_empty((samples,) if reduction == 0 and target.dim() > 0 else ())


def _with_out(meta, names):
    """|meta|'s out= overload: the out tensors resized to its results."""
    def out_meta(*args, **kwargs):
        from torch._prims_common.wrappers import _maybe_resize_out
        outs = [kwargs.pop(n) for n in names]
        results = meta(*args, **kwargs)
        results = results if isinstance(results, tuple) else (results,)
        for out, value in zip(outs, results):
            _maybe_resize_out(out, value.shape)
        return tuple(outs) if len(outs) > 1 else outs[0]
    return out_meta


for _name, _meta, _outs in (("nll_loss_forward", _nll_loss_forward, ("output", "total_weight")),
                            ("nll_loss2d_forward", _nll_loss2d_forward, ("output", "total_weight")),
                            ("multi_margin_loss", _multi_margin_loss, ("out",))):
    _LIB.impl(_name, _meta, "Meta")
    _LIB.impl(_name + "." + ("output" if len(_outs) > 1 else "out"), _with_out(_meta, _outs), "Meta")


def _multinomial_checks(self, num_samples, replacement, out_dtype=torch.int64):
    torch._check(0 < self.dim() <= 2, lambda: "prob_dist must be 1 or 2 dim")
    torch._check(self.is_floating_point(), lambda: "multinomial only supports floating-point dtypes for input, got: "
                                                   f"{_SCALAR_TYPE.get(self.dtype)}")
    torch._check(out_dtype == torch.int64, lambda: f"multinomial expects Long tensor out, got: {_SCALAR_TYPE.get(out_dtype)}")
    torch._check(num_samples > 0, lambda: "cannot sample n_sample <= 0 samples")
    torch._check(replacement or num_samples <= self.size(-1),
                 lambda: "cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    torch._check(self.size(-1) <= 2 ** 24, lambda: "number of categories cannot exceed 2^24")
    return self.new_empty((*self.shape[:-1], num_samples), dtype=torch.int64)


def _multinomial(self, num_samples, replacement=False, *, generator=None):
    return _multinomial_checks(self, num_samples, replacement)


def _multinomial_out(self, num_samples, replacement=False, *, generator=None, out):
    from torch._prims_common.wrappers import _maybe_resize_out
    _maybe_resize_out(out, _multinomial_checks(self, num_samples, replacement, out.dtype).shape)
    return out


_LIB.impl("multinomial", _multinomial, "Meta")
_LIB.impl("multinomial.out", _multinomial_out, "Meta")


def _repair_max_pool2d_rank_check():
    check = getattr(_registrations, "max_pool2d_checks_and_compute_shape", None)
    if check is None or getattr(check, "_torchtpu", False):
        return

    def checked(input, *args):
        torch._check(input.dim() >= 3, lambda: "non-empty 3D or 4D (batch mode) tensor expected for input")
        return check(input, *args)

    checked._torchtpu = True
    _registrations.max_pool2d_checks_and_compute_shape = checked


_repair_max_pool2d_rank_check()


def _repair_multilabel_margin_shape():
    decomposition = torch._decomp.decomposition_table.get(torch.ops.aten.multilabel_margin_loss_forward.default)
    if decomposition is None:
        return

    def sized(self, target, reduction):
        torch._check((self.dim() == 2 and self.size(1) != 0) or (self.dim() == 1 and self.size(0) != 0)
                     or self.dim() == 0,
                     lambda: f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                             f"{list(self.shape)}")
        torch._check(target.shape == self.shape or (self.dim() <= 1 and target.dim() <= 1
                                                    and target.numel() == self.numel()),
                     lambda: f"inconsistent target size: {list(target.shape)} for input of size: {list(self.shape)}")
        loss, is_target = decomposition(self, target, reduction)
        return (loss.reshape(()) if target.dim() <= 1 else loss), is_target

    _LIB.impl("multilabel_margin_loss_forward", sized, "Meta")
    _LIB.impl("multilabel_margin_loss_forward.output", _with_out(sized, ("output", "is_target")), "Meta")


_repair_multilabel_margin_shape()


def _repair_cumulative_rank():
    import torch._prims_common as utils
    import torch._refs as refs

    for name, ref in (("cumsum", refs.cumsum), ("cumprod", refs.cumprod)):
        def meta(self, dim, *, dtype=None, ref=ref):
            if self.dim() < 64:
                return ref(self, dim, dtype=dtype)
            dim = utils.canonicalize_dim(self.dim(), dim)
            return self.new_empty(self.shape, dtype=ref(self.new_empty(self.shape[dim]), 0, dtype=dtype).dtype)

        def out_meta(self, dim, *, dtype=None, out, ref=ref, meta=meta):
            if self.dim() < 64:
                return ref(self, dim, dtype=dtype, out=out)
            return _with_out(meta, ("out",))(self, dim, dtype=dtype, out=out)

        _LIB.impl(name, meta, "Meta")
        _LIB.impl(name + ".out", out_meta, "Meta")


_repair_cumulative_rank()


def _channels_last_format(input, weight):
    """The CPU's layout for a convolution of |input| and |weight|: None for
    contiguous (meta.cpp's cpu_conv_format)."""
    from torch._prims_common import suggest_memory_format
    if weight.dim() not in (4, 5):
        return None
    cl = torch.channels_last if weight.dim() == 4 else torch.channels_last_3d
    return cl if cl in (suggest_memory_format(input), suggest_memory_format(weight)) else None


def _repair_fake_convolution_layout():
    from torch._subclasses import fake_impls
    ops = (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default)
    table = getattr(fake_impls, "op_implementations_dict", None)
    if table is None or any(op not in table or getattr(table[op], "_torchtpu", False) for op in ops):
        return
    for op in ops:
        fake_conv = table[op]

        def conv(fake_mode, func, *args, _fake_conv=fake_conv, **kwargs):
            out = _fake_conv(fake_mode, func, *args, **kwargs)
            first = out if isinstance(out, torch.Tensor) else out[0]
            if first is None or first.fake_device.type != "tpu":
                return out
            at = 0 if func is ops[0] else 1  # convolution_backward's grad_output comes first
            input = args[at] if len(args) > at else kwargs["input"]
            weight = args[at + 1] if len(args) > at + 1 else kwargs["weight"]
            fmt = _channels_last_format(input, weight)
            if fmt is None:
                return out
            with fake_mode:
                if isinstance(out, torch.Tensor):
                    return out.contiguous(memory_format=fmt)
                return tuple(t if t is None or i == 2 else t.contiguous(memory_format=fmt) for i, t in enumerate(out))

        conv._torchtpu = True
        table[op] = conv


_repair_fake_convolution_layout()
