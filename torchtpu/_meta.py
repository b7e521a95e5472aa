"""Repairs to PyTorch meta functions that tpu ops depend on: eager sizes every
op's outputs with its meta function, and compiled graphs trace through them.

They are tpu's alone: PyTorch's meta functions, which CPU and CUDA code and
meta tensors use, stay as they are. TPU_META maps an op to tpu's meta
function; eager's sizing (csrc/torch/dispatch.cpp, run_meta) asks it before
the op's Meta kernel, and FakeTensor (torch.compile, torch.export) asks it
for fake tensors on tpu, through the first of FakeTensor's op
implementations, which passes every other call on. The convolutions' layout
(below) takes FakeTensor's convolution the same way.

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

aten = torch.ops.aten

# op -> tpu's meta function, for tpu tensors only.
TPU_META = {}
# "aten::name.overload" (c10's spelling, which the C++ asks by) -> the same.
_BY_NAME = {}


def _for_tpu(*ops):
    def register(fn):
        for op in ops:
            TPU_META[op] = fn
            _BY_NAME[f"aten::{op._schema.name.split('::', 1)[1]}"
                     + (f".{op._schema.overload_name}" if op._schema.overload_name else "")] = fn
        return fn
    return register


def _pytorch_meta(op):
    """PyTorch's own meta function of |op|."""
    return torch._decomp.meta_table[op]


class _NoBias:
    """What the check reads of a [gates] bias on the gates' device."""

    def __init__(self, gates):
        self.shape = torch.Size(gates.shape[-1:])
        self.ndim = 1
        self.device = gates.device

    def numel(self):
        return self.shape[0]


@_for_tpu(aten._thnn_fused_lstm_cell.default)
def _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    if input_bias is None and hidden_bias is None:
        input_bias = hidden_bias = _NoBias(input_gates)
    return _pytorch_meta(aten._thnn_fused_lstm_cell.default)(input_gates, hidden_gates, cx, input_bias, hidden_bias)


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


@_for_tpu(aten._grouped_mm.default)
def _grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    if mat_a.dtype == torch.bfloat16:
        return _pytorch_meta(aten._grouped_mm.default)(mat_a, mat_b, offs, bias, out_dtype)
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
    return _registrations._create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)


@_for_tpu(aten.fractional_max_pool2d.default)
def _fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    if self.ndim in (3, 4) and len(kernel_size) == 2 and len(output_size) == 2:
        for i, name in enumerate(("height", "width")):
            size = self.size(i - 2)
            torch._check(output_size[i] + kernel_size[i] - 1 <= size,
                         lambda: f"fractional_max_pool2d(): pool {name} {kernel_size[i]} too large relative to "
                                 f"input {name} {size}")
    return _pytorch_meta(aten.fractional_max_pool2d.default)(self, kernel_size, output_size, random_samples)


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


for _packet, _meta, _out, _outs in ((aten.nll_loss_forward, _nll_loss_forward, "output", ("output", "total_weight")),
                                    (aten.nll_loss2d_forward, _nll_loss2d_forward, "output", ("output", "total_weight")),
                                    (aten.multi_margin_loss, _multi_margin_loss, "out", ("out",))):
    _for_tpu(_packet.default)(_meta)
    _for_tpu(getattr(_packet, _out))(_with_out(_meta, _outs))


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


@_for_tpu(aten.multinomial.default)
def _multinomial(self, num_samples, replacement=False, *, generator=None):
    return _multinomial_checks(self, num_samples, replacement)


@_for_tpu(aten.multinomial.out)
def _multinomial_out(self, num_samples, replacement=False, *, generator=None, out):
    from torch._prims_common.wrappers import _maybe_resize_out
    _maybe_resize_out(out, _multinomial_checks(self, num_samples, replacement, out.dtype).shape)
    return out


def _max_pool2d_rank_first(op, at):
    """PyTorch's max_pool2d meta functions read the input's third-last size
    before checking its rank; the rank check comes first here."""
    def checked(*args, **kwargs):
        input = args[at]
        torch._check(input.dim() >= 3, lambda: "non-empty 3D or 4D (batch mode) tensor expected for input")
        return _pytorch_meta(op)(*args, **kwargs)
    _for_tpu(op)(checked)


_max_pool2d_rank_first(aten.max_pool2d_with_indices.default, 0)
_max_pool2d_rank_first(aten.max_pool2d_with_indices_backward.default, 1)


def _multilabel_margin_loss_forward(self, target, reduction):
    torch._check((self.dim() == 2 and self.size(1) != 0) or (self.dim() == 1 and self.size(0) != 0)
                 or self.dim() == 0,
                 lambda: f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                         f"{list(self.shape)}")
    torch._check(target.shape == self.shape or (self.dim() <= 1 and target.dim() <= 1
                                                and target.numel() == self.numel()),
                 lambda: f"inconsistent target size: {list(target.shape)} for input of size: {list(self.shape)}")
    decomposition = torch._decomp.decomposition_table[aten.multilabel_margin_loss_forward.default]
    loss, is_target = decomposition(self, target, reduction)
    return (loss.reshape(()) if target.dim() <= 1 else loss), is_target


