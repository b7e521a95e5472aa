// The eager dispatch path: one boxed kernel serves every overload that has a
// lowering rule. It describes the call to C (tensors as storage + view,
// constants), asks the eager layer for the cached program, and on a miss runs
// PyTorch's meta function for the output metadata. Registration walks the C
// rule registry: adding a rule in csrc/lower is all it takes to add an op.
#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/ThreadLocalPythonObjects.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/addmv_meta_dispatch.h>
#include <ATen/ops/addr_native.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <pthread.h>

#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "torch/dispatch.h"
#include "torch/generator.h"
#include "torch/tpu_torch.h"

namespace torchtpu {

namespace {

// Per-call scratch: everything the C call description points into.
struct CallScratch {
  c10::SmallVector<tpu_eager_arg, 8> args;
  c10::SmallVector<tpu_tensor_ref, 0> refs;  // list items (filled in place: see fill_tensor_ref)
  std::vector<tpu_dtype_t> item_dtypes;
  std::vector<int> item_ranks;
  std::vector<const int64_t*> item_sizes;
  std::vector<int64_t> ints;                 // int lists
  std::vector<double> floats;
  std::vector<uint8_t> bools;
  std::vector<tpu_dtype_t> scalar_dtypes;  // Scalar[] items
  // Per argument: where its list starts in the vector of its kind (a Scalar[]:
  // its types; |values|, its numbers in ints or floats).
  struct Span {
    size_t begin, values;
  };
  c10::SmallVector<Span, 8> spans;
};

tpu_hlo_precision_t matmul_precision() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST: return TPU_HLO_PRECISION_HIGHEST;
    case at::Float32MatmulPrecision::HIGH: return TPU_HLO_PRECISION_HIGH;
    default: return TPU_HLO_PRECISION_DEFAULT;
  }
}

[[noreturn]] void device_mismatch(const at::Tensor& t, c10::DeviceIndex device) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, tpu:",
              static_cast<int>(device), " and ", t.device(), "!");
}

// Describes tensor |t| for C into |r|. CPU tensors are allowed only as 0-dim
// scalars.
void describe(const at::Tensor& t, c10::DeviceIndex& device, tpu_tensor_ref& r) {
  if (!t.defined()) {
    r = tpu_tensor_ref{};
    r.view.dtype = TPU_INVALID;
    return;
  }
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    if (device < 0) device = t.device().index();
    else if (t.device().index() != device) device_mismatch(t, device);
    fill_tensor_ref(t, r);
    return;
  }
  if (t.device().is_cpu() && t.dim() == 0) {
    r = tpu_tensor_ref{};
    r.view.dtype = to_tpu(t.scalar_type());
    TORCH_CHECK(r.view.dtype != TPU_INVALID, "tpu does not support dtype ", t.scalar_type());
    r.host_scalar = t.const_data_ptr();
    r.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
    return;
  }
  device_mismatch(t, device < 0 ? 0 : device);
}

void describe_scalar(const c10::IValue& v, tpu_lower_arg& l, bool constant) {
  l.kind = TPU_ARG_SCALAR;
  l.is_const = constant;
  c10::Scalar s = v.toScalar();
  if (s.isBoolean()) {
    l.dtype = TPU_BOOL;
    l.i = s.toBool();
    l.f = l.i;
  } else if (s.isIntegral(false)) {
    l.dtype = TPU_S64;
    l.i = s.toLong();
    l.f = static_cast<double>(l.i);
  } else if (s.isComplex()) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "complex Python scalars are not supported on tpu yet");
  } else {
    l.dtype = TPU_F64;
    l.f = s.toDouble();
    l.i = static_cast<int64_t>(l.f);
  }
}

