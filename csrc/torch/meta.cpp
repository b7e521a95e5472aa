// Meta functions PyTorch lacks for ops it routes only to out-of-tree backends.
// The eager path takes output metadata from meta functions; PyTorch sends a
// tpu convolution to convolution_overrideable and its backward to
// convolution_backward_overrideable, whose only kernels throw. Both have the
// metadata of the core ops, whose meta functions PyTorch has. Some CPU ops
// have no meta function at all.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {

at::Tensor convolution_overrideable_meta(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                         c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                         c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return at::convolution_symint(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                std::move(groups));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  // The bias gradient has one element per output channel.
  c10::SymInt channels = grad_output.sym_size(1);
  return at::convolution_backward_symint(grad_output, input, weight, c10::SymIntArrayRef(&channels, 1), stride,
                                         padding, dilation, transposed, output_padding, std::move(groups),
                                         output_mask);
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable_meta));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable_meta));
  m.impl("multi_margin_loss_backward", TORCH_FN(multi_margin_loss_backward_meta));
  m.impl("multilabel_margin_loss_backward", TORCH_FN(multilabel_margin_loss_backward_meta));
}
