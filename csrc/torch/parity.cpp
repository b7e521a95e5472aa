// The eager kernel's per-op CPU-parity checks (kernel.h): where PyTorch's
// meta functions check differently from its CPU kernels, or not at all, the
// kernel makes the CPU kernels' checks, with their exceptions and messages.
// Tables by op name; dispatch.cpp's generic kernel calls them.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/addmv_meta_dispatch.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/addr_native.h>
#include <ATen/ops/atan2_meta_dispatch.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/gather_meta_dispatch.h>
#include <ATen/ops/lerp_meta_dispatch.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/ops/topk_meta_dispatch.h>

#include <unordered_set>

#include "torch/kernel.h"

namespace torchtpu {

namespace {

// A CPU tensor with |t|'s sizes and dtype over one element (zero strides):
// what the CPU kernels' shape checks read, with their messages.
at::Tensor stand_in(const at::Tensor& t) {
  return at::empty({1}, at::TensorOptions().dtype(t.scalar_type())).as_strided(t.sizes(), c10::DimVector(t.dim(), 0));
}

at::Tensor stand_in(const c10::IValue& v) { return stand_in(v.toTensor()); }

// A meta tensor of |t|'s geometry and dtype: what PyTorch's C++ structured
// meta functions (the CPU kernels' shape and dtype checks, at::meta::*)
// take, with their messages. Undefined stays undefined.
at::Tensor meta_of(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::empty_strided(t.sizes(), t.strides(), at::TensorOptions().dtype(t.scalar_type()).device(c10::kMeta));
}

at::Tensor meta_of(const c10::IValue& v) { return v.isTensor() ? meta_of(v.toTensor()) : at::Tensor(); }

void check_1d(const at::Tensor& t, const char* arg, const char* op) {
  TORCH_CHECK(t.dim() == 1, op, ": Expected 1-D argument ", arg, ", but got ", t.dim(), "-D");
}

void check_dot(c10::ArrayRef<c10::IValue> v) {
  const at::Tensor &self = v[0].toTensor(), &other = v[1].toTensor();
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ", other.dim(),
              "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              self.scalar_type(), " and ", other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [", self.numel(),
              "] and src [", other.numel(), "] to have the same number of elements, but got ", self.numel(), " and ",
              other.numel(), " elements respectively");
}

// The CPU's bmm kernel, after the meta function: both batches of one dtype.
void check_batch_dtypes(const c10::IValue& batch1, const c10::IValue& batch2) {
  at::ScalarType a = batch1.toTensor().scalar_type(), b = batch2.toTensor().scalar_type();
  TORCH_CHECK(a == b, "expected scalar type ", a, " but found ", b);
}

// The matmul family's shape and dtype checks as the CPU kernels make them
// (PyTorch's Python meta functions word them their own way: a Linear of the
// wrong width said "a and b must have same reduction dim"): the structured
// kernels' C++ meta functions, then what the CPU kernels check after them;
// mv is the CPU's addmv into a result of vec's dtype, dot and vdot check as
// the CPU's dot_check.
using ArgCheck = void (*)(c10::ArrayRef<c10::IValue>);
const std::unordered_map<std::string, ArgCheck>& matmul_checks() {
  static const std::unordered_map<std::string, ArgCheck> table = {
      {"aten::mm", [](c10::ArrayRef<c10::IValue> v) { at::meta::mm(stand_in(v[0]), stand_in(v[1])); }},
      {"aten::bmm",
       [](c10::ArrayRef<c10::IValue> v) {
         at::meta::bmm(stand_in(v[0]), stand_in(v[1]));
         check_batch_dtypes(v[0], v[1]);
       }},
      {"aten::baddbmm",
       [](c10::ArrayRef<c10::IValue> v) {
         at::meta::baddbmm(stand_in(v[0]), stand_in(v[1]), stand_in(v[2]));
         check_batch_dtypes(v[1], v[2]);
       }},
      {"aten::addmm",
       [](c10::ArrayRef<c10::IValue> v) {
         at::Tensor self = stand_in(v[0]), mat1 = stand_in(v[1]), mat2 = stand_in(v[2]);
         at::meta::addmm(self, mat1, mat2);
         (void)self.expand({mat1.size(0), mat2.size(1)});
       }},
      {"aten::addmv",
       [](c10::ArrayRef<c10::IValue> v) { at::meta::addmv(stand_in(v[0]), stand_in(v[1]), stand_in(v[2])); }},
      {"aten::mv",
       [](c10::ArrayRef<c10::IValue> v) {
         at::Tensor self = stand_in(v[0]), vec = stand_in(v[1]);
         at::meta::addmv(at::empty({self.size(0)}, vec.options().device(c10::kMeta)), self, vec);
       }},
      {"aten::dot", [](c10::ArrayRef<c10::IValue> v) { check_dot(v); }},
      {"aten::vdot", [](c10::ArrayRef<c10::IValue> v) { check_dot(v); }},
  };
  return table;
}

// addr has no rule (an outer product and an add): PyTorch's composite
// after the CPU kernel's checks.
void check_addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2) {
  check_1d(vec1, "vec1", "addr");
  check_1d(vec2, "vec2", "addr");
  (void)stand_in(self).expand({vec1.size(0), vec2.size(0)});
}

}  // namespace

