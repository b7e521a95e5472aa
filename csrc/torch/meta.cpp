// Meta functions PyTorch lacks for ops it routes only to out-of-tree backends.
// The eager path takes output metadata from meta functions; PyTorch sends a
// tpu convolution to convolution_overrideable and its backward to
// convolution_backward_overrideable, whose only kernels throw. Both have the
// metadata of the core ops, whose meta functions PyTorch has. Some CPU ops
// have no meta function at all, nor some CUDA-only ones PyTorch sends every
// non-CPU device (the fused GRU cell).
//
// These are tpu's alone (torchtpu::meta_<op>, below): aten's Meta key, which
// every device's meta tensors and fake tensors use, stays PyTorch's. Where
// PyTorch's meta function exists but does not fit tpu (another check's
// wording, a dtype it refuses), tpu's own is in torchtpu/_meta.py. Eager's
// sizing asks run_tpu_meta for both before the op's Meta kernel.
#include <ATen/ATen.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "torch/dispatch.h"
#include "torch/py_args.h"
#include "torch/tpu_torch.h"

namespace {

// The layout of PyTorch's CPU convolutions (mkldnn's and the slow kernels):
// channels-last results when the input or the weight is channels-last. The
// meta function cannot tell the device and answers contiguous;
// torchtpu/_meta.py gives compiled graphs the same rule.
c10::MemoryFormat cpu_conv_format(const at::Tensor& input, const at::Tensor& weight) {
  c10::MemoryFormat cl = weight.dim() == 4 ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::ChannelsLast3d;
  if ((weight.dim() == 4 || weight.dim() == 5) &&
      (input.suggest_memory_format() == cl || weight.suggest_memory_format() == cl))
    return cl;
  return c10::MemoryFormat::Contiguous;
}

at::Tensor convolution_overrideable_meta(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                         c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                         c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return at::convolution_symint(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                std::move(groups))
      .contiguous(cpu_conv_format(input, weight));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  // The bias gradient has one element per output channel.
  c10::SymInt channels = grad_output.sym_size(1);
  auto grads = at::convolution_backward_symint(grad_output, input, weight, c10::SymIntArrayRef(&channels, 1), stride,
                                               padding, dilation, transposed, output_padding, std::move(groups),
                                               output_mask);
  c10::MemoryFormat format = cpu_conv_format(input, weight);
  for (at::Tensor* grad : {&std::get<0>(grads), &std::get<1>(grads)})
    if (grad->defined()) *grad = grad->contiguous(format);
  return grads;
}

// The margin losses' backwards have CPU and CUDA kernels but no meta
// function; the input gradient is shaped like the input.
at::Tensor multi_margin_loss_backward_meta(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, const at::Scalar& p, const at::Scalar& margin,
                                           const std::optional<at::Tensor>& weight, int64_t reduction) {
  return at::empty_like(self);
}

at::Tensor multilabel_margin_loss_backward_meta(const at::Tensor& grad_output, const at::Tensor& self,
                                                const at::Tensor& target, int64_t reduction,
                                                const at::Tensor& is_target) {
  return at::empty_like(self);
}

// fractional_max_pool3d_backward has CPU and CUDA kernels but no meta
// function (the 2-D one has); the input gradient is shaped like the input.
at::Tensor fractional_max_pool3d_backward_meta(const at::Tensor& grad_output, const at::Tensor& self,
                                               at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                               const at::Tensor& indices) {
  return at::empty_like(self);
}

// geqrf has only CPU and CUDA kernels. LAPACK's layout: the packed
// reflectors and R column-major in each matrix, tau [..., min(m, n)].
std::tuple<at::Tensor, at::Tensor> geqrf_meta(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  at::ScalarType t = self.scalar_type();
  torchtpu::check_admitted(t == at::kFloat || t == at::kDouble || t == at::kComplexFloat || t == at::kComplexDouble, "geqrf_cpu",
                 t);
  int64_t m = self.size(-2), n = self.size(-1);
  std::vector<int64_t> strides(self.dim());
  for (int64_t i = self.dim() - 3, stride = m * n; i >= 0; i--) {
    strides[i] = stride;
    stride *= self.size(i);
  }
  strides[self.dim() - 2] = 1;
  strides[self.dim() - 1] = std::max<int64_t>(m, 1);
  auto tau = self.sizes().vec();
  tau.pop_back();
  tau.back() = std::min(m, n);
  return {at::empty_strided(self.sizes(), strides, self.options()), at::empty(tau, self.options())};
}

// The fused GRU cell and its backward have only CUDA kernels. The cell
// returns hy (as hx) and a [.., 5H] workspace; the backward the gate
// gradients (as the gates), hx's, and the biases' when there are biases.
std::tuple<at::Tensor, at::Tensor> thnn_fused_gru_cell_meta(const at::Tensor& input_gates,
                                                            const at::Tensor& hidden_gates, const at::Tensor& hx,
                                                            const std::optional<at::Tensor>& input_bias,
                                                            const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() >= 1 && input_gates.sym_sizes() == hidden_gates.sym_sizes(),
              "_thnn_fused_gru_cell: input_gates and hidden_gates must have the same size, got ",
              input_gates.sym_sizes(), " and ", hidden_gates.sym_sizes());
  TORCH_CHECK(hx.dim() == input_gates.dim() && input_gates.sym_size(-1) == hx.sym_size(-1) * 3,
              "_thnn_fused_gru_cell: the gates must be 3 * hidden_size wide, got ", input_gates.sym_sizes(),
              " for a hidden state of ", hx.sym_sizes());
  auto ws = hx.sym_sizes().vec();
  ws.back() *= 5;
  return {at::empty_like(hx, at::MemoryFormat::Contiguous), at::empty_symint(ws, input_gates.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> thnn_fused_gru_cell_backward_meta(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK(workspace.dim() == grad_hy.dim() && workspace.sym_size(-1) == grad_hy.sym_size(-1) * 5,
              "_thnn_fused_gru_cell_backward: the workspace must be 5 * hidden_size wide, got ",
              workspace.sym_sizes(), " for a gradient of ", grad_hy.sym_sizes());
  auto gates = grad_hy.sym_sizes().vec();
  gates.back() *= 3;
  at::Tensor g_in = at::empty_symint(gates, workspace.options()), g_hid = at::empty_symint(gates, workspace.options());
  at::Tensor b_in, b_hid;
  if (has_bias) {
    b_in = at::empty_symint({gates.back()}, workspace.options());
    b_hid = at::empty_symint({gates.back()}, workspace.options());
  }
  return {g_in, g_hid, at::empty_like(grad_hy, at::MemoryFormat::Contiguous), b_in, b_hid};
}

// The aten ops whose meta functions above are tpu's.
const char* const kCppMetaOps[] = {"_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward",
                                   "convolution_overrideable", "convolution_backward_overrideable",
                                   "multi_margin_loss_backward", "multilabel_margin_loss_backward",
                                   "fractional_max_pool3d_backward", "geqrf"};

PyObject* g_tpu_meta = nullptr;                  // torchtpu._meta.run, set at import
std::unordered_set<c10::OperatorName> g_tpu_meta_ops;  // written at import, before any tpu op

}  // namespace

namespace torchtpu {

void set_tpu_meta(PyObject* fn, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    size_t dot = name.find('.');
    g_tpu_meta_ops.emplace(name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1));
  }
  Py_XINCREF(fn);
  Py_XDECREF(g_tpu_meta);
  g_tpu_meta = fn;
}

std::pair<pybind11::tuple, pybind11::dict> py_args(const c10::FunctionSchema& schema,
                                                    c10::ArrayRef<c10::IValue> ivs) {
  pybind11::list args;
  pybind11::dict kwargs;
  for (size_t i = 0; i < ivs.size(); i++) {
    const c10::Argument& arg = schema.arguments()[i];
    c10::TypePtr type = arg.real_type();
    if (const auto* optional = type->castRaw<c10::OptionalType>()) type = optional->getElementType();
    pybind11::object v;
    if (ivs[i].isInt() && type->kind() == c10::TypeKind::ScalarTypeType)
      v = pybind11::reinterpret_borrow<pybind11::object>(
          reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(ivs[i].toInt()))));
    else if (ivs[i].isInt() && type->kind() == c10::TypeKind::LayoutType)
      v = pybind11::reinterpret_borrow<pybind11::object>(
          reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(ivs[i].toInt()))));
    else if (ivs[i].isInt() && type->kind() == c10::TypeKind::MemoryFormatType)
      v = pybind11::reinterpret_borrow<pybind11::object>(
          torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(ivs[i].toInt())));
    else
      v = torch::jit::toPyObject(ivs[i]);
    if (arg.kwarg_only()) kwargs[pybind11::str(arg.name())] = v;
    else args.append(v);
  }
  return {pybind11::tuple(args), kwargs};
}

