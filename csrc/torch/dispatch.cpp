// The eager dispatch path: one generic kernel serves every overload that has
// a lowering rule (unboxed for the common signatures, boxed for the rest:
// see unboxed.cpp). It describes the call to C (tensors as storage + view,
// constants), asks the eager layer for the cached program, and on a miss runs
// PyTorch's meta function for the output metadata. Registration walks the C
// rule registry: adding a rule in csrc/lower is all it takes to add an op.
// The per-op checks that give its errors the CPU kernels' words are tables
// in parity.cpp; _foreach_ ops, as their per-tensor op's rule, foreach.cpp;
// what it shares with compiled graphs (precision, running a program), call.cpp.
#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/ThreadLocalPythonObjects.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <pthread.h>

#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <unordered_map>
#include <unordered_set>

#include "torch/call.h"
#include "torch/describe.h"
#include "torch/dispatch.h"
#include "torch/kernel.h"
#include "torch/generator.h"
#include "torch/tpu_torch.h"

namespace torchtpu {

// Raises the compile log's pending warnings as Python warnings (compiles.cpp).
void warn_compiles();

namespace {

// Per-call scratch: everything the C call description points into.
struct CallScratch {
  c10::SmallVector<tpu_eager_arg, 8> args;
  c10::SmallVector<tpu_tensor_ref, 0> refs;  // list items (filled in place: see fill_tensor_ref)
  std::vector<tpu_dtype_t> item_dtypes;
  std::vector<int> item_ranks;
  std::vector<const int64_t*> item_sizes;
  ArgLists lists;  // the other lists; a tensor list's span is its first item in |refs|
};

}  // namespace


namespace {

// Fills |call| from the boxed arguments. Pointers into |sc| are patched at
// the end, once its vectors stop growing.
void describe_call(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, CallScratch& sc, tpu_eager_call& call) {
  const auto& schema_args = info.arg_types;
  c10::DeviceIndex device = -1;
  sc.args.resize_for_overwrite(ivs.size());  // each cleared below (a full tpu_eager_arg is over 1 KB)
  sc.lists.reset(ivs.size());
  for (size_t i = 0; i < ivs.size(); i++) {
    const c10::IValue& v = ivs[i];
    tpu_eager_arg& a = sc.args[i];
    tpu_eager_arg_clear(&a);
    a.mutated = info.mutated[i];
    tpu_lower_arg& l = a.lower;
    if (v.isNone()) {
      l.kind = TPU_ARG_NONE;
      continue;
    }
    switch (schema_args[i]) {
      case ArgType::kTensor: {
        const at::Tensor& t = v.toTensor();
        describe_tensor(t, device, a.tensor);
        describe_tensor_arg(a.tensor, l);
        break;
      }
      case ArgType::kTensorList: {
        l.kind = TPU_ARG_TENSOR_LIST;
        const size_t begin = sc.refs.size();
        sc.lists.spans[i].begin = begin;
        sc.refs.resize_for_overwrite(begin + v.toListRef().size());
        size_t k = begin;
        if (v.isTensorList()) {
          for (const at::Tensor& t : v.toTensorList()) describe_tensor(t, device, sc.refs[k++]);
        } else {
          for (const c10::IValue& item : v.toListRef())
            describe_tensor(item.isNone() ? at::Tensor() : item.toTensor(), device, sc.refs[k++]);
        }
        l.n = static_cast<int>(sc.refs.size() - begin);
        break;
      }
      default:
        describe_value(schema_args[i], v, i, info.op->rule->flags, Describe::kEager, l, sc.lists, &device);
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
        break;
      case TPU_ARG_TENSOR_LIST:
        a.items = sc.refs.data() + sc.lists.spans[i].begin;
        l.item_dtypes = sc.item_dtypes.data() + sc.lists.spans[i].begin;
        l.item_ranks = sc.item_ranks.data() + sc.lists.spans[i].begin;
        l.item_sizes = sc.item_sizes.data() + sc.lists.spans[i].begin;
        break;
      default:
        patch_lists(sc.lists, i, l);
        break;
    }
  }
  call.op = info.op;
  call.num_args = static_cast<int>(ivs.size());
  call.args = sc.args.data();
  call.common_dtype = TPU_INVALID;
  call.precision = info.op->rule->flags & TPU_RULE_MATMUL_PRECISION ? matmul_precision() : TPU_HLO_PRECISION_DEFAULT;
  call.device = device < 0 ? current_device() : device;
}

}  // namespace

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

namespace {

tpu_dtype_t common_dtype(const std::vector<bool>& promotes, c10::ArrayRef<c10::IValue> ivs) {
  at::ScalarType t = promoted_type(promotes, ivs);
  return t == at::ScalarType::Undefined ? TPU_INVALID : to_tpu(t);
}

void fill_meta(const at::Tensor& t, tpu_eager_out_meta& m) {
  if (!t.defined()) {
    m.dtype = TPU_INVALID;
    m.rank = 0;
    return;
  }
  m.dtype = held_dtype(t.scalar_type());
  check_rank(t.dim());
  m.rank = static_cast<int>(t.dim());
  bool dense = t.is_non_overlapping_and_dense();
  auto contiguous = c10::contiguous_strides(t.sizes());
  for (int i = 0; i < m.rank; i++) {
    m.sizes[i] = t.size(i);
    m.strides[i] = dense ? t.stride(i) : contiguous[i];
  }
}

}  // namespace

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
  if (!run_tpu_meta(handle, stack)) handle.callBoxed(stack);
  std::vector<at::Tensor> outs;
  for (const c10::IValue& v : stack) outs.push_back(v.isTensor() ? v.toTensor() : at::Tensor());
  return outs;
}

