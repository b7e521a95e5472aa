// Ops whose output size depends on the data (nonzero, masked_select,
// indexing with boolean masks, unique) and ops that return host values
// (equal). Each reads one size back from the device, then runs lowered ops of
// static shape (nonzero_static, index_select …): one sync, no CPU fallback.
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

// unique and unique_consecutive: runs of equal slices along dim 0 of
// |sorted| (sorted, or in input order for the consecutive ops). |perm| maps a
// sorted position to its input position (undefined: the identity). Returns the
// first slice of each run, each input's run number (the inverse) and the run
// lengths; |inverse| and |counts| are empty unless asked for.
using Unique = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

Unique unique_runs(const at::Tensor& sorted, const at::Tensor& perm, bool return_inverse, bool return_counts) {
  int64_t n = sorted.size(0);
  at::Tensor first = at::ones({n}, sorted.options().dtype(at::kBool));
  if (n > 1) {
    at::Tensor differs = sorted.slice(0, 1).ne(sorted.slice(0, 0, n - 1));
    if (differs.dim() > 1) differs = differs.flatten(1).any(1);
    first.slice(0, 1).copy_(differs);
  }
  int64_t count = first.sum().item<int64_t>();  // the one sync
  at::Tensor starts = at::nonzero_static(first, count, -1).view(-1);
  at::Tensor empty = at::empty({0}, sorted.options().dtype(at::kLong));
  at::Tensor inverse = empty, counts = empty;
  if (return_inverse) {
    inverse = first.cumsum(0).sub_(1);
    if (perm.defined()) inverse = at::empty_like(inverse).scatter_(0, perm, inverse);
  }
  if (return_counts) counts = at::diff(at::cat({starts, at::full({1}, n, starts.options())}));
  return {sorted.index_select(0, starts), inverse, counts};
}

Unique unique2_impl(const at::Tensor& self, bool sorted, bool return_inverse, bool return_counts) {
  (void)sorted;  // always sorted, as PyTorch's CPU kernel
  auto [values, perm] = at::sort(self.reshape(-1), /*stable=*/true, 0, false);
  auto [u, inverse, counts] = unique_runs(values, perm, return_inverse, return_counts);
  return {u, return_inverse ? inverse.view(self.sizes()) : inverse, counts};
}

std::tuple<at::Tensor, at::Tensor> unique_impl(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto [u, inverse, counts] = unique2_impl(self, sorted, return_inverse, false);
  return {u, inverse};
}

// unique over slices along |dim|: the slices sorted lexicographically by
// stable sorts on each column from the last (a radix sort).
Unique unique_dim_impl(const at::Tensor& self, int64_t dim, bool sorted, bool return_inverse,
                       bool return_counts) {
  (void)sorted;
  (void)return_inverse;  // PyTorch returns both whatever the flags say
  (void)return_counts;
  dim = at::maybe_wrap_dim(dim, self.dim());
  at::Tensor moved = self.movedim(dim, 0);
  int64_t n = moved.size(0);
  at::Tensor rows = moved.dim() > 1 ? moved.flatten(1) : moved.unsqueeze(1);
  at::Tensor perm = at::arange(n, self.options().dtype(at::kLong));
  for (int64_t j = rows.size(1) - 1; j >= 0; j--) {
    at::Tensor key = rows.select(1, j).index_select(0, perm);
    perm = perm.index_select(0, std::get<1>(at::sort(key, /*stable=*/true, 0, false)));
  }
  auto [u, inverse, counts] = unique_runs(moved.index_select(0, perm), perm, true, true);
  return {u.movedim(0, dim), inverse, counts};
}

Unique unique_dim_consecutive_impl(const at::Tensor& self, int64_t dim, bool return_inverse, bool return_counts) {
  (void)return_inverse;
  (void)return_counts;
  dim = at::maybe_wrap_dim(dim, self.dim());
  auto [u, inverse, counts] = unique_runs(self.movedim(dim, 0), at::Tensor(), true, true);
  return {u.movedim(0, dim), inverse, counts};
}

Unique unique_consecutive_impl(const at::Tensor& self, bool return_inverse, bool return_counts,
                               std::optional<int64_t> dim) {
  if (dim.has_value()) return unique_dim_consecutive_impl(self, *dim, return_inverse, return_counts);
  auto [u, inverse, counts] = unique_runs(self.reshape(-1), at::Tensor(), return_inverse, return_counts);
  return {u, return_inverse ? inverse.view(self.sizes()) : inverse, counts};
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
  m.impl("_unique", TORCH_FN(torchtpu::unique_impl));
  m.impl("_unique2", TORCH_FN(torchtpu::unique2_impl));
  m.impl("unique_dim", TORCH_FN(torchtpu::unique_dim_impl));
  m.impl("unique_consecutive", TORCH_FN(torchtpu::unique_consecutive_impl));
  m.impl("unique_dim_consecutive", TORCH_FN(torchtpu::unique_dim_consecutive_impl));
  m.impl("equal", TORCH_FN(torchtpu::equal_impl));
  m.impl("is_nonzero", TORCH_FN(torchtpu::is_nonzero_impl));
}