// Fills |call| from the boxed arguments. Pointers into |sc| are patched at
// the end, once its vectors stop growing.
void describe_call(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, CallScratch& sc, tpu_eager_call& call) {
  const auto& schema_args = info.arg_types;
  const bool const_scalars = info.op->rule->flags & TPU_RULE_CONST_SCALARS;
  c10::DeviceIndex device = -1;
  sc.args.resize(ivs.size());
  sc.spans.assign(ivs.size(), CallScratch::Span{0, 0});
  for (size_t i = 0; i < ivs.size(); i++) {
    const c10::IValue& v = ivs[i];
    tpu_eager_arg& a = sc.args[i];
    a = tpu_eager_arg{};
    a.mutated = info.mutated[i];
    tpu_lower_arg& l = a.lower;
    if (v.isNone()) {
      l.kind = TPU_ARG_NONE;
      continue;
    }
    switch (schema_args[i]) {
      case ArgType::kTensor: {
        const at::Tensor& t = v.toTensor();
        describe(t, device, a.tensor);
        l.kind = a.tensor.view.dtype == TPU_INVALID ? TPU_ARG_NONE : TPU_ARG_TENSOR;
        l.dtype = a.tensor.view.dtype;
        l.wrapped_number = a.tensor.wrapped_number;
        l.rank = a.tensor.view.rank;
        break;
      }
      case ArgType::kTensorList: {
        l.kind = TPU_ARG_TENSOR_LIST;
        const size_t begin = sc.refs.size();
        sc.spans[i].begin = begin;
        sc.refs.resize_for_overwrite(begin + v.toListRef().size());
        size_t k = begin;
        if (v.isTensorList()) {
          for (const at::Tensor& t : v.toTensorList()) describe(t, device, sc.refs[k++]);
        } else {
          for (const c10::IValue& item : v.toListRef())
            describe(item.isNone() ? at::Tensor() : item.toTensor(), device, sc.refs[k++]);
        }
        l.n = static_cast<int>(sc.refs.size() - sc.spans[i].begin);
        break;
      }
      case ArgType::kScalar:
        describe_scalar(v, l, const_scalars);
        break;
      case ArgType::kScalarList: {  // one runtime operand: float64 if any number is a float, else int64
        l.kind = TPU_ARG_SCALAR_LIST;
        sc.spans[i].begin = sc.scalar_dtypes.size();
        l.dtype = TPU_S64;
        for (const c10::IValue& item : v.toListRef()) {
          tpu_lower_arg one{};
          describe_scalar(item, one, false);
          sc.scalar_dtypes.push_back(one.dtype);
          if (one.dtype == TPU_F64) l.dtype = TPU_F64;
        }
        l.n = static_cast<int>(sc.scalar_dtypes.size() - sc.spans[i].begin);
        sc.spans[i].values = l.dtype == TPU_F64 ? sc.floats.size() : sc.ints.size();
        for (const c10::IValue& item : v.toListRef()) {
          c10::Scalar x = item.toScalar();
          if (l.dtype == TPU_F64) sc.floats.push_back(x.toDouble());
          else sc.ints.push_back(x.toLong());
        }
        break;
      }
      case ArgType::kInt:
        l.kind = TPU_ARG_INT;
        l.i = v.isSymInt() ? v.toSymInt().guard_int(__FILE__, __LINE__) : v.toInt();
        break;
      case ArgType::kIntList: {
        l.kind = TPU_ARG_INT_LIST;
        sc.spans[i].begin = sc.ints.size();
        for (const c10::IValue& item : v.toListRef())
          sc.ints.push_back(item.isSymInt() ? item.toSymInt().guard_int(__FILE__, __LINE__) : item.toInt());
        l.n = static_cast<int>(sc.ints.size() - sc.spans[i].begin);
        break;
      }
      case ArgType::kFloat:
        l.kind = TPU_ARG_FLOAT;
        l.f = v.toDouble();
        if (info.op->rule->flags & TPU_RULE_RUNTIME_FLOATS) {
          l.kind = TPU_ARG_SCALAR;
          l.dtype = TPU_F64;
        }
        break;
      case ArgType::kFloatList: {
        l.kind = TPU_ARG_FLOAT_LIST;
        sc.spans[i].begin = sc.floats.size();
        for (const c10::IValue& item : v.toListRef()) sc.floats.push_back(item.toDouble());
        l.n = static_cast<int>(sc.floats.size() - sc.spans[i].begin);
        break;
      }
      case ArgType::kBool:
        l.kind = TPU_ARG_BOOL;
        l.b = v.toBool();
        break;
      case ArgType::kBoolList: {
        l.kind = TPU_ARG_BOOL_LIST;
        sc.spans[i].begin = sc.bools.size();
        for (const c10::IValue& item : v.toListRef()) sc.bools.push_back(item.toBool());
        l.n = static_cast<int>(sc.bools.size() - sc.spans[i].begin);
        break;
      }
      case ArgType::kString:
        l.kind = TPU_ARG_STRING;
        l.s = v.toStringRef().c_str();
        break;
      case ArgType::kDtype:
        l.kind = TPU_ARG_DTYPE;
        l.dtype = to_tpu(static_cast<c10::ScalarType>(v.toInt()));
        break;
      case ArgType::kEnum:  // layout, memory format, device: constants
        l.kind = TPU_ARG_INT;
        l.i = v.isDevice() ? v.toDevice().index() : v.isInt() ? v.toInt() : 0;
        // A factory's device says where it runs.
        if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1 && v.toDevice().has_index() &&
            device < 0)
          device = v.toDevice().index();
        break;
      case ArgType::kOther:
        l.kind = TPU_ARG_OTHER;
        break;
    }
  }
  // Patch pointers now that the scratch vectors are final.
  sc.item_dtypes.resize(sc.refs.size());
  sc.item_ranks.resize(sc.refs.size());
  sc.item_sizes.resize(sc.refs.size());
  for (size_t r = 0; r < sc.refs.size(); r++) {
    sc.item_dtypes[r] = sc.refs[r].view.dtype;
    sc.item_ranks[r] = sc.refs[r].view.rank;
    sc.item_sizes[r] = sc.refs[r].view.sizes;
  }
  for (size_t i = 0; i < ivs.size(); i++) {
    tpu_eager_arg& a = sc.args[i];
    tpu_lower_arg& l = a.lower;
    switch (l.kind) {
      case TPU_ARG_TENSOR:
        l.sizes = a.tensor.view.sizes;
        l.strides = a.tensor.view.strides;
        break;
      case TPU_ARG_TENSOR_LIST:
        a.items = sc.refs.data() + sc.spans[i].begin;
        l.item_dtypes = sc.item_dtypes.data() + sc.spans[i].begin;
        l.item_ranks = sc.item_ranks.data() + sc.spans[i].begin;
        l.item_sizes = sc.item_sizes.data() + sc.spans[i].begin;
        break;
      case TPU_ARG_SCALAR_LIST:
        l.item_dtypes = sc.scalar_dtypes.data() + sc.spans[i].begin;
        if (l.dtype == TPU_F64) l.floats = sc.floats.data() + sc.spans[i].values;
        else l.ints = sc.ints.data() + sc.spans[i].values;
        break;
      case TPU_ARG_INT_LIST: l.ints = sc.ints.data() + sc.spans[i].begin; break;
      case TPU_ARG_FLOAT_LIST: l.floats = sc.floats.data() + sc.spans[i].begin; break;
      case TPU_ARG_BOOL_LIST: l.bools = reinterpret_cast<const bool*>(sc.bools.data() + sc.spans[i].begin); break;
      default: break;
    }
  }
  call.op = info.op;
  call.num_args = static_cast<int>(ivs.size());
  call.args = sc.args.data();
  call.common_dtype = TPU_INVALID;
  call.precision = matmul_precision();
  call.device = device < 0 ? current_device() : device;
}

// PyTorch's promoted dtype of the inputs (TensorIterator's rules) that
// |promotes| marks; Undefined when there are none.
at::ScalarType promoted_type(const std::vector<bool>& promotes, c10::ArrayRef<c10::IValue> ivs) {
  at::native::ResultTypeState state;
  bool any = false;
  for (size_t i = 0; i < ivs.size(); i++) {
    if (!promotes[i] || ivs[i].isNone()) continue;
    const c10::IValue& v = ivs[i];
    if (v.isTensor() && v.toTensor().defined()) {
      state = at::native::update_result_type_state(v.toTensor(), state);
      any = true;
    } else if (v.isScalar()) {
      state = at::native::update_result_type_state(v.toScalar(), state);
      any = true;
    }
  }
  return any ? at::native::result_type(state) : at::ScalarType::Undefined;
}

tpu_dtype_t common_dtype(const std::vector<bool>& promotes, c10::ArrayRef<c10::IValue> ivs) {
  at::ScalarType t = promoted_type(promotes, ivs);
  return t == at::ScalarType::Undefined ? TPU_INVALID : to_tpu(t);
}

// A meta tensor with |t|'s geometry, sharing one meta storage per tpu
// storage so that aliasing checks in meta functions see what they would see
// on the real tensors.
struct MetaMap {
  std::unordered_map<const void*, at::Tensor> bases;
  // 0-dim CPU tensors become meta ones too: masked_fill's reference takes a
  // CPU value for a tensor of the accelerators it names, tpu among them,
  // but not for a meta one.
  bool cpu_scalars_to_meta = false;
  at::Tensor convert(const at::Tensor& t) {
    if (cpu_scalars_to_meta && t.defined() && t.device().is_cpu() && t.dim() == 0)
      return at::empty({}, t.options().device(at::kMeta));
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
    const void* key = t.storage().unsafeGetStorageImpl();
    auto it = bases.find(key);
    if (it == bases.end()) {
      int64_t nbytes = static_cast<int64_t>(t.storage().nbytes());
      at::Tensor base = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte).device(at::kMeta));
      it = bases.emplace(key, base).first;
    }
    return at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta))
        .set_(it->second.storage(), t.storage_offset(), t.sizes(), t.strides());
  }
  c10::IValue convert(const c10::IValue& v) {
    if (v.isTensor()) return convert(v.toTensor());
    // A factory's device argument decides its dispatch: meta, not tpu again.
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) return c10::Device(c10::kMeta);
    // No meta function draws numbers, and some (the Python references of
    // exponential_, log_normal_, cauchy_, geometric_) refuse any generator.
    if (v.isGenerator()) return c10::IValue();
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(convert(t));
      return out;
    }
    if (v.isList() && v.toListRef().size() > 0 && (v.toListRef()[0].isTensor() || v.toListRef()[0].isNone())) {
      bool tensors = false;
      for (const c10::IValue& item : v.toListRef()) tensors |= item.isTensor();
      if (tensors) {
        c10::List<std::optional<at::Tensor>> out;
        for (const c10::IValue& item : v.toListRef())
          out.push_back(item.isNone() ? std::optional<at::Tensor>() : std::optional<at::Tensor>(convert(item.toTensor())));
        return out;
      }
    }
    return v;
  }
};

