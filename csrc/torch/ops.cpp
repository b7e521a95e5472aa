// Ops whose output size depends on the data (nonzero, masked_select,
// indexing with boolean masks, unique, repeat_interleave) and ops that return
// host values (equal). Each reads one size back from the device, then runs
// lowered ops of static shape (nonzero_static, index_select …): one sync, no
// CPU fallback. Histograms read back the data's range the same way, for
// PyTorch's checks; bincount reads back its largest value, the size of its
// result. linalg.lstsq returns residuals only for full-rank tall matrices
// under the gelsd and gelss drivers: it reads back whether all are.
// linalg.ldl_factor_ex with check_errors reads back info.
#include <ATen/MemoryOverlap.h>
#include <ATen/ATen.h>
#include <ATen/native/LinearAlgebraUtils.h>
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
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());  // sic: the CPU kernel's message has no space
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
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "masked_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(out);  // the CPU kernel's checks, before any resize
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
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

// histogram and histogramdd, as PyTorch's CPU kernel over |rows| ([N, D]):
// the outer edges of each dim are the range argument or the data's extremes
// (read back: PyTorch checks them on the host), widened by 0.5 when equal.
std::vector<at::Tensor> histogram_edges(const at::Tensor& rows, at::IntArrayRef bins,
                                        std::optional<at::ArrayRef<double>> range) {
  int64_t dims = rows.size(1);
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == dims,
              "histogramdd: The size of bins must be equal to the innermost dimension of the input.");
  std::vector<double> lo(dims, 0.0), hi(dims, 1.0);
  if (range.has_value()) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * dims, "torch.histogramdd: for a ", dims,
                "-dimensional histogram range should have ", 2 * dims, " elements, but got ", range->size());
    for (int64_t d = 0; d < dims; d++) lo[d] = (*range)[2 * d], hi[d] = (*range)[2 * d + 1];
  } else if (rows.numel() > 0) {
    at::Tensor extremes = at::stack({rows.amin(0), rows.amax(0)}).to(at::kDouble).cpu();  // the one sync
    for (int64_t d = 0; d < dims; d++) lo[d] = extremes[0][d].item<double>(), hi[d] = extremes[1][d].item<double>();
  }
  std::vector<at::Tensor> edges;
  for (int64_t d = 0; d < dims; d++) {
    TORCH_CHECK(bins[d] > 0, "torch.histogram(): bins must be > 0, but got ", bins[d], " for dimension ", d);
    TORCH_CHECK(std::isfinite(lo[d]) && std::isfinite(hi[d]), "torch.histogramdd: dimension ", d, "'s range [",
                lo[d], ", ", hi[d], "] is not finite");
    TORCH_CHECK(lo[d] <= hi[d], "torch.histogramdd: min should not exceed max, but got min ", lo[d], " max ", hi[d],
                " for dimension ", d);
    if (lo[d] == hi[d]) lo[d] -= 0.5, hi[d] += 0.5;
    edges.push_back(at::linspace(lo[d], hi[d], bins[d] + 1, rows.options()));
  }
  return edges;
}

// The histogram of |rows| over |edges| (one tensor per dim): an element
// outside any dim's outer edges is not counted, the top edge belongs to the
// last bin.
at::Tensor histogram_counts(const at::Tensor& rows, at::TensorList edges, const std::optional<at::Tensor>& weight,
                            bool density) {
  int64_t n = rows.size(0);
  TORCH_CHECK(static_cast<int64_t>(edges.size()) == rows.size(1),
              "histogramdd: The size of bins must be equal to the innermost dimension of the input.");
  at::Tensor flat = at::zeros({n}, rows.options().dtype(at::kLong));
  at::Tensor inside = at::ones({n}, rows.options().dtype(at::kBool));
  std::vector<int64_t> shape;
  for (size_t d = 0; d < edges.size(); d++) {
    const at::Tensor& e = edges[d];
    TORCH_CHECK(e.dim() == 1, "torch.histogramdd: bins tensor should have one dimension, but got ", e.dim(),
                " dimensions in the bins tensor for dimension ", d);
    int64_t count = e.size(0) - 1;
    at::Tensor x = rows.select(1, d);
    // std::upper_bound as the CPU kernel searches, step by step (unsorted edges too)
    at::Tensor bin = at::searchsorted(e, x, /*out_int32=*/false, /*right=*/true).sub_(1);
    bin.clamp_(0, std::max<int64_t>(count - 1, 0));
    inside.logical_and_(x.ge(e[0]).logical_and_(x.le(e[count])));
    flat = flat.mul(count).add_(bin);
    shape.push_back(count);
  }
  at::Tensor w = weight.has_value() ? weight->reshape({n}) : at::ones({n}, rows.options());
  w = at::where(inside, w, at::zeros({}, w.options()));
  at::Tensor hist = at::zeros({c10::multiply_integers(shape)}, rows.options()).index_add_(0, flat, w).view(shape);
  if (density) {
    hist = hist.div(hist.sum());
    for (size_t d = 0; d < edges.size(); d++) {
      std::vector<int64_t> along(edges.size(), 1);
      along[d] = shape[d];
      hist = hist.div(edges[d].diff().view(along));
    }
  }
  return hist;
}