at::Tensor addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                const at::Scalar& alpha) {
  check_addr(self, vec1, vec2);
  return at::native::math_addr(self, vec1, vec2, beta, alpha);
}

at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                     const at::Scalar& alpha, at::Tensor& out) {
  check_addr(self, vec1, vec2);
  return at::native::math_addr_out(self, vec1, vec2, beta, alpha, out);
}

void check_matmul_family(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> ivs) {
  auto check = matmul_checks().find(handle.schema().name());
  if (check != matmul_checks().end()) check->second(ivs);
}

namespace {

// Per op, a check PyTorch 2.13's meta function (a Python reference) makes
// differently from the CPU kernel, or not at all.
void check_safe_cast(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                     c10::ArrayRef<c10::IValue> ivs) {
  // TensorIterator's cast of the promoted result to the written tensor
  // (an in-place op's self, out=) must be safe: an int tensor plus 2.5
  // raises, it does not truncate.
  const auto& args = handle.schema().arguments();
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i].alias_info() == nullptr || !args[i].alias_info()->isWrite() || !ivs[i].isTensor()) continue;
    at::ScalarType result = promoted_type(promotes, ivs), target = ivs[i].toTensor().scalar_type();
    TORCH_CHECK(c10::canCast(result, target), "result type ", result, " can't be cast to the desired output type ",
                target);
  }
}

// add and sub: TensorIterator's cast check, then the CPU's alpha_check on
// the result type (the refs raised ValueError, "alpha argument of type
// <class 'complex'> cannot be safely cast").
void check_add_sub(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                   c10::ArrayRef<c10::IValue> ivs) {
  check_safe_cast(handle, promotes, ivs);
  std::optional<int> at = handle.schema().argumentIndexWithName("alpha");
  if (!at || !ivs[*at].isScalar()) return;
  at::native::alpha_check(promoted_type(promotes, ivs), ivs[*at].toScalar());
}

// The clamp family's meta functions: no complex tensors, and clamp_min and
// clamp_max no complex bounds; clamp's bounds promote an integer tensor
// (to a complex type: refused) and are read as double (a complex bound with
// an imaginary part raises). The refs promoted to a complex result.
void check_clamp(const c10::OperatorHandle& handle, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  static const char* const kComplex = "clamp is not supported for complex types";
  const at::Tensor& self = ivs[0].toTensor();
  TORCH_CHECK_NOT_IMPLEMENTED(!self.is_complex(), kComplex);
  const std::string& name = handle.schema().name();
  const bool one_bound = name.rfind("aten::clamp_m", 0) == 0;  // clamp_min, clamp_max
  for (size_t i = 1; i < ivs.size(); i++) {
    if (ivs[i].isTensor() && ivs[i].toTensor().defined())
      TORCH_CHECK_NOT_IMPLEMENTED(!ivs[i].toTensor().is_complex(), kComplex);
    if (!ivs[i].isScalar() || !ivs[i].toScalar().isComplex()) continue;
    TORCH_CHECK_NOT_IMPLEMENTED(!one_bound && at::isFloatingType(self.scalar_type()), kComplex);
    (void)ivs[i].toScalar().toDouble();  // checked: "value cannot be converted to type double without overflow"
  }
}

void check_cat(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
               c10::ArrayRef<c10::IValue> ivs) {
  // The CPU's cat_meta: no 0-dim tensor; then each tensor against the first
  // that is not a legacy empty [0] (skipped): its rank, then its sizes off
  // the cat dim.
  c10::ArrayRef<c10::IValue> list = ivs[0].toListRef();
  const at::Tensor* ref = nullptr;
  for (size_t i = 0; i < list.size(); i++) {
    const at::Tensor& t = list[i].toTensor();
    TORCH_CHECK(t.dim() > 0, "zero-dimensional tensor (at position ", i, ") cannot be concatenated");
    if (ref == nullptr && !(t.dim() == 1 && t.size(0) == 0)) ref = &t;
  }
  if (ref == nullptr) return;
  int64_t dim = c10::maybe_wrap_dim(ivs[1].toInt(), ref->dim());
  for (size_t i = 0; i < list.size(); i++) {
    const at::Tensor& t = list[i].toTensor();
    if (t.dim() == 1 && t.size(0) == 0) continue;
    TORCH_CHECK(t.dim() == ref->dim(), "Tensors must have same number of dimensions: got ", ref->dim(), " and ",
                t.dim());
    for (int64_t d = 0; d < t.dim(); d++)
      TORCH_CHECK(d == dim || t.size(d) == ref->size(d), "Sizes of tensors must match except in dimension ", dim,
                  ". Expected size ", ref->size(d), " but got size ", t.size(d), " for tensor number ", i,
                  " in the list.");
  }
}