void fill_meta(const at::Tensor& t, tpu_eager_out_meta& m) {
  if (!t.defined()) {
    m.dtype = TPU_INVALID;
    m.rank = 0;
    return;
  }
  m.dtype = to_tpu(t.scalar_type());
  TORCH_CHECK(m.dtype != TPU_INVALID, "tpu does not support dtype ", t.scalar_type());
  check_rank(t.dim());
  m.rank = static_cast<int>(t.dim());
  bool dense = t.is_non_overlapping_and_dense();
  auto contiguous = c10::contiguous_strides(t.sizes());
  for (int i = 0; i < m.rank; i++) {
    m.sizes[i] = t.size(i);
    m.strides[i] = dense ? t.stride(i) : contiguous[i];
  }
}

// A CPU tensor with |t|'s sizes and dtype over one element (zero strides):
// what the CPU kernels' shape checks read, with their messages.
at::Tensor stand_in(const at::Tensor& t) {
  return at::empty({1}, at::TensorOptions().dtype(t.scalar_type())).as_strided(t.sizes(), c10::DimVector(t.dim(), 0));
}

at::Tensor stand_in(const c10::IValue& v) { return stand_in(v.toTensor()); }

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

}  // namespace

void check_matmul_family(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> ivs) {
  auto check = matmul_checks().find(handle.schema().name());
  if (check != matmul_checks().end()) check->second(ivs);
}

namespace {

// Checks PyTorch 2.13's meta functions (Python references) make differently
// from its CPU kernels, or not at all; made here with the kernels' exception
// and message before the meta function runs. |promotes| marks the arguments
// that take part in type promotion.
void check_before_meta(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                       c10::ArrayRef<c10::IValue> ivs) {
  const std::string& name = handle.schema().name();
  check_matmul_family(handle, ivs);
  if (handle.hasTag(at::Tag::pointwise)) {
    // TensorIterator broadcasts the operands in order, with infer_size's
    // message ("The size of tensor a (3) must match the size of tensor b
    // (4) at non-singleton dimension 0"); the refs word it their own way.
    std::optional<c10::DimVector> shape;
    for (size_t i = 0; i < ivs.size(); i++) {
      if (!promotes[i] || !ivs[i].isTensor() || !ivs[i].toTensor().defined()) continue;
      c10::IntArrayRef sizes = ivs[i].toTensor().sizes();
      shape = shape ? at::infer_size_dimvector(*shape, sizes) : c10::DimVector(sizes);
    }
  }
  static const std::unordered_set<std::string> safe_cast = {
      "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::subtract", "aten::subtract_", "aten::mul",
      "aten::mul_", "aten::multiply", "aten::multiply_", "aten::addcmul", "aten::addcmul_", "aten::addcdiv",
      "aten::addcdiv_"};
  if (safe_cast.count(name)) {
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
  } else if (name == "aten::cat") {
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
  } else if (name == "aten::masked_scatter" || name == "aten::masked_scatter_") {
    at::ScalarType self = ivs[0].toTensor().scalar_type(), source = ivs[2].toTensor().scalar_type();
    TORCH_CHECK(ivs[1].toTensor().scalar_type() == at::kBool,
                "masked_scatter_ only supports boolean masks, but got mask with dtype ", ivs[1].toTensor().scalar_type());
    TORCH_CHECK(self == source, "masked_scatter: expected self and source to have same dtypes but got", self, " and ",
                source);  // sic: the CPU kernel's message has no space
  } else if (name == "aten::mean") {
    const auto& args = handle.schema().arguments();
    for (size_t i = 0; i < args.size(); i++) {
      if (args[i].name() != "dtype") continue;
      bool given = !ivs[i].isNone();
      at::ScalarType t = given ? ivs[i].toScalarType() : ivs[0].toTensor().scalar_type();
      TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t), "mean(): could not infer output dtype. ",
                  given ? "Optional" : "Input", " dtype must be either a floating point or complex dtype. Got: ", t);
    }
  } else if (name == "aten::amax" || name == "aten::amin") {
    const at::Tensor& self = ivs[0].toTensor();
    std::vector<int64_t> dims = ivs[1].toIntVector();
    const char* op = name == "aten::amax" ? "amax" : "amin";
    TORCH_CHECK(!dims.empty() || self.numel() != 0, op, "(): Expected reduction dim to be specified for ",
                "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
    for (int64_t d : dims)
      TORCH_CHECK_INDEX(self.dim() == 0 || self.size(c10::maybe_wrap_dim(d, self.dim())) != 0, op,
                        "(): Expected reduction dim ", d, " to have non-zero size.");
  } else if (name == "aten::argmax" || name == "aten::argmin") {
    // The CPU's check_argmax_argmin, as IndexErrors.
    const at::Tensor& self = ivs[0].toTensor();
    const char* op = name == "aten::argmax" ? "argmax()" : "argmin()";
    if (ivs[1].isNone()) {
      TORCH_CHECK_INDEX(self.numel() != 0, op, ": Expected reduction dim to be specified for input.numel() == 0.");
    } else {
      int64_t d = c10::maybe_wrap_dim(ivs[1].toInt(), self.dim());  // a scalar's dim is -1 or 0
      TORCH_CHECK_INDEX(self.dim() == 0 || self.size(d) != 0, op, ": Expected reduction dim ", d,
                        " to have non-zero size.");
    }
  } else if (name == "aten::embedding") {
    TORCH_CHECK(ivs[0].toTensor().dim() == 2, "'weight' must be 2-D");
  } else if (name == "aten::linalg_ldl_solve") {
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
  } else if (name == "aten::linalg_eig" || name == "aten::_linalg_eigvals" || name == "aten::linalg_eigvals") {
    // The meta functions take half types (a complex32 result, which tpu
    // cannot hold); the CPU kernel refuses them after the shape check, and
    // integer types before it, where it looks for their complex type.
    const at::Tensor& a = ivs[0].toTensor();
    at::ScalarType t = a.scalar_type();
    TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t), "Unknown Complex ScalarType for ", t);
    bool square = a.dim() >= 2 && a.size(-1) == a.size(-2);
    TORCH_CHECK_NOT_IMPLEMENTED(!square || !(t == at::kHalf || t == at::kBFloat16 || t == at::kComplexHalf),
                                "\"linalg_eig_out_cpu\" not implemented for '", c10::toString(t), "'");
  }
}