namespace {

std::vector<at::Tensor> run_meta(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs) {
  MetaMap mm;
  return run_meta(*info.handle, info.promotes, ivs, mm);
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

// The layout TensorIterator gives a pointwise op's result on the CPU (and
// CUDA), from its inputs' geometry: the same iterator, built over meta
// tensors of the inputs' sizes and strides, says. PyTorch's Python meta
// functions, which run_meta reaches, lay strides of size-1 dims out
// otherwise ([2, 5, 1, 16] at (80, 1, 1, 5) times 2: (80, 1, 80, 5) on
// meta, (80, 1, 1, 5) on the CPU), and a later op's memory format follows
// them (cat of such results: channels-last where the CPU's is contiguous,
// fuzz seed 60081).
// |writes|: the op whose out= arguments are no inputs, or null.
static at::Tensor iterator_layout(const c10::OperatorHandle& handle, const tpu_eager_op* writes,
                                  c10::ArrayRef<c10::IValue> ivs, const at::TensorOptions& options) {
  at::Tensor m = at::empty({0}, options.device(c10::kMeta));
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).add_output(m);
  for (size_t i = 0; i < ivs.size(); i++) {
    bool written = false;  // out= tensors (frexp has two) are no inputs
    for (int r = 0; writes != nullptr && r < writes->num_returns; r++)
      written |= writes->output_alias[r] == static_cast<int>(i);
    if (written) continue;
    if (ivs[i].isScalar()) {
      // The CPU kernels of the .Scalar overloads (add, mul, gt, ...) wrap
      // their self or other number in a 0-dim tensor, one more operand of
      // the iterator: gt.Scalar keeps a size-1 dim's stride that sin's
      // iterator of one operand lays out anew.
      const std::string& name = handle.schema().arguments()[i].name();
      if (name == "self" || name == "other") config.add_owned_const_input(at::empty({}, options.device(c10::kMeta)));
      continue;
    }
    if (!ivs[i].isTensor() || !ivs[i].toTensor().defined()) continue;
    const at::Tensor& t = ivs[i].toTensor();
    config.add_owned_const_input(at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)));
  }
  at::TensorIterator iter = config.build();
  return m;
}

// A new result |t| (meta) of a pointwise op takes the iterator's strides
// where they differ from its meta function's on size-1 dims only: a
// pointwise op that lays its result out itself keeps its meta function's
// layout. A _foreach_ op's items, by their
// per-tensor op, as the CPU's foreach kernels run it.
static void take_iterator_strides(const c10::OperatorHandle& handle, const tpu_eager_op* writes,
                                  c10::ArrayRef<c10::IValue> ivs, at::Tensor& t) {
  if (!t.defined() || !handle.hasTag(at::Tag::pointwise)) return;
  at::Tensor m = iterator_layout(handle, writes, ivs, t.options());
  bool same = m.sizes() == t.sizes();
  for (int64_t d = 0; same && d < t.dim(); d++) same = t.size(d) == 1 || t.stride(d) == m.stride(d);
  if (same) t = m;
}

// Where a CPU kernel's result layout is not its meta function's. pow.Scalar's
// structured meta asks for a contiguous result (float_power(Scalar, Tensor)
// reaches it too) and rrelu_with_noise's kernel makes it with empty_like in
// the legacy contiguous format, where the meta functions keep the input's
// layout; complex and polar, untagged, run TensorIterator like a pointwise
// op, where the meta function makes the result contiguous. Without, a view
// the CPU allows (`(2 ** x.t()).view(-1)`) failed on tpu, and one it refuses
// worked.
enum class CpuLayout { kMeta, kContiguous, kIterator };
static CpuLayout cpu_layout(const c10::OperatorHandle& handle) {
  const c10::OperatorName& n = handle.operator_name();
  if ((n.name == "aten::pow" && n.overload_name == "Scalar") ||
      (n.name == "aten::rrelu_with_noise" && n.overload_name.empty()))
    return CpuLayout::kContiguous;
  if (n.name == "aten::complex" || n.name == "aten::polar") return CpuLayout::kIterator;
  return CpuLayout::kMeta;
}

