// nn.functional.ctc_loss on tpu. aten::_ctc_loss and its backward take the
// lengths as lists of ints; a program with them as constants would be
// compiled anew for every batch. Eager runs torchtpu::ctc_loss instead: the
// same rule (csrc/lower/ctc.c) with the lengths as tensors, one program per
// padded shape. PyTorch's meta function checks the lengths first, with its
// own messages. The rule computes log_alpha as wide as padded targets allow
// (the longest target, for concatenated ones), narrowed here to the batch's
// longest target as PyTorch sizes it; the backward computes alpha afresh.
// Compiled functions run it the same way: dynamo breaks the graph at
// aten::_ctc_loss, whose output shape depends on the lengths.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using LossFn = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, bool,
                    int64_t);
using BackwardFn = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const at::Tensor&, int64_t, bool, int64_t);

at::Tensor on_meta(const at::Tensor& t) { return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)); }

// The width (in targets) the rule computes at.
int64_t width(const at::Tensor& targets, at::IntArrayRef target_lengths) {
  if (targets.dim() == 2) return targets.size(1);
  int64_t m = 0;
  for (int64_t l : target_lengths) m = std::max(m, l);
  return m;
}

// Lengths as a long tensor on |like|'s device: |given| when there is one.
at::Tensor on_device(at::IntArrayRef lengths, const at::Tensor& given, const at::Tensor& like) {
  if (given.defined()) return given.to(like.device(), at::kLong);
  return at::tensor(lengths, at::kLong).to(like.device());
}

Pair loss(const at::Tensor& log_probs, const at::Tensor& targets, at::IntArrayRef il, at::IntArrayRef tl,
          const at::Tensor& il_t, const at::Tensor& tl_t, int64_t blank, bool zero_infinity) {
  // The CPU kernel's checks, in its order.
  at::ScalarType t = log_probs.scalar_type();
  check_admitted(t == at::kFloat || t == at::kDouble, "ctc_loss_cpu", t);
  TORCH_CHECK(log_probs.numel() > 0, "log_probs tensor must not be empty");
  auto sized = at::_ctc_loss(on_meta(log_probs), on_meta(targets), il, tl, blank, zero_infinity);
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("torchtpu::ctc_loss", "").typed<LossFn>();
  auto [nll, log_alpha] = op.call(log_probs, targets, on_device(il, il_t, log_probs), on_device(tl, tl_t, log_probs),
                                  blank, zero_infinity, width(targets, tl));
  return {nll, log_alpha.narrow(2, 0, std::get<1>(sized).size(2))};
}

at::Tensor backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                    at::IntArrayRef il, at::IntArrayRef tl, const at::Tensor& il_t, const at::Tensor& tl_t,
                    const at::Tensor& nll, int64_t blank, bool zero_infinity) {
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("torchtpu::ctc_loss_backward", "").typed<BackwardFn>();
  return op.call(grad, log_probs, targets, on_device(il, il_t, log_probs), on_device(tl, tl_t, log_probs), nll,
                 blank, zero_infinity, width(targets, tl));
}

// Lengths given as tensors, read back as PyTorch's CPU and CUDA kernels read
// them.
std::vector<int64_t> host_lengths(const at::Tensor& t, const char* name) {
  TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), name, " must be integral");
  at::Tensor h = t.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(h.const_data_ptr<int64_t>(), h.const_data_ptr<int64_t>() + h.numel());
}

Pair ctc_loss(const at::Tensor& log_probs, const at::Tensor& targets, at::IntArrayRef il, at::IntArrayRef tl,
              int64_t blank, bool zero_infinity) {
  return loss(log_probs, targets, il, tl, at::Tensor(), at::Tensor(), blank, zero_infinity);
}

Pair ctc_loss_tensor(const at::Tensor& log_probs, const at::Tensor& targets, const at::Tensor& il,
                     const at::Tensor& tl, int64_t blank, bool zero_infinity) {
  auto il_h = host_lengths(il, "input_lengths"), tl_h = host_lengths(tl, "target_lengths");
  return loss(log_probs, targets, il_h, tl_h, il, tl, blank, zero_infinity);
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                             at::IntArrayRef il, at::IntArrayRef tl, const at::Tensor& nll,
                             const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  return backward(grad, log_probs, targets, il, tl, at::Tensor(), at::Tensor(), nll, blank, zero_infinity);
}

at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                    const at::Tensor& il, const at::Tensor& tl, const at::Tensor& nll,
                                    const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  auto il_h = host_lengths(il, "input_lengths"), tl_h = host_lengths(tl, "target_lengths");
  return backward(grad, log_probs, targets, il_h, tl_h, il, tl, nll, blank, zero_infinity);
}

// The meta functions: PyTorch's sizes, log_alpha as wide as the rule
// computes it.
Pair ctc_loss_meta(const at::Tensor& log_probs, const at::Tensor& targets, const at::Tensor& il,
                   const at::Tensor& tl, int64_t blank, bool zero_infinity, int64_t max_target_length) {
  return {at::empty({log_probs.size(1)}, log_probs.options()),
          at::empty({log_probs.size(1), log_probs.size(0), 2 * max_target_length + 1}, log_probs.options())};
}

at::Tensor ctc_loss_backward_meta(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                  const at::Tensor& il, const at::Tensor& tl, const at::Tensor& nll, int64_t blank,
                                  bool zero_infinity, int64_t max_target_length) {
  return at::empty_like(log_probs, at::MemoryFormat::Contiguous);
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("ctc_loss", TORCH_FN(torchtpu::ctc_loss_meta));
  m.impl("ctc_loss_backward", TORCH_FN(torchtpu::ctc_loss_backward_meta));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_ctc_loss", TORCH_FN(torchtpu::ctc_loss));
  m.impl("_ctc_loss.Tensor", TORCH_FN(torchtpu::ctc_loss_tensor));
  m.impl("_ctc_loss_backward", TORCH_FN(torchtpu::ctc_loss_backward));
  m.impl("_ctc_loss_backward.Tensor", TORCH_FN(torchtpu::ctc_loss_backward_tensor));
}