// Runs |handle|'s meta function: output metadata of new returns, and the
// shapes out= arguments must be resized to.
std::vector<at::Tensor> run_meta(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                                 c10::ArrayRef<c10::IValue> ivs, MetaMap& mm) {
  check_before_meta(handle, promotes, ivs);
  mm.cpu_scalars_to_meta = handle.schema().name() == "aten::masked_fill" ||
                           handle.schema().name() == "aten::masked_fill_";
  torch::jit::Stack stack;
  stack.reserve(ivs.size());
  for (const c10::IValue& v : ivs) stack.push_back(mm.convert(v));
  handle.callBoxed(stack);
  std::vector<at::Tensor> outs;
  for (const c10::IValue& v : stack) outs.push_back(v.isTensor() ? v.toTensor() : at::Tensor());
  return outs;
}

std::vector<at::Tensor> run_meta(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  MetaMap mm;
  return run_meta(*info.handle, info.promotes, ivs, mm);
}

// The arguments of a _foreach_ op's per-tensor op for item |k|.
torch::jit::Stack item_stack(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, int k) {
  torch::jit::Stack stack;
  for (size_t j = 0; j < info.item_source.size(); j++) {
    int src = info.item_source[j];
    if (src < 0) stack.push_back(*info.item_handle->schema().arguments()[j].default_value());
    else if (ivs[src].isList()) stack.push_back(ivs[src].toListRef()[k]);
    else stack.push_back(ivs[src]);
  }
  return stack;
}

// PyTorch's checks of a _foreach_ op's lists (check_foreach_api_restrictions).
void check_foreach_lists(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  int64_t n = -1;
  for (size_t i = 0; i < ivs.size(); i++) {
    if (info.arg_types[i] != ArgType::kTensorList && info.arg_types[i] != ArgType::kScalarList) continue;
    int64_t len = static_cast<int64_t>(ivs[i].toListRef().size());
    if (info.arg_types[i] == ArgType::kScalarList) {
      TORCH_CHECK(len == n, "Tensor list must have same number of elements as scalar list.");
    } else if (n < 0) {
      TORCH_CHECK(len > 0, "Tensor list must have at least one tensor.");
      n = len;
    } else {
      TORCH_CHECK(len == n, "Tensor lists must have the same number of tensors, got ", n, " and ", len);
    }
  }
}

// A _foreach_ call whose program would not see its own earlier writes runs
// its items in turn through the per-tensor op, as PyTorch's CPU kernels do.
std::vector<at::Tensor> run_items_in_turn(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, int items) {
  TORCH_CHECK(info.item_handle.has_value(), info.op->name,
              ": tpu cannot run this call: a tensor it writes shares memory with a tensor of another list item");
  std::vector<at::Tensor> outs;
  for (int k = 0; k < items; k++) {
    torch::jit::Stack stack = item_stack(info, ivs, k);
    info.item_handle->callBoxed(stack);
    if (info.op->output_alias[0] < 0) outs.push_back(stack[0].toTensor());
  }
  return outs;
}

// TPU_RULE_CHECKED_SCALARS: every Python number converts to the first
// tensor's dtype with c10's overflow check, as the CPU kernels convert it.
void check_scalars_fit(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  at::ScalarType dtype = at::ScalarType::Undefined;
  for (const c10::IValue& v : ivs)
    if (v.isTensor() && v.toTensor().defined()) {
      dtype = v.toTensor().scalar_type();
      break;
    }
  if (!(c10::isIntegralType(dtype, true) || c10::isFloatingType(dtype) || c10::isComplexType(dtype)) ||
      c10::isFloat8Type(dtype))
    return;
  for (size_t i = 0; i < ivs.size(); i++) {
    if (info.arg_types[i] != ArgType::kScalar || !ivs[i].isScalar()) continue;
    c10::Scalar value = ivs[i].toScalar();
    AT_DISPATCH_V2(dtype, "fill_", AT_WRAP([&] { (void)value.to<scalar_t>(); }), AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX),
                   at::kHalf, at::kBFloat16, at::kBool, AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  }
}

}  // namespace

// Calls |fn| on each tensor the op only reads (tensor arguments, and the
// items of tensor lists).
template <typename Fn>
void for_each_read(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, Fn fn) {
  for (size_t i = 0; i < ivs.size(); i++) {
    if (info.mutated[i]) continue;
    if (ivs[i].isTensor() && ivs[i].toTensor().defined()) fn(ivs[i].toTensor());
    if (ivs[i].isTensorList())
      for (const at::Tensor& t : ivs[i].toTensorList()) fn(t);
  }
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
struct OverlapRule {
  const char* name;
  bool (*allows)(c10::ArrayRef<c10::IValue> ivs);  // nullptr: always
  void (*warn)(c10::ArrayRef<c10::IValue> ivs);    // the CPU kernel's warnings, or nullptr
};

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

const OverlapRule* overlap_rule(const std::string& base_name) {
  for (const OverlapRule& r : kOverlapRules)
    if (base_name == r.name) return &r;
  return nullptr;
}

}  // namespace

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

// A pointwise op's out= that was resized takes the layout TensorIterator
// gives it on the CPU, the inputs' (a transposed input, a transposed out):
// the same iterator, built over meta tensors of the inputs' geometry, says.
void restride_as_iterator(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, at::Tensor& out) {
  at::Tensor m = at::empty({0}, out.options().device(c10::kMeta));
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).add_output(m);
  for (size_t i = 0; i < ivs.size(); i++) {
    bool written = false;  // out= tensors (frexp has two) are no inputs
    for (int r = 0; r < info.op->num_returns; r++) written |= info.op->output_alias[r] == static_cast<int>(i);
    if (written || !ivs[i].isTensor() || !ivs[i].toTensor().defined()) continue;
    const at::Tensor& t = ivs[i].toTensor();
    config.add_owned_const_input(at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)));
  }
  at::TensorIterator iter = config.build();
  if (m.sizes() == out.sizes() && m.strides() != out.strides()) out.as_strided_(m.sizes(), m.strides());
}

// TensorIterator's check that no written tensor partly overlaps an input
// (the same tensor, or one of the same elements and layout, is fine).
void check_partial_overlap(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  for (size_t o = 0; o < ivs.size(); o++) {
    if (!info.mutated[o] || !ivs[o].isTensor() || !ivs[o].toTensor().defined()) continue;
    const at::Tensor& out = ivs[o].toTensor();
    for_each_read(info, ivs, [&](const at::Tensor& t) {
      if (t.device() == out.device()) at::assert_no_partial_overlap(out, t);
    });
  }
}