// The layout of new result |t| (meta) as the CPU lays it out.
static void take_cpu_layout(const c10::OperatorHandle& handle, const tpu_eager_op* op,
                            c10::ArrayRef<c10::IValue> ivs, at::Tensor& t) {
  if (!t.defined()) return;
  switch (cpu_layout(handle)) {
    case CpuLayout::kContiguous: t = at::empty(t.sizes(), t.options()); return;
    case CpuLayout::kIterator: t = iterator_layout(handle, op, ivs, t.options()); return;
    case CpuLayout::kMeta: take_iterator_strides(handle, op, ivs, t); return;
  }
}

// A pointwise op's out= that was resized takes the layout TensorIterator
// gives it on the CPU, the inputs' (a transposed input, a transposed out).
void restride_as_iterator(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, at::Tensor& out) {
  at::Tensor m = iterator_layout(*info.handle, info.op, ivs, out.options());
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
// keep their own mode. A worker's recorded calls work for the thread that
// waits on the backward: a data check's error among them goes to the thread
// that cuts (trace.c).
void follow_backward_caller_mode() {
  thread_local int worker = -1;
  if (worker < 0) {
    char name[16] = "";
    worker = pthread_getname_np(pthread_self(), name, sizeof name) == 0 && std::strncmp(name, "pt_autograd_", 12) == 0;
    if (worker) tpu_eager_set_thread_works_for_others();  // its data errors go to the thread that cuts
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
      if (at::native::resize_output(out, metas[r].sizes()) &&
          (info.handle->hasTag(at::Tag::pointwise) || cpu_layout(*info.handle) == CpuLayout::kIterator))
        restride_as_iterator(info, ivs, out);
    }
  }
  CallScratch sc;
  tpu_eager_call call{};
  describe_call(info, ivs, sc, call);
  TPU_CHECK(tpu_eager_prepare(&call));
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, call.device));
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
        for (int r = 0; r < op->num_outputs; r++) {
          if (op->output_alias[r] >= 0) continue;
          take_iterator_strides(*info.item_handle, nullptr, stack, metas[r]);
          fill_meta(metas[r], meta[k * op->num_outputs + r]);
        }
        item_common.push_back(common_dtype(info.item_promotes, stack));
      }
      call.item_common_dtypes = item_common.data();
    } else if (info.handle.has_value() && !info.per_item) {
      std::vector<at::Tensor> metas = run_meta(info, ivs);
      for (int r = 0; r < op->num_outputs; r++) {
        if (op->output_alias[r] >= 0) continue;
        at::Tensor t = r < static_cast<int>(metas.size()) ? metas[r] : at::Tensor();
        take_cpu_layout(*info.handle, op, ivs, t);
        fill_meta(t, meta[r]);
      }
    }
    call.common_dtype = common_dtype(info.promotes, ivs);
    tpu_status_t st = tpu_eager_compile(&call, meta.data(), &entry);
    if (st != nullptr) throw_status(st);
    held.reset(entry);
    warn_compiles();
  }
  at::Generator gen;
  for (const c10::IValue& v : ivs)
    if (v.isGenerator()) gen = v.toGenerator();
  return run_entry(entry, call, num_outputs, op->rule->flags & TPU_RULE_RNG, gen,
                   [op](int o) { return op->output_alias[o % op->num_outputs] >= 0; }, RunMode::kEager);
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

// The kernel that serves |info|'s overload: unboxed where its signature is
// a common one (unboxed.cpp), else the boxed RuleKernel.
torch::CppFunction rule_kernel(OpInfo&& info) {
  if (info.index_list < 0 && !info.per_item && !info.item_handle.has_value()) {
    if (std::optional<torch::CppFunction> k = unboxed_kernel(info)) return std::move(*k);
  }
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RuleKernel>(std::move(info)));
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
void describe_args(const c10::FunctionSchema& schema, OpInfo& info) {
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
      // A composite op the CPU decomposes stays decomposed on tpu: a
      // PrivateUse1 kernel for it would be what tensor subclasses (DTensor,
      // FakeTensor, functionalization) see instead of its parts, and they
      // have rules for the parts only (aten.is_nonzero, not
      // _local_scalar_dense). The rule serves compiled graphs alone.
      if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
          !handle->hasKernelForDispatchKey(c10::DispatchKey::CPU)) {
        unregistered().push_back(name + ": composite on the CPU");
        continue;
      }
      auto info = make_op_info(*handle, rule, &why);
      if (!info) {
        unregistered().push_back(name + ": " + why);
        continue;
      }
      m.impl(name.c_str(), rule_kernel(std::move(*info)));
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