void check_masked_scatter(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                          c10::ArrayRef<c10::IValue> ivs) {
  at::ScalarType self = ivs[0].toTensor().scalar_type(), source = ivs[2].toTensor().scalar_type();
  TORCH_CHECK(ivs[1].toTensor().scalar_type() == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ", ivs[1].toTensor().scalar_type());
  TORCH_CHECK(self == source, "masked_scatter: expected self and source to have same dtypes but got", self, " and ",
              source);  // sic: the CPU kernel's message has no space
}

void check_mean(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                c10::ArrayRef<c10::IValue> ivs) {
  const auto& args = handle.schema().arguments();
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i].name() != "dtype") continue;
    bool given = !ivs[i].isNone();
    at::ScalarType t = given ? ivs[i].toScalarType() : ivs[0].toTensor().scalar_type();
    TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t), "mean(): could not infer output dtype. ",
                given ? "Optional" : "Input", " dtype must be either a floating point or complex dtype. Got: ", t);
  }
}

void check_amax_amin(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                     c10::ArrayRef<c10::IValue> ivs) {
  const std::string& name = handle.schema().name();
  const at::Tensor& self = ivs[0].toTensor();
  std::vector<int64_t> dims = ivs[1].toIntVector();
  const char* op = name == "aten::amax" ? "amax" : "amin";
  TORCH_CHECK(!dims.empty() || self.numel() != 0, op, "(): Expected reduction dim to be specified for ",
              "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  for (int64_t d : dims)
    TORCH_CHECK_INDEX(self.dim() == 0 || self.size(c10::maybe_wrap_dim(d, self.dim())) != 0, op,
                      "(): Expected reduction dim ", d, " to have non-zero size.");
}

void check_argmax_argmin(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                         c10::ArrayRef<c10::IValue> ivs) {
  const std::string& name = handle.schema().name();
  // The CPU's check_argmax_argmin_argmin, as IndexErrors.
  const at::Tensor& self = ivs[0].toTensor();
  const char* op = name == "aten::argmax" ? "argmax()" : "argmin()";
  if (ivs[1].isNone()) {
    TORCH_CHECK_INDEX(self.numel() != 0, op, ": Expected reduction dim to be specified for input.numel() == 0.");
  } else {
    int64_t d = c10::maybe_wrap_dim(ivs[1].toInt(), self.dim());  // a scalar's dim is -1 or 0
    TORCH_CHECK_INDEX(self.dim() == 0 || self.size(d) != 0, op, ": Expected reduction dim ", d,
                      " to have non-zero size.");
  }
}

void check_linalg_ldl_solve(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                            c10::ArrayRef<c10::IValue> ivs) {
  // The CPU's meta function (C++; the Python meta registration words it its own way).
  const at::Tensor &ld = ivs[0].toTensor(), &pivots = ivs[1].toTensor(), &b = ivs[2].toTensor();
  at::native::squareCheckInputs(ld, "torch.linalg.ldl_solve");
  at::native::checkFloatingOrComplex(ld, "torch.linalg.ldl_solve");
  at::native::linearSolveCheckInputs(b, ld, "torch.linalg.ldl_solve");
  TORCH_CHECK(b.dim() >= 2, "torch.linalg.ldl_solve: Expected B to have at least 2 dimensions, but it has ", b.dim(),
              " dimensions instead");
  TORCH_CHECK(ld.sizes().slice(0, ld.dim() - 1).equals(pivots.sizes()),
              "torch.linalg.ldl_solve: Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots with "
              "shape ",
              pivots.sizes(), " instead");
  TORCH_CHECK(at::isIntegralType(pivots.scalar_type(), /*includeBool=*/false),
              "torch.linalg.ldl_solve: Expected pivots to be integers. Got ", pivots.scalar_type());
}

void check_linalg_eig(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                      c10::ArrayRef<c10::IValue> ivs) {
  // The meta functions take half types (a complex32 result, which tpu
  // cannot hold); the CPU kernel refuses them after the shape check, and
  // integer types before it, where it looks for their complex type.
  const at::Tensor& a = ivs[0].toTensor();
  at::ScalarType t = a.scalar_type();
  TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t), "Unknown Complex ScalarType for ", t);
  bool square = a.dim() >= 2 && a.size(-1) == a.size(-2);
  check_admitted(!square || !(t == at::kHalf || t == at::kBFloat16), "linalg_eig_out_cpu", t);
}

