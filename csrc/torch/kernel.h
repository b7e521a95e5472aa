// What the eager kernel's files share (dispatch.cpp: the generic kernel;
// parity.cpp: the per-op checks that make its errors the CPU kernels';
// foreach.cpp: _foreach_ ops as their per-tensor op's rule item by item).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "torch/dispatch.h"

namespace torchtpu {

// --- dispatch.cpp

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

// Runs |handle|'s meta function (after check_before_meta): output metadata
// of new returns, and the shapes out= arguments must be resized to.
std::vector<at::Tensor> run_meta(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                                 c10::ArrayRef<c10::IValue> ivs, MetaMap& mm);
// PyTorch's promoted dtype of the inputs (TensorIterator's rules) that
// |promotes| marks; Undefined when there are none.
at::ScalarType promoted_type(const std::vector<bool>& promotes, c10::ArrayRef<c10::IValue> ivs);
// Per argument of |schema|: its type, whether the op writes it and whether
// it takes part in type promotion.
void describe_args(const c10::FunctionSchema& schema, OpInfo& info);

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

// --- parity.cpp

// Checks PyTorch's meta functions make differently from its CPU kernels, or
// not at all, made with the kernels' exception and message before the meta
// function runs (a table by op name). |promotes| marks the arguments that
// take part in type promotion.
void check_before_meta(const c10::OperatorHandle& handle, const std::vector<bool>& promotes,
                       c10::ArrayRef<c10::IValue> ivs);
// The checks of check_before_meta that PyTorch's decompositions miss too
// (fallback.cpp runs them before one): a `dim` argument's range, the random
// ops' parameters.
void check_before_decomposition(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> ivs);
// The out= overlap checks of the ops whose CPU kernels make them before resizing.
void check_out_overlap(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs);
// The in-place ops whose CPU kernels write a self that overlaps itself.
struct OverlapRule {
  const char* name;
  bool (*allows)(c10::ArrayRef<c10::IValue> ivs);  // nullptr: always
  void (*warn)(c10::ArrayRef<c10::IValue> ivs);    // the CPU kernel's warnings, or nullptr
};
const OverlapRule* overlap_rule(const std::string& base_name);
// addr (no rule): PyTorch's composite after the CPU kernel's checks.
at::Tensor addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                const at::Scalar& alpha);
at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                     const at::Scalar& alpha, at::Tensor& out);

// --- foreach.cpp

// The OpInfo of a _foreach_ overload run through its per-tensor op's rule;
// nullopt where it cannot be.
std::optional<OpInfo> make_foreach_info(const c10::OperatorHandle& handle);
// The arguments of a _foreach_ op's per-tensor op for item |k|.
torch::jit::Stack item_stack(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, int k);
// PyTorch's checks of a _foreach_ op's lists (check_foreach_api_restrictions).
void check_foreach_lists(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs);
// Runs a _foreach_ call's items in turn through the per-tensor op.
std::vector<at::Tensor> run_items_in_turn(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, int items);

}  // namespace torchtpu
