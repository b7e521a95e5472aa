// Ops whose output size depends on the data (nonzero, masked_select,
// repeat_interleave, indexing with boolean masks) and ops that return host values (equal). Each
// reads one size back from the device, then runs lowered ops of static shape
// (nonzero_static, index_select …): one sync, no CPU fallback.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

at::Tensor nonzero_impl(const at::Tensor& self) {
  int64_t count = self.ne(0).sum().item<int64_t>();  // the one sync
  return at::nonzero_static(self, count, -1);
}

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  at::Tensor r = nonzero_impl(self);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

at::Tensor masked_select_impl(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  auto shapes = at::infer_size(self.sizes(), mask.sizes());
  at::Tensor flat_mask = mask.expand(shapes).reshape(-1);
  at::Tensor idx = nonzero_impl(flat_mask).view(-1);
  return self.expand(shapes).reshape(-1).index_select(0, idx);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  at::Tensor r = masked_select_impl(self, mask);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

// repeat_interleave(repeats): index i repeated repeats[i] times. The total
// and the minimum (for PyTorch's negative check) come back in the one sync;
// then a mark at each cumulative sum, summed up, numbers the runs.
at::Tensor repeat_interleave_impl(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK_NOT_IMPLEMENTED(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
                              "\"repeat_interleave_cpu\" not implemented for '", repeats.scalar_type(), "'");
  int64_t n = repeats.numel(), total = 0;
  if (n > 0) {
    at::Tensor stats = at::stack({repeats.sum(), repeats.min().to(at::kLong)}).cpu();
    total = stats[0].item<int64_t>();
    TORCH_CHECK(stats[1].item<int64_t>() >= 0, "repeats can not be negative");
  }
  TORCH_CHECK(!output_size || *output_size == total, "allocated size does not match required size");
  at::Tensor ends = repeats.cumsum(0, at::kLong).slice(0, 0, n > 0 ? n - 1 : 0);
  at::Tensor marks = at::zeros({total + 1}, ends.options()).index_add_(0, ends, at::ones_like(ends));
  return marks.slice(0, 0, total).cumsum(0).to(repeats.scalar_type());
}

bool equal_impl(const at::Tensor& self, const at::Tensor& other) {
  if (self.sizes() != other.sizes()) return false;
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (self.numel() == 0) return true;
  return self.eq(other).all().item<bool>();
}

bool is_nonzero_impl(const at::Tensor& self) {
  TORCH_CHECK(self.numel() != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(self.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
  return self.item().toBool();
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nonzero", TORCH_FN(torchtpu::nonzero_impl));
  m.impl("nonzero.out", TORCH_FN(torchtpu::nonzero_out));
  m.impl("masked_select", TORCH_FN(torchtpu::masked_select_impl));
  m.impl("masked_select.out", TORCH_FN(torchtpu::masked_select_out));
  m.impl("repeat_interleave.Tensor", TORCH_FN(torchtpu::repeat_interleave_impl));
  m.impl("equal", TORCH_FN(torchtpu::equal_impl));
  m.impl("is_nonzero", TORCH_FN(torchtpu::is_nonzero_impl));
}