// Autograd's worker threads ("pt_autograd_<device>") run a backward in the
// eager mode of the thread that started it: torchtpu.eager_mode stashes its
// mode in PyTorch's thread-local Python objects, which the engine carries to
// its workers with the rest of the caller's thread-local state. Other threads
// keep their own mode.
void follow_backward_caller_mode() {
  thread_local int worker = -1;
  if (worker < 0) {
    char name[16] = "";
    worker = pthread_getname_np(pthread_self(), name, sizeof name) == 0 && std::strncmp(name, "pt_autograd_", 12) == 0;
  }
  if (!worker) return;
  static const std::string keys[] = {"torchtpu.eager_mode.strict", "torchtpu.eager_mode.fused",
                                     "torchtpu.eager_mode.blocking"};
  int mode = -1;
  for (int m = 0; m < 3 && mode < 0; m++)
    if (at::impl::ThreadLocalPythonObjects::contains(keys[m])) mode = m;
  tpu_eager_set_thread_mode(mode);
}

std::vector<at::Tensor> run_rule(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  const tpu_eager_op* op = info.op;
  follow_backward_caller_mode();
  if (info.pointwise) check_partial_overlap(info, ivs);
  if (op->rule->flags & TPU_RULE_CHECKED_SCALARS) check_scalars_fit(info, ivs);
  if (info.out_variant) {
    check_out_overlap(info, ivs);
    check_out_dtypes(*info.handle, ivs);
    // out= tensors take the shape the meta function gives them (with
    // PyTorch's resize warning) before the call is described; an out= that
    // is also an input is not resized, as TensorIterator refuses (an
    // in-place op written as its out= form, ldexp_, must keep self's shape).
    std::vector<at::Tensor> metas = run_meta(info, ivs);
    for (int r = 0; r < op->num_returns; r++) {
      int a = op->output_alias[r];
      if (a < 0 || !metas[r].defined()) continue;
      at::Tensor out = ivs[a].toTensor();
      if (out.sizes() == metas[r].sizes()) continue;
      for_each_read(info, ivs, [&](const at::Tensor& t) {
        TORCH_CHECK(!t.is_same(out), "output with shape ", out.sizes(), " doesn't match the broadcast shape ",
                    metas[r].sizes());
      });
      if (at::native::resize_output(out, metas[r].sizes()) && info.handle->hasTag(at::Tag::pointwise))
        restride_as_iterator(info, ivs, out);
    }
  }
  CallScratch sc;
  tpu_eager_call call{};
  describe_call(info, ivs, sc, call);
  TPU_CHECK(tpu_eager_prepare(&call));
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, call.device));
  std::unique_lock<std::mutex> rng_lock;
  if (op->rule->flags & TPU_RULE_RNG) {
    at::Generator gen;
    for (size_t i = 0; i < ivs.size(); i++)
      if (ivs[i].isGenerator()) gen = ivs[i].toGenerator();
    if (!gen.defined()) gen = default_generator(call.device);
    TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1, "expected a tpu generator, got one for ",
                gen.device());
    std::lock_guard<std::mutex> lock(gen.mutex());
    auto seed_offset = gen.get<TpuGenerator>()->next(1);
    call.rng_seed = seed_offset.first;
    call.rng_offset = seed_offset.second;
  }
  const int items = info.per_item ? tpu_eager_call_items(&call) : 1;
  const int num_outputs = items * op->num_outputs;
  tpu_eager_entry* entry = tpu_eager_lookup(&call);
  // Held until the launch: another thread may empty the cache meanwhile.
  std::unique_ptr<tpu_eager_entry, void (*)(tpu_eager_entry*)> held(entry, tpu_eager_entry_release);
  if (entry == nullptr) {
    // A miss validates the call as PyTorch would (shapes, dtypes, written
    // arguments that overlap themselves) and learns the outputs' metadata.
    // Everything checked here is part of the key, so hits are valid calls.
    const bool self_may_overlap = writes_overlapping_self(info, ivs);
    for (size_t i = 0; i < ivs.size(); i++) {
      if (!info.mutated[i] || ivs[i].isNone() || (i == 0 && self_may_overlap)) continue;
      if (ivs[i].isTensor() && ivs[i].toTensor().defined()) at::assert_no_internal_overlap(ivs[i].toTensor());
      if (ivs[i].isTensorList())
        for (const at::Tensor& t : ivs[i].toTensorList()) at::assert_no_internal_overlap(t);
    }
    if (info.per_item && tpu_eager_items_overlap(&call)) return run_items_in_turn(info, ivs, items);
    std::vector<tpu_eager_out_meta> meta(num_outputs);
    std::vector<tpu_dtype_t> item_common;
    if (info.item_handle.has_value()) {  // a _foreach_ op: the per-tensor op's meta, item by item
      MetaMap mm;
      for (int k = 0; k < items; k++) {
        torch::jit::Stack stack = item_stack(info, ivs, k);
        std::vector<at::Tensor> metas = run_meta(*info.item_handle, info.item_promotes, stack, mm);
        for (int r = 0; r < op->num_outputs; r++)
          if (op->output_alias[r] < 0) fill_meta(metas[r], meta[k * op->num_outputs + r]);
        item_common.push_back(common_dtype(info.item_promotes, stack));
      }
      call.item_common_dtypes = item_common.data();
    } else if (info.handle.has_value() && !info.per_item) {
      std::vector<at::Tensor> metas = run_meta(info, ivs);
      for (int r = 0; r < op->num_outputs; r++)
        if (op->output_alias[r] < 0) fill_meta(r < static_cast<int>(metas.size()) ? metas[r] : at::Tensor(), meta[r]);
    }
    call.common_dtype = common_dtype(info.promotes, ivs);
    tpu_status_t st = tpu_eager_compile(&call, meta.data(), &entry);
    if (st != nullptr) throw_status(st);
    held.reset(entry);
  }
  std::vector<at::Tensor> outs(num_outputs);
  c10::SmallVector<tpu_storage*, TPU_EAGER_MAX_RETURNS> new_storages(num_outputs, nullptr);
  for (int o = 0; o < num_outputs; o++) {
    if (op->output_alias[o % op->num_outputs] >= 0) continue;
    const tpu_eager_out_meta* m = tpu_eager_entry_meta(entry, o);
    if (m->dtype == TPU_INVALID) continue;
    outs[o] = at::detail::empty_strided_generic(at::IntArrayRef(m->sizes, m->rank), at::IntArrayRef(m->strides, m->rank),
                                                allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                to_torch(m->dtype));
    new_storages[o] = storage_of(outs[o]);
  }
  TPU_CHECK(tpu_eager_run(entry, &call, new_storages.data()));
  return outs;
}