at::Tensor histogram_rows(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(self.dim() >= 1, "torch.histogramdd: input tensor should have at least 2 dimensions");
  at::Tensor rows = self.reshape({-1, self.size(-1)});
  if (weight.has_value())
    TORCH_CHECK(weight->dim() == self.dim() - 1 && weight->sizes() == self.sizes().slice(0, self.dim() - 1),
                "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor "
                "excluding its innermost dimension, but got input with shape ",
                self.sizes(), " and weight with shape ", weight->sizes());
  return rows;
}

// histogram's input as one-column rows, its weight flattened alike.
at::Tensor histogram_column(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
  std::optional<at::Tensor> flat;
  if (weight.has_value()) flat = weight->reshape({-1});
  return histogram_rows(self.reshape({-1, 1}), flat);
}

std::tuple<at::Tensor, at::Tensor> histogram_bin_ct(const at::Tensor& self, int64_t bins,
                                                    std::optional<at::ArrayRef<double>> range,
                                                    const std::optional<at::Tensor>& weight, bool density) {
  at::Tensor rows = histogram_column(self, weight);
  std::vector<at::Tensor> edges = histogram_edges(rows, {bins}, range);
  return {histogram_counts(rows, edges, weight, density), edges[0]};
}

std::tuple<at::Tensor, at::Tensor> histogram_bins_tensor(const at::Tensor& self, const at::Tensor& bins,
                                                         const std::optional<at::Tensor>& weight, bool density) {
  return {histogram_counts(histogram_column(self, weight), {bins}, weight, density), bins.clone()};
}

std::vector<at::Tensor> histogramdd_bin_edges(const at::Tensor& self, at::IntArrayRef bins,
                                              std::optional<at::ArrayRef<double>> range,
                                              const std::optional<at::Tensor>& weight, bool density) {
  (void)density;
  return histogram_edges(histogram_rows(self, weight), bins, range);
}

at::Tensor histogramdd_from_bin_cts(const at::Tensor& self, at::IntArrayRef bins,
                                    std::optional<at::ArrayRef<double>> range, const std::optional<at::Tensor>& weight,
                                    bool density) {
  at::Tensor rows = histogram_rows(self, weight);
  return histogram_counts(rows, histogram_edges(rows, bins, range), weight, density);
}

at::Tensor histogramdd_from_bin_tensors(const at::Tensor& self, at::TensorList bins,
                                        const std::optional<at::Tensor>& weight, bool density) {
  return histogram_counts(histogram_rows(self, weight), bins, weight, density);
}