bool run_tpu_meta(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  static const auto* cpp = [] {
    auto* table = new std::unordered_map<c10::OperatorName, c10::OperatorHandle>();
    for (const char* name : kCppMetaOps)
      table->emplace(c10::OperatorName(std::string("aten::") + name, ""),
                     c10::Dispatcher::singleton().findSchemaOrThrow((std::string("torchtpu::meta_") + name).c_str(), ""));
    return table;
  }();
  auto found = cpp->find(op.operator_name());
  if (found != cpp->end()) {
    found->second.callBoxed(stack);
    return true;
  }
  if (g_tpu_meta == nullptr || g_tpu_meta_ops.count(op.operator_name()) == 0) return false;
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  pybind11::gil_scoped_acquire gil;
  auto [args, kwargs] = py_args(schema, torch::jit::last(stack, n));
  // A refusal raises the Python error itself (error_already_set), which
  // reaches the caller as PyTorch's Python meta functions' errors do.
  pybind11::object result = pybind11::reinterpret_borrow<pybind11::object>(g_tpu_meta)(
      pybind11::str(c10::toString(op.operator_name())), args, kwargs);
  torch::jit::drop(stack, n);
  const auto& rets = schema.returns();
  if (rets.size() == 1) {
    stack.push_back(torch::jit::toIValue(result, rets[0].type()));
  } else {
    auto items = result.cast<pybind11::tuple>();
    TORCH_INTERNAL_ASSERT(items.size() == rets.size(), "tpu's meta function of ", op.operator_name(), " returned ",
                          items.size(), " results, not ", rets.size());
    for (size_t i = 0; i < rets.size(); i++) stack.push_back(torch::jit::toIValue(items[i], rets[i].type()));
  }
  return true;
}

}  // namespace torchtpu