// complex and polar: the CPU kernel's dtype checks, then TensorIterator's
// broadcast; the meta function cast a float64 imag to a float32 real's type.
void check_complex(const c10::OperatorHandle&, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  const at::ScalarType a = ivs[0].toTensor().scalar_type(), b = ivs[1].toTensor().scalar_type();
  auto floating = [](at::ScalarType t) { return t == at::kFloat || t == at::kDouble || t == at::kHalf; };
  TORCH_CHECK(floating(a) && floating(b), "Expected both inputs to be Half, Float or Double tensors but got ", a,
              " and ", b);
  TORCH_CHECK(a == b, "Expected object of scalar type ", a, " but got scalar type ", b, " for second argument");
  if (ivs.size() > 2 && ivs[2].isTensor()) {  // out=
    const at::ScalarType out = ivs[2].toTensor().scalar_type();
    TORCH_CHECK(out == c10::toComplexType(a), "Expected object of scalar type ", c10::toComplexType(a),
                " but got scalar type ", out, " for argument 'out'");
  }
  (void)at::infer_size_dimvector(ivs[0].toTensor().sizes(), ivs[1].toTensor().sizes());
}

// The index dtype checks of the CPU kernels (the Python meta functions
// let index_select's float index through, and add ", but got torch.float32"
// to gather's message); gather's, topk's, lerp's and atan2's from their C++
// structured meta functions, which the CPU kernels run first.
void check_index_select(const c10::OperatorHandle&, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  const at::Tensor &self = ivs[0].toTensor(), &index = ivs[2].toTensor();
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(!(self.dim() == 0 && index.numel() != 1), "index_select(): Index to scalar can have only 1 value, got ",
              index.numel(), " value(s)");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
}

void check_gather(const c10::OperatorHandle&, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  if (ivs[1].isInt()) (void)at::meta::gather(meta_of(ivs[0]), ivs[1].toInt(), meta_of(ivs[2]), ivs[3].toBool());
}

void check_topk(const c10::OperatorHandle&, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  (void)at::meta::topk(meta_of(ivs[0]), ivs[1].toInt(), ivs[2].toInt(), ivs[3].toBool(), ivs[4].toBool());
}

// The tensor an op writes: an in-place op's self, or its out=.
std::optional<size_t> written_arg(const c10::OperatorHandle& handle) {
  const auto& args = handle.schema().arguments();
  for (size_t i = 0; i < args.size(); i++)
    if (args[i].alias_info() != nullptr && args[i].alias_info()->isWrite()) return i;
  return std::nullopt;
}

void check_lerp(const c10::OperatorHandle& handle, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  at::Tensor self = meta_of(ivs[0]), end = meta_of(ivs[1]);
  if (ivs[2].isTensor())
    (void)at::meta::lerp(self, end, meta_of(ivs[2]));
  else
    (void)at::meta::lerp(self, end, ivs[2].toScalar());
}

void check_atan2(const c10::OperatorHandle& handle, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  std::optional<size_t> out = written_arg(handle);
  if (!out) return;  // the functional op takes every dtype
  at::Tensor self = meta_of(ivs[0]), other = meta_of(ivs[1]);
  at::Tensor written = *out == 0 ? self : meta_of(ivs[*out]);
  (void)at::meta::atan2_out(written, self, other);
}

// layer_norm's shape checks (the CPU kernel's _check_layer_norm_inputs).
void check_layer_norm(const c10::OperatorHandle&, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  (void)at::native::_check_layer_norm_inputs(meta_of(ivs[0]), ivs[1].toIntVector(), meta_of(ivs[2]),
                                             meta_of(ivs[3]));
}

void check_embedding(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                     c10::ArrayRef<c10::IValue> ivs) {
  TORCH_CHECK(ivs[0].toTensor().dim() == 2, "'weight' must be 2-D");
  const at::Tensor& indices = ivs[1].toTensor();
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but "
              "got ",
              legacy_type_name(indices), " instead (while checking arguments for embedding)");
}

// Bool floor and trunc division: the CPU's kernels do not take it.
void check_div_bool(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                    c10::ArrayRef<c10::IValue> ivs) {
  const std::string& name = handle.schema().name();
  std::string mode = "floor";
  if (name == "aten::div" || name == "aten::div_") {
    std::optional<int> at = handle.schema().argumentIndexWithName("rounding_mode");
    if (!at || !ivs[*at].isString()) return;
    mode = ivs[*at].toStringRef();
  }
  if (mode != "floor" && mode != "trunc") return;  // the rule raises div's own error
  const at::ScalarType t = promoted_type(promotes, ivs);
  check_admitted(t != at::kBool, mode == "floor" ? "div_floor_cpu" : "div_trunc_cpu", t);
}

// Checks the CPU kernels make before TensorIterator broadcasts the operands
// (check_before_meta's broadcast would speak first): where's condition
// dtype; masked_fill's mask dtype, after (the functional op) broadcasting
// the mask against self, in that order.
void check_where(const c10::OperatorHandle&, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  if (!ivs[0].isTensor()) return;
  const at::ScalarType t = ivs[0].toTensor().scalar_type();
  TORCH_CHECK(t == at::kBool, "where expected condition to be a boolean tensor, but got a tensor with dtype ", t);
}

