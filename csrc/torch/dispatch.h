// The generic eager kernel (see dispatch.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "torch/tpu_torch.h"

namespace torchtpu {

enum class ArgType { kTensor, kTensorList, kScalar, kScalarList, kInt, kIntList, kFloat, kFloatList, kBool,
                     kBoolList, kString, kDtype, kEnum, kOther };

// What the kernel knows about one overload, computed once from its schema.
struct OpInfo {
  tpu_eager_op* op = nullptr;
  std::vector<ArgType> arg_types;
  std::vector<bool> mutated;   // per argument: written by the op
  std::vector<bool> promotes;  // per argument: takes part in type promotion
  bool out_variant = false;    // has out= arguments (resized from the meta shapes)
  int index_list = -1;         // a Tensor?[] of indices (CPU index tensors move to the device)
  bool expand_masks = false;   // its boolean masks become long indices (data-dependent sizes)
  std::optional<c10::OperatorHandle> handle;
  // A per-item op (eager.h): list ops run their rule item by item in one
  // program. A _foreach_ op names the per-tensor op that computes one item
  // (its meta function gives the item's output; it also runs the items in
  // turn when one program cannot), where each of that op's arguments comes
  // from (-1: its default), and which of them take part in promotion.
  bool per_item = false;
  std::optional<c10::OperatorHandle> item_handle;
  std::vector<int> item_source;
  std::vector<bool> item_promotes;
  // Set for the in-place ops whose CPU kernels write a self that overlaps
  // itself (an expanded view) instead of refusing it (dispatch.cpp).
  const struct OverlapRule* overlap = nullptr;
  // A pointwise op: TensorIterator's kernel on the CPU, which refuses a
  // written tensor that partly overlaps an input (x.add_(x.t())).
  bool pointwise = false;
};

// Builds the OpInfo of |handle| served by |rule|, or explains why the
// generic kernel cannot serve it.
std::optional<OpInfo> make_op_info(const c10::OperatorHandle& handle, const tpu_lower_rule* rule,
                                   std::string* why_not);

// Whether |ivs| has an op the CPU lets write a self that overlaps itself
// (OpInfo::overlap) write one; the CPU kernel's warnings for it.
bool writes_overlapping_self(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs);
void warn_overlapping_self(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs);

// Runs an op through its rule. |ivs| are the arguments in schema order.
// Returns the new tensors (undefined for returns that alias arguments).
std::vector<at::Tensor> run_rule(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs);
// The matmul family's shape and dtype checks, with the CPU kernels'
// messages (mm, addmm, bmm, baddbmm, addmv, mv, dot, vdot).
void check_matmul_family(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> ivs);
// Refuses out= tensors whose dtype the op's CPU kernel would refuse.
void check_out_dtypes(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> ivs);

// The unboxed kernel (unboxed.cpp) of |info|'s overload, moved out of
// |info|, where its signature is one of the common ones; else nullopt and
// |info| untouched.
std::optional<torch::CppFunction> unboxed_kernel(OpInfo& info);

// Registers the generic kernel as |m|'s PrivateUse1 kernel of every rule
// named in namespace |ns| ("aten": unqualified names; others: "ns::op").
void register_rules(torch::Library& m, const char* ns);

// tpu's own meta functions (torchtpu/_meta.py's run) for the ops |names|
// ("aten::op.overload"), where PyTorch's do not fit tpu (meta.cpp).
void set_tpu_meta(PyObject* fn, const std::vector<std::string>& names);
// Runs tpu's meta function of |op| on the stack's meta tensors, replacing
// its arguments with its results; false (stack untouched) when it has none.
bool run_tpu_meta(const c10::OperatorHandle& op, torch::jit::Stack& stack);

// The per-tensor op a _foreach_ op runs item by item through its rule, as
// eager runs it, and per argument of that op the _foreach_ op's argument it
// comes from (item k of a list; -1: its default); nullopt where there is none.
// |lowered| false: also where the per-tensor op has no rule (the item by item
// decomposition of the _foreach_ op, torchtpu/_decomp.py). One table for both.
std::optional<std::pair<c10::OperatorName, std::vector<int>>> foreach_item(const c10::OperatorName& name,
                                                                          bool lowered = true);

// Rule names that could not be registered, and why (for `python -m torchtpu info`).
const std::vector<std::string>& unregistered_rule_names();
// Overloads served by the unboxed kernel (unboxed.cpp: the common signatures).
std::vector<std::string> unboxed_rule_names();

}  // namespace torchtpu