// The aten ops above, whose meta functions are tpu's: each is registered as
// torchtpu::meta_<op> (the aten schema, renamed) on the Meta key, which
// eager's sizing (run_tpu_meta) and FakeTensor on tpu (torchtpu/_meta.py)
// call; aten's own Meta key stays PyTorch's.

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  for (const char* name : kCppMetaOps) {
    const c10::FunctionSchema& aten =
        c10::Dispatcher::singleton().findSchemaOrThrow((std::string("aten::") + name).c_str(), "").schema();
    m.def(aten.cloneWithName(std::string("torchtpu::meta_") + name, ""));
  }
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("meta__thnn_fused_gru_cell", TORCH_FN(thnn_fused_gru_cell_meta));
  m.impl("meta__thnn_fused_gru_cell_backward", TORCH_FN(thnn_fused_gru_cell_backward_meta));
  m.impl("meta_convolution_overrideable", TORCH_FN(convolution_overrideable_meta));
  m.impl("meta_convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable_meta));
  m.impl("meta_multi_margin_loss_backward", TORCH_FN(multi_margin_loss_backward_meta));
  m.impl("meta_multilabel_margin_loss_backward", TORCH_FN(multilabel_margin_loss_backward_meta));
  m.impl("meta_fractional_max_pool3d_backward", TORCH_FN(fractional_max_pool3d_backward_meta));
  m.impl("meta_geqrf", TORCH_FN(geqrf_meta));
}