void check_masked_fill(const c10::OperatorHandle& handle, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  const at::Tensor &self = ivs[0].toTensor(), &mask = ivs[1].toTensor();
  if (handle.schema().name() == "aten::masked_fill") (void)at::infer_size_dimvector(mask.sizes(), self.sizes());
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.dtype());
}

// The checks by op name (the overload's base name).
using ParityCheck = void (*)(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                             c10::ArrayRef<c10::IValue> ivs);
// The parameter checks of the CPU's (and CUDA's) random kernels, worded
// as theirs (the Python meta functions print -1.0 where they print -1).
double float_arg(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> ivs, const char* name) {
  const auto& args = handle.schema().arguments();
  for (size_t i = 0; i < args.size() && i < ivs.size(); i++)
    if (args[i].name() == name && ivs[i].isDouble()) return ivs[i].toDouble();
  return 1.0;  // absent: the default, which passes
}
void check_normal(const c10::OperatorHandle& h, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  if (h.schema().name() == "aten::normal_") {  // randn's too: the CPU kernel's dtypes
    const at::ScalarType t = ivs[0].toTensor().scalar_type();
    check_admitted(t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16 || at::isComplexType(t),
                   "normal_kernel_cpu", t);
  }
  const double std = float_arg(h, ivs, "std");
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
}
void check_log_normal(const c10::OperatorHandle& h, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  const double std = float_arg(h, ivs, "std");
  TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
}
void check_exponential(const c10::OperatorHandle& h, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  const double lambda = float_arg(h, ivs, "lambd");
  TORCH_CHECK(lambda > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambda);
}
void check_cauchy(const c10::OperatorHandle& h, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  const double sigma = float_arg(h, ivs, "sigma");
  TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
}
void check_geometric(const c10::OperatorHandle& h, const std::vector<bool>&, c10::ArrayRef<c10::IValue> ivs) {
  const double p = float_arg(h, ivs, "p");
  TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
}
// normal(mean, std) (decomposed): a tensor std is checked on its data, a
// sync, as the CPU's and CUDA's kernels check it (CHECK_NORMAL_TENSOR_STD).
void check_normal_overloads(const c10::OperatorHandle& h, const std::vector<bool>& promotes,
                            c10::ArrayRef<c10::IValue> ivs) {
  const auto& args = h.schema().arguments();
  for (size_t i = 0; i < args.size() && i < ivs.size(); i++) {
    if (args[i].name() != "std" || !ivs[i].isTensor()) continue;
    const at::Tensor& std = ivs[i].toTensor();
    TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
    TORCH_CHECK(std.numel() == 0 || std.min().ge(0).item<bool>(), "normal expects all elements of std >= 0.0");
  }
  check_normal(h, promotes, ivs);
}

// The random ops' parameter checks, before their meta functions or their
// decompositions run.
const std::unordered_map<std::string, ParityCheck>& random_checks() {
  static const std::unordered_map<std::string, ParityCheck> table = {
      {"aten::normal", check_normal_overloads},
      {"aten::normal_", check_normal},
      {"aten::normal_functional", check_normal},
      {"aten::log_normal_", check_log_normal},
      {"aten::log_normal", check_log_normal},
      {"aten::exponential_", check_exponential},
      {"aten::exponential", check_exponential},
      {"aten::cauchy_", check_cauchy},
      {"aten::cauchy", check_cauchy},
      {"aten::geometric_", check_geometric},
      {"aten::geometric", check_geometric},
  };
  return table;
}

const std::unordered_map<std::string, ParityCheck>& parity_checks() {
  static const std::unordered_map<std::string, ParityCheck> table = {
      {"aten::add", check_add_sub},
      {"aten::add_", check_add_sub},
      {"aten::sub", check_add_sub},
      {"aten::sub_", check_add_sub},
      {"aten::subtract", check_add_sub},
      {"aten::subtract_", check_add_sub},
      {"aten::mul", check_safe_cast},
      {"aten::mul_", check_safe_cast},
      {"aten::multiply", check_safe_cast},
      {"aten::multiply_", check_safe_cast},
      {"aten::addcmul", check_safe_cast},
      {"aten::addcmul_", check_safe_cast},
      {"aten::addcdiv", check_safe_cast},
      {"aten::addcdiv_", check_safe_cast},
      {"aten::rsub", check_add_sub},
      {"aten::clamp", check_clamp},
      {"aten::clamp_", check_clamp},
      {"aten::clip", check_clamp},
      {"aten::clip_", check_clamp},
      {"aten::clamp_min", check_clamp},
      {"aten::clamp_min_", check_clamp},
      {"aten::clamp_max", check_clamp},
      {"aten::clamp_max_", check_clamp},
      {"aten::cat", check_cat},
      {"aten::masked_scatter", check_masked_scatter},
      {"aten::masked_scatter_", check_masked_scatter},
      {"aten::mean", check_mean},
      {"aten::amax", check_amax_amin},
      {"aten::amin", check_amax_amin},
      {"aten::argmax", check_argmax_argmin},
      {"aten::argmin", check_argmax_argmin},
      {"aten::embedding", check_embedding},
      {"aten::index_select", check_index_select},
      {"aten::gather", check_gather},
      {"aten::topk", check_topk},
      {"aten::lerp", check_lerp},
      {"aten::lerp_", check_lerp},
      {"aten::atan2", check_atan2},
      {"aten::atan2_", check_atan2},
      {"aten::arctan2", check_atan2},
      {"aten::arctan2_", check_atan2},
      {"aten::native_layer_norm", check_layer_norm},
      {"aten::floor_divide", check_div_bool},
      {"aten::floor_divide_", check_div_bool},
      {"aten::div", check_div_bool},
      {"aten::div_", check_div_bool},
      {"aten::linalg_ldl_solve", check_linalg_ldl_solve},
      {"aten::linalg_eig", check_linalg_eig},
      {"aten::_linalg_eigvals", check_linalg_eig},
      {"aten::linalg_eigvals", check_linalg_eig},
      {"aten::complex", check_complex},
      {"aten::polar", check_complex},
  };
  return table;
}