_for_tpu(aten.multilabel_margin_loss_forward.default)(_multilabel_margin_loss_forward)
_for_tpu(aten.multilabel_margin_loss_forward.output)(_with_out(_multilabel_margin_loss_forward, ("output", "is_target")))


def _cumulative(packet, ref):
    import torch._prims_common as utils

    def meta(self, dim, *, dtype=None):
        if self.dim() < 64:
            return ref(self, dim, dtype=dtype)
        dim = utils.canonicalize_dim(self.dim(), dim)
        return self.new_empty(self.shape, dtype=ref(self.new_empty(self.shape[dim]), 0, dtype=dtype).dtype)

    def out_meta(self, dim, *, dtype=None, out):
        if self.dim() < 64:
            return ref(self, dim, dtype=dtype, out=out)
        return _with_out(meta, ("out",))(self, dim, dtype=dtype, out=out)

    _for_tpu(packet.default)(meta)
    _for_tpu(packet.out)(out_meta)


def _cumulatives():
    import torch._refs as refs
    _cumulative(aten.cumsum, refs.cumsum)
    _cumulative(aten.cumprod, refs.cumprod)


_cumulatives()


def _cpp_meta_functions():
    """tpu's meta functions in C++ (csrc/torch/meta.cpp), for ops PyTorch
    has none for on tpu: registered as torchtpu::meta_<op>, which eager's
    sizing calls directly and FakeTensor through TPU_META."""
    for name in ("_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward", "convolution_overrideable",
                 "convolution_backward_overrideable", "multi_margin_loss_backward", "multilabel_margin_loss_backward",
                 "fractional_max_pool3d_backward", "geqrf"):
        TPU_META[getattr(aten, name).default] = getattr(torch.ops.torchtpu, "meta_" + name).default


def run(name, args, kwargs):
    """tpu's meta function of op |name| (c10's "aten::op.overload") on meta
    tensors: eager's sizing calls this for the ops in names()."""
    return _BY_NAME[name](*args, **kwargs)


def names():
    return list(_BY_NAME)


def _channels_last_format(input, weight):
    """The CPU's layout for a convolution of |input| and |weight|: None for
    contiguous (meta.cpp's cpu_conv_format)."""
    from torch._prims_common import suggest_memory_format
    if weight.dim() not in (4, 5):
        return None
    cl = torch.channels_last if weight.dim() == 4 else torch.channels_last_3d
    return cl if cl in (suggest_memory_format(input), suggest_memory_format(weight)) else None


def _fake_convolution(fake_mode, func, *args, **kwargs):
    """FakeTensor's convolution (and backward) on tpu, laid out as the CPU
    lays it out."""
    from torch._subclasses import fake_impls
    out = fake_impls.op_implementations_dict[func](fake_mode, func, *args, **kwargs)
    at = 0 if func is aten.convolution.default else 1  # convolution_backward's grad_output comes first
    input = args[at] if len(args) > at else kwargs["input"]
    weight = args[at + 1] if len(args) > at + 1 else kwargs["weight"]
    fmt = _channels_last_format(input, weight)
    if fmt is None:
        return out
    with fake_mode:
        if isinstance(out, torch.Tensor):
            return out.contiguous(memory_format=fmt)
        return tuple(t if t is None or i == 2 else t.contiguous(memory_format=fmt) for i, t in enumerate(out))


_FAKE = {aten.convolution.default: _fake_convolution, aten.convolution_backward.default: _fake_convolution}


def _on_tpu(args, kwargs):
    from torch._subclasses.fake_tensor import FakeTensor
    return any(isinstance(a, FakeTensor) and a.fake_device.type == "tpu"
               for a in torch.utils._pytree.tree_leaves((args, kwargs)))


def _fake_tpu(fake_mode, func, *args, **kwargs):
    """FakeTensor's implementation of |func| for calls on tpu tensors;
    NotImplemented (FakeTensor's own path) for every other call."""
    if not _on_tpu(args, kwargs):
        return NotImplemented
    if func in _FAKE:
        return _FAKE[func](fake_mode, func, *args, **kwargs)
    from torch._subclasses.fake_tensor import in_kernel_invocation_manager
    with in_kernel_invocation_manager(fake_mode):
        out = TPU_META[func](*args, **kwargs)
    flat_args = torch.utils._pytree.tree_leaves((args, kwargs))
    return fake_mode.wrap_meta_outputs_with_default_device_logic(out, func, flat_args, device=kwargs.get("device"))


def enable():
    """Hands tpu's meta functions to eager's sizing and to FakeTensor."""
    from torch._subclasses import fake_impls
    from . import _C

    _cpp_meta_functions()
    _C._set_meta_functions(run, names())
    checks = fake_impls.op_implementations_checks
    if not any(impl is _fake_tpu for _, impl in checks):
        checks.insert(0, (lambda func: func in TPU_META or func in _FAKE, _fake_tpu))