// bincount: as many bins as the largest value + 1 (read back with the
// smallest, which PyTorch checks), at least minlength. Float weights count in
// float, others in double, as PyTorch's CPU kernel.
at::Tensor bincount_impl(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  check_admitted(at::isIntegralType(self.scalar_type(), /*includeBool=*/true), "bincount_cpu", self.scalar_type());
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  if (self.numel() == 0) return at::zeros({minlength}, self.options().dtype(at::kLong));
  bool weighted = weights.has_value() && weights->defined();
  TORCH_CHECK(!weighted || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  at::Tensor extremes = at::stack({self.min(), self.max()}).to(at::kLong).cpu();  // the one sync
  TORCH_CHECK(extremes[0].item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
  int64_t bins = std::max(extremes[1].item<int64_t>() + 1, minlength);
  at::ScalarType dtype = !weighted ? at::kLong : weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::Tensor w = weighted ? weights->to(dtype) : at::ones({self.size(0)}, self.options().dtype(dtype));
  return at::zeros({bins}, w.options()).index_add_(0, self.to(at::kLong), w);
}

// repeat_interleave(repeats): index i repeated repeats[i] times. The total
// and the minimum (for PyTorch's negative check) come back in the one sync;
// then a mark at each cumulative sum, summed up, numbers the runs.
at::Tensor repeat_interleave_impl(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  check_admitted(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt, "repeat_interleave_cpu",
                 repeats.scalar_type());
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

// torch.linalg.lstsq. torchtpu::lstsq (csrc/lower/factor.c) solves on the
// broadcast batch; which of its results PyTorch returns depends on the
// driver (gelsy, the default: solution and rank; gels: solution, and
// residuals for tall matrices; gelsd, gelss: all, residuals for tall
// full-rank matrices).
using Lstsq = std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&>;

// |batch| followed by |tail|: the sizes of one of lstsq's results.
std::vector<int64_t> batched(std::vector<int64_t> batch, std::initializer_list<int64_t> tail) {
  batch.insert(batch.end(), tail);
  return batch;
}
using LstsqFn = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                           double, bool);

Lstsq lstsq_out(const at::Tensor& self, const at::Tensor& b, std::optional<double> rcond,
                std::optional<c10::string_view> driver, at::Tensor& solution, at::Tensor& residuals, at::Tensor& rank,
                at::Tensor& singular_values) {
  TORCH_CHECK(self.dim() >= 2, "torch.linalg.lstsq: input must have at least 2 dimensions.");
  TORCH_CHECK(b.dim() >= 1, "torch.linalg.lstsq: other must have at least 1 dimension.");
  TORCH_CHECK(self.scalar_type() == b.scalar_type(),
              "torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's dtype ",
              self.scalar_type(), " and other's dtype ", b.scalar_type());
  int64_t dim_diff = self.dim() - b.dim();
  TORCH_CHECK(dim_diff == 0 || dim_diff == 1,
              "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and (input.dim() - other.dim()) "
              "<= 1");
  bool vector = dim_diff == 1;
  TORCH_CHECK(self.size(-2) == b.size(vector ? -1 : -2), "torch.linalg.lstsq: input.size(-2) should match other.size(",
              vector ? "-1" : "-2", ")");
  at::ScalarType t = self.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kDouble || t == at::kComplexFloat || t == at::kComplexDouble,
              "This function doesn't handle types other than float and double");
  std::string name = driver.has_value() ? std::string(*driver) : "gelsy";
  TORCH_CHECK(name == "gels" || name == "gelsy" || name == "gelsd" || name == "gelss",
              "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  at::Tensor rhs = vector ? b.unsqueeze(-1) : b;
  auto batch = at::infer_size(self.sizes().slice(0, self.dim() - 2), rhs.sizes().slice(0, rhs.dim() - 2));
  int64_t m = self.size(-2), n = self.size(-1), k = rhs.size(-1);
  at::ScalarType real = c10::toRealValueType(t);
  double eps = real == at::kDouble ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
  // LAPACK takes a negative rcond as the machine precision
  double cut = !rcond.has_value() ? eps * std::max(m, n) : *rcond < 0 ? eps : *rcond;
  at::Tensor x, res, rk, sv;
  if (self.numel() == 0 || rhs.numel() == 0) {
    x = at::zeros(batched(batch, {n, k}), self.options());
    res = at::zeros(batched(batch, {k}), self.options().dtype(real));
    rk = at::zeros(batch, self.options().dtype(at::kLong));
    sv = at::zeros(batched(batch, {std::min(m, n)}), self.options().dtype(real));
  } else {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("torchtpu::lstsq", "").typed<LstsqFn>();
    std::tie(x, res, rk, sv) =
        op.call(self.expand(batched(batch, {m, n})), rhs.expand(batched(batch, {m, k})), cut, name == "gels");
  }
  at::Tensor none = at::empty({0}, self.options().dtype(real));
  bool svd = name == "gelsd" || name == "gelss";
  bool with_residuals = m > n && (name == "gels" || (svd && rk.eq(n).all().item<bool>()));  // the read-back
  auto store = [](at::Tensor& out, const at::Tensor& value) {
    at::native::resize_output(out, value.sizes());
    out.copy_(value);
  };
  store(solution, vector ? x.squeeze(-1) : x);
  store(residuals, with_residuals ? res : none);
  // rank and singular values are A's: its batch, not the broadcast one
  auto of_a = [&self](at::Tensor v) {
    for (int64_t i = 0; i < self.dim() - 2; i++)
      if (self.size(i) == 1) v = v.narrow(i, 0, 1);
    return v;
  };
  store(rank, name == "gels" ? at::empty({0}, self.options().dtype(at::kLong)) : of_a(rk));
  store(singular_values, svd ? of_a(sv) : none);
  return {solution, residuals, rank, singular_values};
}

// torchtpu::lstsq's meta function.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lstsq_meta(const at::Tensor& self, const at::Tensor& b,
                                                                      double rcond, bool gels) {
  auto batch = self.sizes().slice(0, self.dim() - 2).vec();
  int64_t m = self.size(-2), n = self.size(-1), k = b.size(-1);
  auto real = self.options().dtype(c10::toRealValueType(self.scalar_type()));
  return {at::empty(batched(batch, {n, k}), self.options()), at::empty(batched(batch, {k}), real),
          at::empty(batch, self.options().dtype(at::kLong)), at::empty(batched(batch, {std::min(m, n)}), real)};
}

// torch.linalg.ldl_factor_ex: torchtpu::ldl_factor (csrc/lower/factor.c)
// factors; check_errors reads info back and raises as the CPU kernel does,
// through PyTorch's own _linalg_check_errors.
using Ldl = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using LdlFn = Ldl(const at::Tensor&, bool);

// The CPU's checks (its meta function's, in C++: the Python meta registration words them its own way).
void ldl_factor_checks(const at::Tensor& self) {
  at::native::squareCheckInputs(self, "torch.linalg.ldl_factor_ex");
  at::native::checkFloatingOrComplex(self, "torch.linalg.ldl_factor_ex");
}

Ldl ldl_factor(const at::Tensor& self, bool hermitian, bool check_errors) {
  ldl_factor_checks(self);
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("torchtpu::ldl_factor", "").typed<LdlFn>();
  Ldl r = op.call(self, hermitian);
  if (check_errors) at::_linalg_check_errors(std::get<2>(r), "torch.linalg.ldl_factor_ex", self.dim() == 2);
  return r;
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> ldl_factor_out(const at::Tensor& self, bool hermitian,
                                                                 bool check_errors, at::Tensor& ld, at::Tensor& pivots,
                                                                 at::Tensor& info) {
  // a structured kernel's out= checks
  ldl_factor_checks(self);
  Ldl meta = at::linalg_ldl_factor_ex(at::empty_like(self, self.options().device(at::kMeta)), hermitian, false);
  const at::Tensor* outs[3] = {&ld, &pivots, &info};
  const at::Tensor* want[3] = {&std::get<0>(meta), &std::get<1>(meta), &std::get<2>(meta)};
  for (int i = 0; i < 3; i++)
    TORCH_CHECK(outs[i]->scalar_type() == want[i]->scalar_type(), "Expected out tensor to have dtype ",
                c10::scalarTypeToTypeMeta(want[i]->scalar_type()), ", but got ",
                c10::scalarTypeToTypeMeta(outs[i]->scalar_type()), " instead");
  Ldl r = ldl_factor(self, hermitian, check_errors);
  at::native::resize_output(ld, std::get<0>(r).sizes());
  at::native::resize_output(pivots, std::get<1>(r).sizes());
  at::native::resize_output(info, std::get<2>(r).sizes());
  ld.copy_(std::get<0>(r));
  pivots.copy_(std::get<1>(r));
  info.copy_(std::get<2>(r));
  return {ld, pivots, info};
}

// torchtpu::ldl_factor's meta function.
Ldl ldl_factor_meta(const at::Tensor& self, bool hermitian) {
  return at::linalg_ldl_factor_ex(self, hermitian, false);
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
  m.impl("histogram.bin_ct", TORCH_FN(torchtpu::histogram_bin_ct));
  m.impl("histogram.bins_tensor", TORCH_FN(torchtpu::histogram_bins_tensor));
  m.impl("_histogramdd_bin_edges", TORCH_FN(torchtpu::histogramdd_bin_edges));
  m.impl("_histogramdd_from_bin_cts", TORCH_FN(torchtpu::histogramdd_from_bin_cts));
  m.impl("_histogramdd_from_bin_tensors", TORCH_FN(torchtpu::histogramdd_from_bin_tensors));
  m.impl("bincount", TORCH_FN(torchtpu::bincount_impl));
  m.impl("repeat_interleave.Tensor", TORCH_FN(torchtpu::repeat_interleave_impl));
  m.impl("equal", TORCH_FN(torchtpu::equal_impl));
  m.impl("linalg_lstsq.out", TORCH_FN(torchtpu::lstsq_out));
  m.impl("linalg_ldl_factor_ex", TORCH_FN(torchtpu::ldl_factor));
  m.impl("linalg_ldl_factor_ex.out", TORCH_FN(torchtpu::ldl_factor_out));
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("lstsq", TORCH_FN(torchtpu::lstsq_meta));
  m.impl("ldl_factor", TORCH_FN(torchtpu::ldl_factor_meta));
}