const std::unordered_map<std::string, ParityCheck>& checks_before_broadcast() {
  static const std::unordered_map<std::string, ParityCheck> table = {
      {"aten::where", check_where},
      {"aten::masked_fill", check_masked_fill},
      {"aten::masked_fill_", check_masked_fill},
  };
  return table;
}

// The range check of a `dim` argument (an int, an optional int or an int
// list, against `self`'s rank) that PyTorch's kernels make first, with
// maybe_wrap_dim's IndexError ("Dimension out of range (expected to be in
// range of [-1, 0], but got 5)"). Some Python meta functions index a list
// with the dim before checking it (index_select's, index_fill's: "list
// assignment index out of range"), others never check it (softmax's,
// sort's), and the rule then fails inside XLA. unsqueeze's dim may be
// self's rank (a new last dim). The rules check their dims again
// (tpu_lower_wrap_dim), for compiled graphs and dims of other arguments.
void check_dims(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> ivs) {
  const auto& args = schema.arguments();
  if (args.empty() || args[0].name() != "self" || ivs.empty() || !ivs[0].isTensor() ||
      !ivs[0].toTensor().defined() || schema.name() == "aten::unsqueeze")
    return;
  const int64_t rank = ivs[0].toTensor().dim();
  for (size_t i = 1; i < args.size() && i < ivs.size(); i++) {
    if (args[i].name() != "dim") continue;
    if (ivs[i].isInt()) (void)c10::maybe_wrap_dim(ivs[i].toInt(), rank);
    if (ivs[i].isIntList())
      for (int64_t d : ivs[i].toIntVector()) (void)c10::maybe_wrap_dim(d, rank);
  }
}

}  // namespace

void check_before_decomposition(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> ivs) {
  check_dims(handle.schema(), ivs);
  auto check = random_checks().find(handle.schema().name());
  if (check != random_checks().end()) check->second(handle, {}, ivs);
}

// Checks PyTorch 2.13's meta functions (Python references) make differently
// from its CPU kernels, or not at all; made here with the kernels' exception
// and message before the meta function runs. |promotes| marks the arguments
// that take part in type promotion.
void check_before_meta(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                       c10::ArrayRef<c10::IValue> ivs) {
  check_before_decomposition(handle, ivs);
  check_matmul_family(handle, ivs);
  auto first = checks_before_broadcast().find(handle.schema().name());
  if (first != checks_before_broadcast().end()) first->second(handle, promotes, ivs);
  if (handle.hasTag(at::Tag::pointwise)) {
    // TensorIterator broadcasts the operands in order, with infer_size's
    // message ("The size of tensor a (3) must match the size of tensor b
    // (4) at non-singleton dimension 0"), and an in-place op's self must
    // have the broadcast shape; the refs word both their own way.
    std::optional<c10::DimVector> shape;
    for (size_t i = 0; i < ivs.size(); i++) {
      if (!promotes[i] || !ivs[i].isTensor() || !ivs[i].toTensor().defined()) continue;
      c10::IntArrayRef sizes = ivs[i].toTensor().sizes();
      shape = shape ? at::infer_size_dimvector(*shape, sizes) : c10::DimVector(sizes);
    }
    if (shape && written_arg(handle) == 0 && ivs[0].isTensor()) {
      c10::IntArrayRef self = ivs[0].toTensor().sizes();
      c10::DimVector full = at::infer_size_dimvector(*shape, self);
      TORCH_CHECK(self.equals(full), "output with shape ", self, " doesn't match the broadcast shape ",
                  c10::IntArrayRef(full));
    }
  }
  auto check = parity_checks().find(handle.schema().name());
  if (check != parity_checks().end()) check->second(handle, promotes, ivs);
}


