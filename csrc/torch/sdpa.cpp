// F.scaled_dot_product_attention on tpu. PyTorch asks each backend which
// fused implementation serves a call (the _fused_sdp_choice stub); tpu
// answers "overrideable" wherever its fused op can (the rule of
// csrc/lower/attention.c, a hand-written kernel on the CPU plugin; query
// heads grouped over fewer key heads included, with enable_gqa) and "math",
// PyTorch's decomposition, for dropout and 3-d inputs.
// In eager the aten op returns sizes beside tensors, which the generic
// kernel cannot, so it runs torchtpu::attention (its tensor returns, same
// arguments) and adds the rest; compiled graphs lower the aten op directly.
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>


namespace torchtpu {
namespace {

using AttentionFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                       const std::optional<at::Tensor>&, double, bool, bool,
                                                       std::optional<double>);

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  // 4-d only: PyTorch's meta function of the fused op takes no other.
  // Sizes are read as SymInts, and only the leading ones: under torch.compile
  // with dynamic shapes, reading a sequence length would pin it to a constant
  // and recompile the graph for every length.
  // Heads: the same, or with enable_gqa, query heads in groups over key
  // heads (without it, math raises PyTorch's own error).
  constexpr int r = 4;
  auto shapes_fit = [&] {
    if (k.sym_size(0) != q.sym_size(0) || v.sym_size(0) != q.sym_size(0) || v.sym_size(1) != k.sym_size(1))
      return false;
    if (k.sym_size(1) == q.sym_size(1)) return true;
    return enable_gqa && k.sym_size(1) > 0 && q.sym_size(1) % k.sym_size(1) == 0;
  };
  // A mask that does not broadcast to the scores goes to math, which raises
  // PyTorch's error (known sizes only: no guard on a dynamic length).
  auto mask_fits = [&] {
    if (!mask.has_value() || !mask->defined()) return true;
    if (mask->dim() > r) return false;
    const c10::SymInt scores[r] = {q.sym_size(0), q.sym_size(1), q.sym_size(2), k.sym_size(2)};
    for (int64_t i = 1; i <= mask->dim(); i++) {
      std::optional<int64_t> m = mask->sym_size(-i).maybe_as_int(), n = scores[r - i].maybe_as_int();
      if (m && n && *m != 1 && *m != *n) return false;
    }
    return true;
  };
  bool fused = dropout_p == 0.0 && q.dim() == r && k.dim() == r && v.dim() == r && !q.is_nested() &&
               at::isFloatingType(q.scalar_type()) && k.scalar_type() == q.scalar_type() &&
               v.scalar_type() == q.scalar_type() && shapes_fit() && mask_fits();
  return static_cast<int64_t>(fused ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& bias,
                double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("torchtpu::attention", "").typed<AttentionFn>();
  auto [out, lse] = op.call(q, k, v, bias, dropout_p, is_causal, return_debug_mask, scale);
  // No dropout: the seed and offset the backward gets are never read.
  at::Tensor seed = at::empty({}, q.options().dtype(at::kLong)), offset = at::empty({}, q.options().dtype(at::kLong));
  return {out, lse, at::Tensor(), at::Tensor(), q.sym_size(-2), k.sym_size(-2), seed, offset, at::Tensor()};
}

// torchtpu::attention's meta function: the aten op's, first two returns.
std::tuple<at::Tensor, at::Tensor> attention_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const std::optional<at::Tensor>& bias, double dropout_p,
                                                  bool is_causal, bool return_debug_mask,
                                                  std::optional<double> scale) {
  auto r = at::_scaled_dot_product_fused_attention_overrideable(q, k, v, bias, dropout_p, is_causal,
                                                                return_debug_mask, scale);
  return {std::get<0>(r), std::get<1>(r)};
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) { m.impl("attention", &torchtpu::attention_meta); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", &torchtpu::fused_sdp_choice);
  m.impl("_scaled_dot_product_fused_attention_overrideable", &torchtpu::fused_attention);
}

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchtpu::fused_sdp_choice);
}  // namespace at::native