namespace {

// Index lists: CPU index tensors move to the device (PyTorch accepts them on
// accelerators), and, where the output size depends on them, a boolean mask
// becomes the long indices of its true elements (one sync), as PyTorch's CPU
// kernel does, after the same shape check.
void prepare_indices(c10::IValue& list_iv, const at::Tensor& self, bool expand_masks) {
  c10::List<std::optional<at::Tensor>> out;
  int64_t dim = 0;
  for (const c10::IValue& item : list_iv.toListRef()) {
    if (!item.isTensor() || !item.toTensor().defined()) {
      out.push_back(std::nullopt);
      dim++;
      continue;
    }
    at::Tensor t = item.toTensor();
    if (t.device() != self.device()) t = t.to(self.device());
    bool mask = t.scalar_type() == at::kBool || t.scalar_type() == at::kByte;
    if (!mask || !expand_masks) {
      out.push_back(t);
      dim += mask ? t.dim() : 1;
      continue;
    }
    for (int64_t j = 0; j < t.dim(); j++)
      TORCH_CHECK_INDEX(dim + j < self.dim() && t.size(j) == self.size(dim + j), "The shape of the mask ",
                        t.sizes(), " at index ", j, " does not match the shape of the indexed tensor ", self.sizes(),
                        " at index ", dim + j);
    at::Tensor nz = at::nonzero(t);
    for (int64_t j = 0; j < t.dim(); j++) out.push_back(nz.select(1, j));
    dim += t.dim();
  }
  list_iv = out;
}

struct RuleKernel final : public c10::OperatorKernel {
  explicit RuleKernel(OpInfo info) : info_(std::move(info)) {}

  void operator()(const c10::OperatorHandle& handle, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t n = info_.arg_types.size();
    warn_overlapping_self(info_, torch::jit::last(*stack, n));
    if (info_.index_list >= 0) {
      c10::IValue& list = (*stack)[stack->size() - n + info_.index_list];
      prepare_indices(list, (*stack)[stack->size() - n].toTensor(), info_.expand_masks);
    }
    auto ivs = torch::jit::last(*stack, n);
    const bool foreach = info_.item_handle.has_value();
    if (foreach) {
      check_foreach_lists(info_, ivs);
      bump_written_lists(ivs, /*inference_only=*/true);  // refuses as PyTorch does, before any write
    }
    std::vector<at::Tensor> outs = run_rule(info_, ivs);
    if (foreach) bump_written_lists(ivs, false);
    c10::SmallVector<c10::IValue, 4> results;
    if (info_.per_item && info_.op->num_returns > 0) {  // one list: an item's output per item
      results.push_back(c10::List<at::Tensor>(outs));
    } else {
      for (int r = 0; r < info_.op->num_returns; r++) {
        int a = info_.op->output_alias[r];
        results.push_back(a >= 0 ? ivs[a] : c10::IValue(outs[r]));
      }
    }
    torch::jit::drop(*stack, n);
    for (auto& v : results) stack->push_back(std::move(v));
  }

  // A _foreach_ op's written tensors count a new version, as PyTorch's own
  // kernels make them (the per-tensor ops of the CPU's, increment_version in
  // CUDA's): no ADInplaceOrView kernel does it for list ops, and autograd
  // checks versions before using a saved tensor. Outside inference mode; an
  // inference tensor there raises PyTorch's error (|inference_only|: just
  // that check). Fused optimizer steps count none, on the CPU either.
  void bump_written_lists(c10::ArrayRef<c10::IValue> ivs, bool inference_only) const {
    if (c10::InferenceMode::is_enabled()) return;
    for (size_t i = 0; i < ivs.size(); i++) {
      if (!info_.mutated[i] || !ivs[i].isTensorList()) continue;
      for (const at::Tensor& t : ivs[i].toTensorList())
        if (t.defined() && (!inference_only || t.is_inference())) t.unsafeGetTensorImpl()->bump_version();
    }
  }

  OpInfo info_;
};

ArgType classify(const c10::Argument& arg) {
  const c10::TypePtr& t = arg.real_type();
  c10::TypePtr base = t;
  if (auto opt = t->cast<c10::OptionalType>()) base = opt->getElementType();
  switch (base->kind()) {
    case c10::TypeKind::TensorType: return ArgType::kTensor;
    case c10::TypeKind::NumberType: return ArgType::kScalar;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return ArgType::kInt;
    case c10::TypeKind::FloatType: return ArgType::kFloat;
    case c10::TypeKind::BoolType: return ArgType::kBool;
    case c10::TypeKind::StringType: return ArgType::kString;
    case c10::TypeKind::ScalarTypeType: return ArgType::kDtype;
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
    case c10::TypeKind::DeviceObjType: return ArgType::kEnum;
    case c10::TypeKind::ListType: {
      c10::TypePtr elem = base->castRaw<c10::ListType>()->getElementType();
      if (auto opt = elem->cast<c10::OptionalType>()) elem = opt->getElementType();
      switch (elem->kind()) {
        case c10::TypeKind::TensorType: return ArgType::kTensorList;
        case c10::TypeKind::NumberType: return ArgType::kScalarList;
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType: return ArgType::kIntList;
        case c10::TypeKind::FloatType: return ArgType::kFloatList;
        case c10::TypeKind::BoolType: return ArgType::kBoolList;
        default: return ArgType::kOther;
      }
    }
    default: return ArgType::kOther;
  }
}

}  // namespace

// Legacy overloads that write arguments their schema does not mark.
const std::unordered_map<std::string, std::vector<int>>& hidden_writes() {
  static const std::unordered_map<std::string, std::vector<int>> table = {
      {"aten::native_batch_norm", {3, 4}},  // running_mean, running_var in training (also .out)
  };
  return table;
}

// Per argument of |schema|: its type, whether the op writes it and whether
// it takes part in type promotion (as TensorIterator promotes: an in-place
// op's self does, out= tensors do not).
static void describe_args(const c10::FunctionSchema& schema, OpInfo& info) {
  for (const c10::Argument& arg : schema.arguments()) {
    info.arg_types.push_back(classify(arg));
    const c10::AliasInfo* ai = arg.alias_info();
    bool written = ai != nullptr && ai->isWrite();
    info.mutated.push_back(written);
    if (written && arg.kwarg_only()) info.out_variant = true;
    info.promotes.push_back(!(written && arg.kwarg_only()) && arg.name() != "alpha" && arg.name() != "value");
  }
}

