// The schema-driven description of an op's arguments (describe.h).
#include "torch/describe.h"

namespace torchtpu {

namespace {

[[noreturn]] void device_mismatch(const at::Tensor& t, c10::DeviceIndex device) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, tpu:",
              static_cast<int>(device), " and ", t.device(), "!");
}

}  // namespace

void describe_tensor(const at::Tensor& t, c10::DeviceIndex& device, tpu_tensor_ref& r) {
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
    r.view.dtype = held_dtype(t.scalar_type());
    r.host_scalar = t.const_data_ptr();
    r.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
    return;
  }
  device_mismatch(t, device < 0 ? 0 : device);
}

void describe_tensor_arg(const tpu_tensor_ref& r, tpu_lower_arg& l) {
  l.kind = r.view.dtype == TPU_INVALID ? TPU_ARG_NONE : TPU_ARG_TENSOR;
  l.dtype = r.view.dtype;
  l.wrapped_number = r.wrapped_number;
  l.rank = r.view.rank;
  l.sizes = r.view.sizes;
  l.strides = r.view.strides;
}

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

void describe_scalar(const c10::IValue& v, tpu_lower_arg& l, bool constant) {
  l.kind = TPU_ARG_SCALAR;
  l.is_const = constant;
  l.fi = 0.0;
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
    c10::complex<double> z = s.toComplexDouble();
    l.dtype = TPU_C128;
    l.f = z.real();
    l.fi = z.imag();
    l.i = static_cast<int64_t>(l.f);
  } else {
    l.dtype = TPU_F64;
    l.f = s.toDouble();
    l.i = static_cast<int64_t>(l.f);
  }
}

void describe_value(ArgType type, const c10::IValue& v, size_t i, unsigned rule_flags, Describe who,
                    tpu_lower_arg& l, ArgLists& lists, c10::DeviceIndex* device) {
  const bool graph = who == Describe::kGraph;
  switch (type) {
    case ArgType::kTensor:
    case ArgType::kTensorList:
      TORCH_CHECK(false, "describe_value: a tensor argument");
    case ArgType::kScalar:
      describe_scalar(v, l, graph || (rule_flags & TPU_RULE_CONST_SCALARS));
      break;
    case ArgType::kScalarList: {  // one runtime operand: complex128 if any number is complex, else
                                  // float64 if any is a float, else int64
      l.kind = TPU_ARG_SCALAR_LIST;
      lists.spans[i].begin = lists.scalar_dtypes.size();
      l.dtype = TPU_S64;
      for (const c10::IValue& item : v.toListRef()) {
        tpu_lower_arg one{};
        describe_scalar(item, one, false);
        lists.scalar_dtypes.push_back(one.dtype);
        if (one.dtype == TPU_C128 || (one.dtype == TPU_F64 && l.dtype == TPU_S64)) l.dtype = one.dtype;
      }
      l.n = static_cast<int>(lists.scalar_dtypes.size() - lists.spans[i].begin);
      lists.spans[i].values = l.dtype == TPU_S64 ? lists.ints.size() : lists.floats.size();
      for (const c10::IValue& item : v.toListRef()) {
        c10::Scalar x = item.toScalar();
        if (l.dtype == TPU_S64) {
          lists.ints.push_back(x.toLong());
        } else if (l.dtype == TPU_F64) {
          lists.floats.push_back(x.toDouble());
        } else {  // (real, imaginary) pairs
          c10::complex<double> z = x.toComplexDouble();
          lists.floats.push_back(z.real());
          lists.floats.push_back(z.imag());
        }
      }
      break;
    }
    case ArgType::kInt:
      l.kind = TPU_ARG_INT;
      l.i = v.isSymInt() ? v.toSymInt().guard_int(__FILE__, __LINE__) : v.toInt();
      break;
    case ArgType::kIntList: {
      l.kind = TPU_ARG_INT_LIST;
      lists.spans[i].begin = lists.ints.size();
      for (const c10::IValue& item : v.toListRef())
        lists.ints.push_back(item.isSymInt() ? item.toSymInt().guard_int(__FILE__, __LINE__) : item.toInt());
      l.n = static_cast<int>(lists.ints.size() - lists.spans[i].begin);
      break;
    }
    case ArgType::kFloat:
      l.kind = TPU_ARG_FLOAT;
      l.f = v.toDouble();
      if (!graph && (rule_flags & TPU_RULE_RUNTIME_FLOATS)) {
        l.kind = TPU_ARG_SCALAR;
        l.dtype = TPU_F64;
      }
      break;
    case ArgType::kFloatList: {
      l.kind = TPU_ARG_FLOAT_LIST;
      lists.spans[i].begin = lists.floats.size();
      for (const c10::IValue& item : v.toListRef()) lists.floats.push_back(item.toDouble());
      l.n = static_cast<int>(lists.floats.size() - lists.spans[i].begin);
      break;
    }
    case ArgType::kBool:
      l.kind = TPU_ARG_BOOL;
      l.b = v.toBool();
      break;
    case ArgType::kBoolList: {
      l.kind = TPU_ARG_BOOL_LIST;
      lists.spans[i].begin = lists.bools.size();
      for (const c10::IValue& item : v.toListRef()) lists.bools.push_back(item.toBool());
      l.n = static_cast<int>(lists.bools.size() - lists.spans[i].begin);
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
          *device < 0)
        *device = v.toDevice().index();
      break;
    case ArgType::kOther:
      l.kind = TPU_ARG_OTHER;
      break;
  }
}

void patch_lists(const ArgLists& lists, size_t i, tpu_lower_arg& l) {
  switch (l.kind) {
    case TPU_ARG_SCALAR_LIST:
      l.item_dtypes = lists.scalar_dtypes.data() + lists.spans[i].begin;
      if (l.dtype == TPU_S64) l.ints = lists.ints.data() + lists.spans[i].values;
      else l.floats = lists.floats.data() + lists.spans[i].values;
      break;
    case TPU_ARG_INT_LIST: l.ints = lists.ints.data() + lists.spans[i].begin; break;
    case TPU_ARG_FLOAT_LIST: l.floats = lists.floats.data() + lists.spans[i].begin; break;
    case TPU_ARG_BOOL_LIST: l.bools = reinterpret_cast<const bool*>(lists.bools.data() + lists.spans[i].begin); break;
    default: break;
  }
}

}  // namespace torchtpu
