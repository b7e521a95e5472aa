// The eager dispatch path: one boxed kernel serves every overload that has a
// lowering rule. It describes the call to C (tensors as storage + view,
// constants), asks the eager layer for the cached program, and on a miss runs
// PyTorch's meta function for the output metadata. Registration walks the C
// rule registry: adding a rule in csrc/lower is all it takes to add an op.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <unordered_map>

#include "torch/dispatch.h"
#include "torch/generator.h"
#include "torch/tpu_torch.h"

namespace torchtpu {

namespace {

// Per-call scratch: everything the C call description points into.
struct CallScratch {
  c10::SmallVector<tpu_eager_arg, 8> args;
  std::vector<tpu_tensor_ref> refs;          // list items
  std::vector<tpu_dtype_t> item_dtypes;
  std::vector<int> item_ranks;
  std::vector<const int64_t*> item_sizes;
  std::vector<int64_t> ints;                 // int lists
  std::vector<double> floats;
  std::vector<uint8_t> bools;
  std::vector<size_t> ref_begin, int_begin, float_begin, bool_begin;  // per arg
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

// Describes tensor |t| for C. CPU tensors are allowed only as 0-dim scalars.
tpu_tensor_ref describe(const at::Tensor& t, c10::DeviceIndex& device) {
  if (!t.defined()) {
    tpu_tensor_ref none{};
    none.view.dtype = TPU_INVALID;
    return none;
  }
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    if (device < 0) device = t.device().index();
    else if (t.device().index() != device) device_mismatch(t, device);
    return tensor_ref(t);
  }
  if (t.device().is_cpu() && t.dim() == 0) {
    tpu_tensor_ref r{};
    r.view.dtype = to_tpu(t.scalar_type());
    TORCH_CHECK(r.view.dtype != TPU_INVALID, "tpu does not support dtype ", t.scalar_type());
    r.host_scalar = t.const_data_ptr();
    r.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
    return r;
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
  sc.ref_begin.assign(ivs.size(), 0);
  sc.int_begin.assign(ivs.size(), 0);
  sc.float_begin.assign(ivs.size(), 0);
  sc.bool_begin.assign(ivs.size(), 0);
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
        a.tensor = describe(t, device);
        l.kind = a.tensor.view.dtype == TPU_INVALID ? TPU_ARG_NONE : TPU_ARG_TENSOR;
        l.dtype = a.tensor.view.dtype;
        l.wrapped_number = a.tensor.wrapped_number;
        l.rank = a.tensor.view.rank;
        break;
      }
      case ArgType::kTensorList: {
        l.kind = TPU_ARG_TENSOR_LIST;
        sc.ref_begin[i] = sc.refs.size();
        if (v.isTensorList()) {
          for (const at::Tensor& t : v.toTensorList()) sc.refs.push_back(describe(t, device));
        } else {
          for (const c10::IValue& item : v.toListRef())
            sc.refs.push_back(item.isNone() ? describe(at::Tensor(), device) : describe(item.toTensor(), device));
        }
        l.n = static_cast<int>(sc.refs.size() - sc.ref_begin[i]);
        break;
      }
      case ArgType::kScalar:
        describe_scalar(v, l, const_scalars);
        break;
      case ArgType::kInt:
        l.kind = TPU_ARG_INT;
        l.i = v.isSymInt() ? v.toSymInt().guard_int(__FILE__, __LINE__) : v.toInt();
        break;
      case ArgType::kIntList: {
        l.kind = TPU_ARG_INT_LIST;
        sc.int_begin[i] = sc.ints.size();
        for (const c10::IValue& item : v.toListRef())
          sc.ints.push_back(item.isSymInt() ? item.toSymInt().guard_int(__FILE__, __LINE__) : item.toInt());
        l.n = static_cast<int>(sc.ints.size() - sc.int_begin[i]);
        break;
      }
      case ArgType::kFloat:
        l.kind = TPU_ARG_FLOAT;
        l.f = v.toDouble();
        break;
      case ArgType::kFloatList: {
        l.kind = TPU_ARG_FLOAT_LIST;
        sc.float_begin[i] = sc.floats.size();
        for (const c10::IValue& item : v.toListRef()) sc.floats.push_back(item.toDouble());
        l.n = static_cast<int>(sc.floats.size() - sc.float_begin[i]);
        break;
      }
      case ArgType::kBool:
        l.kind = TPU_ARG_BOOL;
        l.b = v.toBool();
        break;
      case ArgType::kBoolList: {
        l.kind = TPU_ARG_BOOL_LIST;
        sc.bool_begin[i] = sc.bools.size();
        for (const c10::IValue& item : v.toListRef()) sc.bools.push_back(item.toBool());
        l.n = static_cast<int>(sc.bools.size() - sc.bool_begin[i]);
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
        a.items = sc.refs.data() + sc.ref_begin[i];
        l.item_dtypes = sc.item_dtypes.data() + sc.ref_begin[i];
        l.item_ranks = sc.item_ranks.data() + sc.ref_begin[i];
        l.item_sizes = sc.item_sizes.data() + sc.ref_begin[i];
        break;
      case TPU_ARG_INT_LIST: l.ints = sc.ints.data() + sc.int_begin[i]; break;
      case TPU_ARG_FLOAT_LIST: l.floats = sc.floats.data() + sc.float_begin[i]; break;
      case TPU_ARG_BOOL_LIST: l.bools = reinterpret_cast<const bool*>(sc.bools.data() + sc.bool_begin[i]); break;
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

// PyTorch's promoted dtype of the inputs (TensorIterator's rules).
tpu_dtype_t common_dtype(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  at::native::ResultTypeState state;
  bool any = false;
  for (size_t i = 0; i < ivs.size(); i++) {
    if (!info.promotes[i] || ivs[i].isNone()) continue;
    const c10::IValue& v = ivs[i];
    if (v.isTensor() && v.toTensor().defined()) {
      state = at::native::update_result_type_state(v.toTensor(), state);
      any = true;
    } else if (v.isScalar()) {
      state = at::native::update_result_type_state(v.toScalar(), state);
      any = true;
    }
  }
  return any ? to_tpu(at::native::result_type(state)) : TPU_INVALID;
}

// A meta tensor with |t|'s geometry, sharing one meta storage per tpu
// storage so that aliasing checks in meta functions see what they would see
// on the real tensors.
struct MetaMap {
  std::unordered_map<const void*, at::Tensor> bases;
  at::Tensor convert(const at::Tensor& t) {
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
  TORCH_CHECK(t.dim() <= TPU_HLO_MAX_RANK, "tpu supports at most ", TPU_HLO_MAX_RANK, " dimensions");
  m.rank = static_cast<int>(t.dim());
  bool dense = t.is_non_overlapping_and_dense();
  auto contiguous = c10::contiguous_strides(t.sizes());
  for (int i = 0; i < m.rank; i++) {
    m.sizes[i] = t.size(i);
    m.strides[i] = dense ? t.stride(i) : contiguous[i];
  }
}

// Runs the meta function: output metadata of new returns, and the shapes
// out= arguments must be resized to.
std::vector<at::Tensor> run_meta(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  MetaMap mm;
  torch::jit::Stack stack;
  stack.reserve(ivs.size());
  for (const c10::IValue& v : ivs) stack.push_back(mm.convert(v));
  info.handle->callBoxed(stack);
  std::vector<at::Tensor> outs;
  for (const c10::IValue& v : stack) outs.push_back(v.isTensor() ? v.toTensor() : at::Tensor());
  return outs;
}

}  // namespace

std::vector<at::Tensor> run_rule(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  const tpu_eager_op* op = info.op;
  if (info.out_variant) {
    // out= tensors take the shape the meta function gives them (with
    // PyTorch's resize warning) before the call is described.
    std::vector<at::Tensor> metas = run_meta(info, ivs);
    for (int r = 0; r < op->num_returns; r++) {
      int a = op->output_alias[r];
      if (a < 0 || !metas[r].defined()) continue;
      at::Tensor out = ivs[a].toTensor();
      if (out.sizes() != metas[r].sizes()) at::native::resize_output(out, metas[r].sizes());
    }
  }
  CallScratch sc;
  tpu_eager_call call{};
  describe_call(info, ivs, sc, call);
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
  tpu_eager_entry* entry = tpu_eager_lookup(&call);
  if (entry == nullptr) {
    // A miss validates the call as PyTorch would (shapes, dtypes, written
    // arguments that overlap themselves) and learns the outputs' metadata.
    // Everything checked here is part of the key, so hits are valid calls.
    for (size_t i = 0; i < ivs.size(); i++)
      if (info.mutated[i] && ivs[i].isTensor() && ivs[i].toTensor().defined())
        at::assert_no_internal_overlap(ivs[i].toTensor());
    tpu_eager_out_meta meta[TPU_EAGER_MAX_RETURNS] = {};
    if (info.handle.has_value()) {
      std::vector<at::Tensor> metas = run_meta(info, ivs);
      for (int r = 0; r < op->num_outputs; r++)
        if (op->output_alias[r] < 0) fill_meta(r < static_cast<int>(metas.size()) ? metas[r] : at::Tensor(), meta[r]);
    }
    call.common_dtype = common_dtype(info, ivs);
    tpu_status_t st = tpu_eager_compile(&call, meta, &entry);
    if (st != nullptr) throw_status(st);
  }
  std::vector<at::Tensor> outs(op->num_outputs);
  tpu_storage* new_storages[TPU_EAGER_MAX_RETURNS] = {};
  for (int r = 0; r < op->num_outputs; r++) {
    if (op->output_alias[r] >= 0) continue;
    const tpu_eager_out_meta* m = tpu_eager_entry_meta(entry, r);
    if (m->dtype == TPU_INVALID) continue;
    outs[r] = at::detail::empty_strided_generic(at::IntArrayRef(m->sizes, m->rank), at::IntArrayRef(m->strides, m->rank),
                                                allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                to_torch(m->dtype));
    new_storages[r] = storage_of(outs[r]);
  }
  TPU_CHECK(tpu_eager_execute(entry, &call, new_storages));
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
    if (info_.index_list >= 0) {
      c10::IValue& list = (*stack)[stack->size() - n + info_.index_list];
      prepare_indices(list, (*stack)[stack->size() - n].toTensor(), info_.expand_masks);
    }
    auto ivs = torch::jit::last(*stack, n);
    std::vector<at::Tensor> outs = run_rule(info_, ivs);
    c10::SmallVector<c10::IValue, 4> results;
    for (int r = 0; r < info_.op->num_returns; r++) {
      int a = info_.op->output_alias[r];
      results.push_back(a >= 0 ? ivs[a] : c10::IValue(outs[r]));
    }
    torch::jit::drop(*stack, n);
    for (auto& v : results) stack->push_back(std::move(v));
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
  for (size_t i = 0; i < args.size(); i++) {
    info.arg_types.push_back(classify(args[i]));
    const c10::AliasInfo* ai = args[i].alias_info();
    bool written = ai != nullptr && ai->isWrite();
    info.mutated.push_back(written);
    if (written && args[i].kwarg_only()) info.out_variant = true;
    info.promotes.push_back(!written && args[i].name() != "alpha" && args[i].name() != "value");
  }
  std::string full_name = c10::toString(schema.operator_name());
  const std::string& base_name = schema.operator_name().name;
  if (base_name == "aten::index" || base_name == "aten::index_put_" || base_name == "aten::index_put" ||
      base_name == "aten::_index_put_impl_") {
    info.index_list = 1;
    info.expand_masks = base_name == "aten::index";
  }
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
    if (info.arg_types[i] != ArgType::kTensor) {
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
  tpu_eager_op* op = nullptr;
  TPU_CHECK(tpu_eager_op_new(full_name.c_str(), rule, num_outputs, static_cast<int>(rets.size()), out_alias, &op));
  info.op = op;
  return info;
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

}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { torchtpu::register_rules(m, "aten"); }