std::optional<OpInfo> make_op_info(const c10::OperatorHandle& handle, const tpu_lower_rule* rule,
                                   std::string* why_not) {
  const c10::FunctionSchema& schema = handle.schema();
  OpInfo info;
  info.handle = handle;
  const auto& args = schema.arguments();
  const auto& rets = schema.returns();
  int out_alias[TPU_EAGER_MAX_RETURNS];
  if (rets.size() > TPU_EAGER_MAX_RETURNS) {
    *why_not = "too many returns";
    return std::nullopt;
  }
  info.per_item = rule->flags & TPU_RULE_PER_ITEM;
  describe_args(schema, info);
  if (info.per_item) info.out_variant = false;  // a fused step's written lists are its state, not out=
  std::string full_name = c10::toString(schema.operator_name());
  const std::string& base_name = schema.operator_name().name;
  if (base_name == "aten::index" || base_name == "aten::index_put_" || base_name == "aten::index_put" ||
      base_name == "aten::_index_put_impl_") {
    info.index_list = 1;
    info.expand_masks = base_name == "aten::index";
  }
  info.overlap = overlap_rule(base_name);
  info.pointwise = handle.hasTag(at::Tag::pointwise);
  auto hidden = hidden_writes().find(schema.operator_name().name);
  if (hidden != hidden_writes().end() && (schema.overload_name().empty() || schema.overload_name() == "out"))
    for (int i : hidden->second) info.mutated[i] = true;
  for (size_t r = 0; r < rets.size(); r++) {
    if (rets[r].type()->kind() != c10::TypeKind::TensorType) {
      *why_not = "a return is not a Tensor";
      return std::nullopt;
    }
    out_alias[r] = -1;
    const c10::AliasInfo* ri = rets[r].alias_info();
    if (ri == nullptr) continue;
    for (size_t i = 0; i < args.size(); i++) {
      const c10::AliasInfo* ai = args[i].alias_info();
      if (ai != nullptr && ai->isWrite() && ai->beforeSets() == ri->beforeSets()) out_alias[r] = static_cast<int>(i);
    }
    if (out_alias[r] < 0) {
      *why_not = "a return aliases an argument it does not write (a view)";
      return std::nullopt;
    }
  }
  // Written arguments that are not returned become extra outputs.
  int num_outputs = static_cast<int>(rets.size());
  for (size_t i = 0; i < args.size(); i++) {
    if (!info.mutated[i]) continue;
    if (info.arg_types[i] != ArgType::kTensor && !(info.per_item && info.arg_types[i] == ArgType::kTensorList)) {
      *why_not = "it writes a list";
      return std::nullopt;
    }
    bool returned = false;
    for (size_t r = 0; r < rets.size(); r++) returned |= out_alias[r] == static_cast<int>(i);
    if (returned) continue;
    if (num_outputs == TPU_EAGER_MAX_RETURNS) {
      *why_not = "too many outputs";
      return std::nullopt;
    }
    out_alias[num_outputs++] = static_cast<int>(i);
  }
  // A per-item rule sees the op's own arguments, lists as their items.
  std::vector<tpu_eager_item_arg> item_args(info.per_item ? args.size() : 0);
  for (size_t j = 0; j < item_args.size(); j++) item_args[j].arg = static_cast<int>(j);
  tpu_eager_op* op = nullptr;
  TPU_CHECK(tpu_eager_op_new(full_name.c_str(), rule, num_outputs, static_cast<int>(rets.size()), out_alias,
                             static_cast<int>(item_args.size()), item_args.data(), &op));
  info.op = op;
  return info;
}

