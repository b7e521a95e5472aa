// Meta functions PyTorch lacks for ops it routes only to out-of-tree backends.
// The eager path takes output metadata from meta functions; PyTorch sends a
// tpu convolution to convolution_overrideable and its backward to
// convolution_backward_overrideable, whose only kernels throw. Both have the
// metadata of the core ops, whose meta functions PyTorch has. Some CPU ops
// have no meta function at all, nor some CUDA-only ones PyTorch sends every
// non-CPU device (the fused GRU cell).
#include <ATen/ATen.h>
#include <torch/library.h>

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

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_thnn_fused_gru_cell", TORCH_FN(thnn_fused_gru_cell_meta));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(thnn_fused_gru_cell_backward_meta));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable_meta));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable_meta));
  m.impl("multi_margin_loss_backward", TORCH_FN(multi_margin_loss_backward_meta));
  m.impl("multilabel_margin_loss_backward", TORCH_FN(multilabel_margin_loss_backward_meta));
  m.impl("fractional_max_pool3d_backward", TORCH_FN(fractional_max_pool3d_backward_meta));
  m.impl("geqrf", TORCH_FN(geqrf_meta));
}