// The CPU kernels of these ops refuse, before resizing it, an out= tensor
// that overlaps itself or an input (TensorIterator's kernels resize first
// and take out= self); masked_select's, in ops.cpp, too.
void check_out_overlap(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  static const std::unordered_set<std::string> checked = {"aten::cat", "aten::index_select", "aten::take",
                                                          "aten::kthvalue"};
  if (!checked.count(info.handle->schema().name())) return;
  for (size_t o = 0; o < ivs.size(); o++) {
    if (!info.mutated[o] || !ivs[o].isTensor()) continue;
    const at::Tensor& out = ivs[o].toTensor();
    at::assert_no_internal_overlap(out);
    for_each_read(info, ivs, [&](const at::Tensor& t) { at::assert_no_overlap(out, t); });
  }
}

// Structured kernels, and TensorIterator's kernels that want one dtype, take
// out= tensors only in the dtypes the functional op returns; the refs' meta
// functions cast safely, so they took a float64 out= of a float32 softmax.
// The functional overload's meta function gives the dtypes; the table, each
// kernel's message. Rules and decompositions (fallback.cpp) check.
void check_out_dtypes(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> ivs) {
  using Message = std::string (*)(const std::string& op, at::ScalarType want, at::ScalarType got);
  static const Message structured = [](const std::string&, at::ScalarType want, at::ScalarType got) {
    return c10::str("Expected out tensor to have dtype ", c10::scalarTypeToTypeMeta(want), ", but got ",
                    c10::scalarTypeToTypeMeta(got), " instead");
  };
  static const Message iterator = [](const std::string&, at::ScalarType want, at::ScalarType got) {
    return c10::str("Found dtype ", got, " but expected ", want);
  };
  static const Message bool_result = [](const std::string& op, at::ScalarType, at::ScalarType got) {
    return c10::str(op, " only supports bool tensor for result, got: ", got);
  };
  static const Message match_input = [](const std::string&, at::ScalarType want, at::ScalarType got) {
    return c10::str("Expected the dtype for input and out to match, but got ", want, " for input's dtype and ", got,
                    " for out's dtype.");
  };
  static const std::unordered_map<std::string, Message> exact = {
      {"aten::_softmax", structured}, {"aten::_log_softmax", structured}, {"aten::linalg_cross", structured},
      {"aten::linalg_lu_solve", structured}, {"aten::linalg_ldl_solve", structured}, {"aten::avg_pool3d", structured}, {"aten::index_copy", structured},
      {"aten::index_add", structured}, {"aten::renorm", structured}, {"aten::scatter_reduce", structured},
      {"aten::_linalg_eigh", structured}, {"aten::_linalg_solve_ex", structured}, {"aten::sort", structured},
      {"aten::isin", structured}, {"aten::neg", iterator}, {"aten::round", iterator}, {"aten::gelu", iterator},
      {"aten::softplus", iterator}, {"aten::softshrink", iterator}, {"aten::hardshrink", iterator},
      {"aten::conj_physical", iterator},
      {"aten::index_select", [](const std::string&, at::ScalarType, at::ScalarType) {
         return std::string("index_select(): self and result must have the same scalar type");
       }},
      {"aten::take", [](const std::string&, at::ScalarType want, at::ScalarType got) {
         return c10::str("take(): self and out expected to have the same dtype, but got self.dtype = ", want,
                         " and out.dtype = ", got);
       }},
      {"aten::all", bool_result}, {"aten::any", bool_result}, {"aten::amax", match_input}, {"aten::amin", match_input},
      {"aten::nan_to_num", [](const std::string&, at::ScalarType want, at::ScalarType got) {
         return c10::str("nan_to_num: dtype of out: ", got, " should be same as input: ", want);
       }},
      {"aten::logcumsumexp", [](const std::string&, at::ScalarType want, at::ScalarType got) {
         return c10::str("expected scalar_type ", want, " but found ", got);
       }}};
  const c10::FunctionSchema& schema = handle.schema();
  auto it = exact.find(schema.name());
  if (it == exact.end()) return;
  std::vector<c10::IValue> inputs;
  std::vector<std::string> names;
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < ivs.size(); i++) {
    const c10::AliasInfo* written = schema.arguments()[i].alias_info();
    if (written != nullptr && written->isWrite() && schema.arguments()[i].kwarg_only()) {
      outs.push_back(ivs[i].toTensor());
    } else {
      inputs.push_back(ivs[i]);
      names.push_back(schema.arguments()[i].name());
    }
  }
  // The functional overload takes the same arguments: its name is the out=
  // one's without "_out" ("decimals_out"), or "stable" ("values_stable"),
  // or one of the usual ("all.out" is "all.dim"'s).
  std::string overload = schema.overload_name();
  if (overload.size() >= 4 && overload.compare(overload.size() - 4, 4, "_out") == 0)
    overload.resize(overload.size() - 4);
  else if (overload.rfind("values_", 0) == 0)
    overload = overload.substr(7);
  std::optional<c10::OperatorHandle> functional;
  for (const std::string& candidate : {overload, std::string(), std::string("dim"), std::string("dims")}) {
    auto found = c10::Dispatcher::singleton().findSchema({schema.name(), candidate});
    if (!found.has_value() || found->schema().arguments().size() != names.size()) continue;
    bool same = true;
    for (size_t i = 0; i < names.size(); i++) same = same && found->schema().arguments()[i].name() == names[i];
    if (same) {
      functional = found;
      break;
    }
  }
  if (!functional.has_value()) return;
  MetaMap mm;
  std::vector<at::Tensor> want = run_meta(*functional, std::vector<bool>(inputs.size(), false), inputs, mm);
  for (size_t r = 0; r < outs.size() && r < want.size(); r++) {
    if (!want[r].defined() || outs[r].scalar_type() == want[r].scalar_type()) continue;
    TORCH_CHECK(false, it->second(schema.name().substr(6), want[r].scalar_type(), outs[r].scalar_type()));
  }
}

