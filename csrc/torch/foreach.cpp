// _foreach_ ops on the eager kernel (kernel.h): every _foreach_ overload
// whose per-tensor op has a rule runs as that rule item by item in one
// program; the table names the per-tensor op where the name does not say it.
#include <cstring>

#include "torch/describe.h"
#include "torch/kernel.h"

namespace torchtpu {

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

// A per-item call whose program would not see its own earlier writes runs
// its items in turn, as PyTorch's CPU kernels do: a _foreach_ op through its
// per-tensor op, another (_fused_adamw_) as itself on one-item lists.
std::vector<at::Tensor> run_items_in_turn(const OpInfo& info, c10::ArrayRef<c10::IValue> ivs, int items) {
  std::vector<at::Tensor> outs;
  for (int k = 0; k < items; k++) {
    torch::jit::Stack stack;
    if (info.item_handle.has_value()) {
      stack = item_stack(info, ivs, k);
      info.item_handle->callBoxed(stack);
    } else {
      for (size_t j = 0; j < ivs.size(); j++) {
        bool list = info.arg_types[j] == ArgType::kTensorList && !ivs[j].toTensorList().empty();
        stack.push_back(list ? c10::IValue(c10::List<at::Tensor>({ivs[j].toTensorList()[k]})) : ivs[j]);
      }
      info.handle->callBoxed(stack);
    }
    if (info.op->output_alias[0] < 0) outs.push_back(stack[0].toTensor());
  }
  return outs;
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
// |lowered|: only one whose rule can run it per item (*out_rule set).
std::optional<c10::OperatorHandle> find_item_op(const std::string& name, const std::string& overload, bool lowered,
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
    if (!handle) continue;
    if (lowered && (rule == nullptr || (rule->flags & (TPU_RULE_INTERNAL | TPU_RULE_PER_ITEM)))) continue;
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
// op per item). |lowered| false: the per-tensor op need have no rule.
std::optional<OpInfo> describe_foreach(const c10::OperatorHandle& handle, bool lowered,
                                       const tpu_lower_rule** out_rule, std::vector<tpu_eager_item_arg>* out_sources) {
  const c10::FunctionSchema& schema = handle.schema();
  std::string name = schema.name().substr(strlen("aten::"));
  const std::string& overload = schema.overload_name();
  if (name.rfind("_foreach_", 0) != 0) return std::nullopt;
  const tpu_lower_rule* rule = nullptr;
  std::vector<int> source;
  auto item = find_item_op(name, overload, lowered, &rule, &source);
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

}  // namespace

std::optional<OpInfo> make_foreach_info(const c10::OperatorHandle& handle) {
  const tpu_lower_rule* rule = nullptr;
  std::vector<tpu_eager_item_arg> sources;
  auto info = describe_foreach(handle, true, &rule, &sources);
  if (!info) return std::nullopt;
  bool in_place = handle.schema().returns().empty();
  int alias = in_place ? 0 : -1;
  tpu_eager_op* op = nullptr;
  TPU_CHECK(tpu_eager_op_new(c10::toString(handle.schema().operator_name()).c_str(), rule, 1, in_place ? 0 : 1,
                             &alias, static_cast<int>(sources.size()), sources.data(), &op));
  info->op = op;
  return info;
}

std::optional<std::pair<c10::OperatorName, std::vector<int>>> foreach_item(const c10::OperatorName& name,
                                                                          bool lowered) {
  auto handle = c10::Dispatcher::singleton().findSchema(name);
  const tpu_lower_rule* rule = nullptr;
  std::vector<tpu_eager_item_arg> sources;
  auto info = handle ? describe_foreach(*handle, lowered, &rule, &sources) : std::nullopt;
  if (!info) return std::nullopt;
  return std::make_pair(info->item_handle->schema().operator_name(), info->item_source);
}

}  // namespace torchtpu