namespace {

// The per-tensor op of a _foreach_ op where its name does not say it: PyTorch's
// CPU kernels compute maximum/minimum with a number as clamp_min/clamp_max,
// a norm as linalg_vector_norm(self, ord, dim=None, keepdim=False, dtype), and
// pow's overloads have names of their own.
struct ItemOp {
  const char* name;
  std::vector<int> source;  // per argument of the per-tensor op; -1: its default
};
const std::unordered_map<std::string, ItemOp>& item_op_table() {
  static const std::unordered_map<std::string, ItemOp> table = {
      {"_foreach_maximum.Scalar", {"clamp_min", {}}},   {"_foreach_maximum.ScalarList", {"clamp_min", {}}},
      {"_foreach_maximum_.Scalar", {"clamp_min_", {}}}, {"_foreach_maximum_.ScalarList", {"clamp_min_", {}}},
      {"_foreach_minimum.Scalar", {"clamp_max", {}}},   {"_foreach_minimum.ScalarList", {"clamp_max", {}}},
      {"_foreach_minimum_.Scalar", {"clamp_max_", {}}}, {"_foreach_minimum_.ScalarList", {"clamp_max_", {}}},
      {"_foreach_pow.List", {"pow.Tensor_Tensor", {}}},   {"_foreach_pow.Scalar", {"pow.Tensor_Scalar", {}}},
      {"_foreach_pow.ScalarList", {"pow.Tensor_Scalar", {}}},
      {"_foreach_norm.Scalar", {"linalg_vector_norm", {0, 1, -1, -1, 2}}},
  };
  return table;
}

// The per-tensor overload a _foreach_ overload applies item by item:
// add_.List -> add_.Tensor, add_.Scalar(List) -> add_.Scalar, sqrt -> sqrt.
std::optional<c10::OperatorHandle> find_item_op(const std::string& name, const std::string& overload,
                                                const tpu_lower_rule** out_rule, std::vector<int>* source) {
  std::string key = overload.empty() ? name : name + "." + overload;
  std::vector<std::string> candidates;
  auto special = item_op_table().find(key);
  if (special != item_op_table().end()) {
    candidates = {special->second.name};
    *source = special->second.source;
  } else {
    std::string base = name.substr(strlen("_foreach_"));
    if (overload == "List" || overload == "Tensor") candidates = {base + ".Tensor", base};
    else if (overload == "Scalar" || overload == "ScalarList" || overload == "ScalarAndTensor")
      candidates = {base + ".Scalar", base};
    else if (overload.empty()) candidates = {base};
  }
  for (const std::string& c : candidates) {
    auto dot = c.find('.');
    std::string overload_name = dot == std::string::npos ? "" : c.substr(dot + 1);
    auto handle = c10::Dispatcher::singleton().findSchema({"aten::" + c.substr(0, dot), overload_name});
    const tpu_lower_rule* rule = tpu_lower_find(c.c_str());
    if (!handle || rule == nullptr || (rule->flags & (TPU_RULE_INTERNAL | TPU_RULE_PER_ITEM))) continue;
    *out_rule = rule;
    return handle;
  }
  return std::nullopt;
}

// A default of the per-tensor op as a constant argument of its rule.
bool default_arg(const c10::IValue& v, ArgType type, tpu_lower_arg* out) {
  *out = tpu_lower_arg{};
  if (v.isNone()) out->kind = TPU_ARG_NONE;
  else if (type == ArgType::kScalar && v.isScalar()) describe_scalar(v, *out, true);
  else if (type == ArgType::kInt && v.isInt()) *out = tpu_lower_arg{.kind = TPU_ARG_INT, .i = v.toInt()};
  else if (type == ArgType::kFloat && v.isDouble()) *out = tpu_lower_arg{.kind = TPU_ARG_FLOAT, .f = v.toDouble()};
  else if (type == ArgType::kBool && v.isBool()) *out = tpu_lower_arg{.kind = TPU_ARG_BOOL, .b = v.toBool()};
  else return false;
  return true;
}

// How a _foreach_ op runs as its per-tensor op's rule item by item: its
// OpInfo less the eager op (item_handle, item_source, item_promotes set), the
// rule, and each item argument's source with defaults as constants; nullopt
// where it cannot (the op keeps PyTorch's kernel, which calls the per-tensor
// op per item).
std::optional<OpInfo> describe_foreach(const c10::OperatorHandle& handle, const tpu_lower_rule** out_rule,
                                       std::vector<tpu_eager_item_arg>* out_sources) {
  const c10::FunctionSchema& schema = handle.schema();
  std::string name = schema.name().substr(strlen("aten::"));
  const std::string& overload = schema.overload_name();
  if (name.rfind("_foreach_", 0) != 0) return std::nullopt;
  const tpu_lower_rule* rule = nullptr;
  std::vector<int> source;
  auto item = find_item_op(name, overload, &rule, &source);
  if (!item) return std::nullopt;
  const c10::FunctionSchema& item_schema = item->schema();
  const auto& args = schema.arguments();
  const auto& item_args = item_schema.arguments();
  if (source.empty())
    for (size_t j = 0; j < item_args.size(); j++) source.push_back(j < args.size() ? static_cast<int>(j) : -1);
  if (source.size() != item_args.size() || item_args.size() > TPU_EAGER_MAX_ITEM_ARGS) return std::nullopt;
  OpInfo info;
  info.handle = handle;
  info.item_handle = *item;
  info.per_item = true;
  describe_args(schema, info);
  OpInfo item_info;
  describe_args(item_schema, item_info);
  info.item_promotes = item_info.promotes;
  std::vector<tpu_eager_item_arg> sources(item_args.size());
  std::vector<bool> used(args.size(), false);
  for (size_t j = 0; j < item_args.size(); j++) {
    int src = source[j];
    ArgType want = item_info.arg_types[j];
    sources[j].arg = src;
    if (src < 0) {
      if (!item_args[j].default_value() || !default_arg(*item_args[j].default_value(), want, &sources[j].fixed))
        return std::nullopt;
      continue;
    }
    ArgType have = info.arg_types[src];
    bool fits = have == want || (have == ArgType::kTensorList && want == ArgType::kTensor) ||
                (have == ArgType::kScalarList && want == ArgType::kScalar);
    if (!fits) return std::nullopt;
    used[src] = true;
  }
  for (bool u : used)
    if (!u) return std::nullopt;
  info.item_source = source;
  // In place (writes its first list, returns nothing) or functional (returns
  // one new tensor per item), as the per-tensor op is.
  const auto& item_rets = item_schema.returns();
  if (item_rets.size() != 1 || schema.returns().size() > 1) return std::nullopt;
  bool in_place = schema.returns().empty();
  if (in_place != (item_rets[0].alias_info() != nullptr) || (in_place && !info.mutated[0])) return std::nullopt;
  for (size_t i = in_place ? 1 : 0; i < args.size(); i++)
    if (info.mutated[i]) return std::nullopt;
  *out_rule = rule;
  *out_sources = std::move(sources);
  return info;
}

std::optional<OpInfo> make_foreach_info(const c10::OperatorHandle& handle) {
  const tpu_lower_rule* rule = nullptr;
  std::vector<tpu_eager_item_arg> sources;
  auto info = describe_foreach(handle, &rule, &sources);
  if (!info) return std::nullopt;
  bool in_place = handle.schema().returns().empty();
  int alias = in_place ? 0 : -1;
  tpu_eager_op* op = nullptr;
  TPU_CHECK(tpu_eager_op_new(c10::toString(handle.schema().operator_name()).c_str(), rule, 1, in_place ? 0 : 1,
                             &alias, static_cast<int>(sources.size()), sources.data(), &op));
  info->op = op;
  return info;
}

}  // namespace

std::optional<std::pair<c10::OperatorName, std::vector<int>>> foreach_item(const c10::OperatorName& name) {
  auto handle = c10::Dispatcher::singleton().findSchema(name);
  const tpu_lower_rule* rule = nullptr;
  std::vector<tpu_eager_item_arg> sources;
  auto info = handle ? describe_foreach(*handle, &rule, &sources) : std::nullopt;
  if (!info) return std::nullopt;
  return std::make_pair(info->item_handle->schema().operator_name(), info->item_source);
}

static std::vector<std::string>& unregistered() {
  static std::vector<std::string> names;
  return names;
}

const std::vector<std::string>& unregistered_rule_names() { return unregistered(); }

}  // namespace torchtpu

namespace torchtpu {

void register_rules(torch::Library& m, const char* ns) {
  std::string prefix = std::string(ns) + "::";
  int n = tpu_lower_rule_count();
  for (int i = 0; i < n; i++) {
    const tpu_lower_rule* rule = tpu_lower_rule_at(i);
    if (rule->flags & TPU_RULE_INTERNAL) continue;
    for (int k = 0; k < 4 && rule->names[k] != nullptr; k++) {
      std::string name = rule->names[k];
      bool qualified = name.find("::") != std::string::npos;
      if (qualified ? name.compare(0, prefix.size(), prefix) != 0 : prefix != "aten::") continue;
      if (qualified) name = name.substr(prefix.size());
      auto dot = name.find('.');
      std::string base = prefix + name.substr(0, dot);
      std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
      auto handle = c10::Dispatcher::singleton().findSchema({base, overload});
      std::string why;
      if (!handle) {
        unregistered().push_back(name + ": no such operator in this PyTorch");
        continue;
      }
      auto info = make_op_info(*handle, rule, &why);
      if (!info) {
        unregistered().push_back(name + ": " + why);
        continue;
      }
      m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RuleKernel>(std::move(*info))));
    }
  }
}

// Every _foreach_ overload whose per-tensor op has a rule: one program per
// call instead of one per item.
void register_foreach(torch::Library& m) {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::_foreach_", 0) != 0 || name.overload_name.find("out") != std::string::npos) continue;
    auto handle = c10::Dispatcher::singleton().findSchema(name);
    if (!handle) continue;
    auto info = make_foreach_info(*handle);
    if (!info) continue;
    std::string impl = name.name.substr(strlen("aten::"));
    if (!name.overload_name.empty()) impl += "." + name.overload_name;
    m.impl(impl.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RuleKernel>(std::move(*info))));
  }
}

}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  torchtpu::register_rules(m, "aten");
  torchtpu::register_foreach(m);
  m.impl("addr", TORCH_FN(torchtpu::addr));
  m.impl("addr.out", TORCH_FN(torchtpu::addr_out));
}