// The in-place ops whose CPU kernels write a self that overlaps itself (an
// expanded view) where TensorIterator refuses: the fills, which are
// idempotent (fill_ with a number or a tensor of another device, zero_,
// tril_/triu_, threshold_, conj_physical_ of a real tensor, a no-op), and the
// indexing writes, which deprecate it with a warning. Every element is
// written, so a memory location ends with the last write that changed it
// (or, for index_put_ with accumulate, all their sum: tpu_hlo_view_write).
// The CPU's addmv_ and baddbmm_ also skip the check, in BLAS, where the
// result depends on BLAS's order of work; tpu refuses them.

namespace {

constexpr const char* kMaskedFillWarning =
    "Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing this "
    "operation. This also applies to advanced indexing e.g. tensor[mask] = scalar";

void warn_masked_fill(c10::ArrayRef<c10::IValue>) { TORCH_WARN(kMaskedFillWarning); }

void warn_index_fill(c10::ArrayRef<c10::IValue>) {
  TORCH_WARN("Use of index_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing this "
             "operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
}

// index_put_ (self, indices, values, accumulate): PyTorch's kernel hands a
// put of one host value through one mask on self's device to masked_fill_,
// which warns again.
void warn_index_put(c10::ArrayRef<c10::IValue> ivs) {
  TORCH_WARN("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before performing this "
             "operation. This also applies to advanced indexing e.g. tensor[indices] = tensor");
  const at::Tensor& self = ivs[0].toTensor();
  const at::Tensor& value = ivs[2].toTensor();
  if (ivs[3].toBool() || value.numel() != 1 || !value.device().is_cpu()) return;
  int masks = 0;
  for (const c10::IValue& item : ivs[1].toListRef()) {
    if (!item.isTensor() || !item.toTensor().defined()) continue;
    const at::Tensor& index = item.toTensor();
    bool mask = index.scalar_type() == at::kBool || index.scalar_type() == at::kByte;
    if (!mask || index.device() != self.device()) return;
    masks++;
  }
  if (masks == 1) TORCH_WARN(kMaskedFillWarning);
}

bool value_on_another_device(c10::ArrayRef<c10::IValue> ivs) {
  return !ivs[1].isTensor() || ivs[1].toTensor().device() != ivs[0].toTensor().device();
}

bool real_self(c10::ArrayRef<c10::IValue> ivs) { return !ivs[0].toTensor().is_complex(); }

const OverlapRule kOverlapRules[] = {
    {"aten::fill_", value_on_another_device, nullptr},
    {"aten::zero_", nullptr, nullptr},
    {"aten::tril_", nullptr, nullptr},
    {"aten::triu_", nullptr, nullptr},
    {"aten::threshold_", nullptr, nullptr},
    {"aten::conj_physical_", real_self, nullptr},
    {"aten::masked_fill_", nullptr, warn_masked_fill},
    {"aten::index_fill_", nullptr, warn_index_fill},
    {"aten::index_put_", nullptr, warn_index_put},
    {"aten::_index_put_impl_", nullptr, warn_index_put},
};

}  // namespace

const OverlapRule* overlap_rule(const std::string& base_name) {
  for (const OverlapRule& r : kOverlapRules)
    if (base_name == r.name) return &r;
  return nullptr;
}

bool writes_overlapping_self(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  if (info.overlap == nullptr) return false;
  const at::Tensor& self = ivs[0].toTensor();
  return at::has_internal_overlap(self) == at::MemOverlap::Yes &&
         (info.overlap->allows == nullptr || info.overlap->allows(ivs));
}

void warn_overlapping_self(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  if (info.overlap != nullptr && info.overlap->warn != nullptr && writes_overlapping_self(info, ivs))
    info.overlap->warn(ivs);
}

}  // namespace torchtpu
