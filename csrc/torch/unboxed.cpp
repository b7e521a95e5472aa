// The unboxed entry of the generic eager kernel (dispatch.cpp's RuleKernel
// is the boxed one).
//
// A call from Python reaches a boxed kernel through a stack of IValues that
// copies every tensor argument. A tensor only Python holds then goes from one
// reference to two and back, and PyTorch keeps its Python object alive while
// a C++ reference exists: an incref and a decref of that object, each taking
// the GIL the binding let go of (perf of a fused chain of x * y, x - c: the
// GIL hand-offs and the stack's allocation were about a tenth of the host
// time). Overloads whose signature is one of the common ones below get an
// unboxed kernel instead: it hands the rule its tensor arguments borrowed
// (IValues that hold no reference of their own, given up unreleased when
// the call returns or throws) and returns an in-place op's self as the
// reference the caller passed.
#include <array>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "torch/dispatch.h"

namespace torchtpu {

namespace {

std::set<std::string>& unboxed_names() {
  static std::set<std::string> names;
  return names;
}

// An IValue of |t| that holds no reference (see Borrowed).
c10::IValue borrow(const at::Tensor& t) {
  return c10::IValue(at::Tensor(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(t.unsafeGetTensorImpl())));
}
c10::IValue to_ivalue(const at::Tensor& t) { return borrow(t); }
c10::IValue to_ivalue(const std::optional<at::Tensor>& t) { return t.has_value() ? borrow(*t) : c10::IValue(); }
template <class T>
c10::IValue to_ivalue(const T& v) {
  return c10::IValue(v);
}

template <class T>
constexpr bool is_tensor_arg() {
  using U = std::decay_t<T>;
  return std::is_same_v<U, at::Tensor> || std::is_same_v<U, std::optional<at::Tensor>>;
}

// The IValues of one call; the borrowed ones are given up, not released.
template <size_t N>
struct Borrowed {
  std::array<c10::IValue, N> ivs;
  std::array<bool, N> borrowed;
  ~Borrowed() {
    for (size_t i = 0; i < N; i++)
      if (borrowed[i] && ivs[i].isTensor()) (void)std::move(ivs[i]).toTensor().unsafeReleaseTensorImpl();
  }
};

// One letter per argument and return type: the key that matches a schema
// (schema_code) with a C++ signature (signature_code).
template <class T> struct Code;
#define TPU_CODE(T, c) \
  template <>          \
  struct Code<T> {     \
    static constexpr char value = c; \
  };
TPU_CODE(const at::Tensor&, 'T')
TPU_CODE(at::Tensor&, 'W')
TPU_CODE(at::Tensor, 'T')
TPU_CODE(const std::optional<at::Tensor>&, 'O')
TPU_CODE(const at::Scalar&, 'S')
TPU_CODE(const std::optional<at::Scalar>&, 's')
TPU_CODE(int64_t, 'i')
TPU_CODE(c10::SymInt, 'I')
TPU_CODE(double, 'f')
TPU_CODE(bool, 'b')
TPU_CODE(at::ScalarType, 'd')
TPU_CODE(std::optional<at::ScalarType>, 'D')
TPU_CODE(at::IntArrayRef, 'L')
TPU_CODE(c10::SymIntArrayRef, 'M')
TPU_CODE(at::OptionalIntArrayRef, 'l')
TPU_CODE(c10::string_view, 'z')
#undef TPU_CODE

// |t|'s letter; 0 where no unboxed signature takes it.
char type_code(const c10::TypePtr& t, bool written) {
  using K = c10::TypeKind;
  if (written) return t->kind() == K::TensorType ? 'W' : 0;
  switch (t->kind()) {
    case K::TensorType: return 'T';
    case K::NumberType: return 'S';
    case K::IntType: return 'i';
    case K::SymIntType: return 'I';
    case K::FloatType: return 'f';
    case K::BoolType: return 'b';
    case K::ScalarTypeType: return 'd';
    case K::StringType: return 'z';
    case K::ListType: {
      K e = t->castRaw<c10::ListType>()->getElementType()->kind();
      return e == K::IntType ? 'L' : e == K::SymIntType ? 'M' : 0;
    }
    case K::OptionalType: {
      const c10::TypePtr& e = t->castRaw<c10::OptionalType>()->getElementType();
      if (e->kind() == K::ListType) return e->castRaw<c10::ListType>()->getElementType()->kind() == K::IntType ? 'l' : 0;
      return e->kind() == K::TensorType ? 'O' : e->kind() == K::NumberType ? 's' : e->kind() == K::ScalarTypeType ? 'D' : 0;
    }
    default: return 0;
  }
}

// The letters of |schema|'s arguments, '>', its returns'; empty where a
// type has none.
std::string schema_code(const c10::FunctionSchema& schema) {
  std::string code;
  auto put = [&code](const c10::Argument& a) {
    char c = type_code(a.real_type(), a.alias_info() != nullptr && a.alias_info()->isWrite());
    code += c;
    return c != 0;
  };
  for (const c10::Argument& a : schema.arguments())
    if (!put(a)) return {};
  code += '>';
  for (const c10::Argument& r : schema.returns())
    if (!put(r)) return {};
  return code;
}

// A return type's letters: one per returned tensor.
template <class Ret>
struct ReturnCode {
  static std::string str() { return std::string(1, Code<Ret>::value); }
};
template <class... Rets>
struct ReturnCode<std::tuple<Rets...>> {
  static std::string str() { return std::string{Code<Rets>::value...}; }
};

template <class Sig> struct Unboxed;
template <class Ret, class... Args>
struct Unboxed<Ret(Args...)> {
  static std::string signature_code() { return std::string{Code<Args>::value...} + '>' + ReturnCode<Ret>::str(); }

  std::shared_ptr<const OpInfo> info;

  Ret operator()(Args... args) const {
    Borrowed<sizeof...(Args)> b{{to_ivalue(args)...}, {is_tensor_arg<Args>()...}};
    warn_overlapping_self(*info, b.ivs);
    std::vector<at::Tensor> outs = run_rule(*info, b.ivs);
    if constexpr (std::is_same_v<Ret, at::Tensor&>) {
      std::array<at::Tensor*, sizeof...(Args)> addrs{const_cast<at::Tensor*>(tensor_address(args))...};
      return *addrs[info->op->output_alias[0]];
    } else if constexpr (std::is_same_v<Ret, at::Tensor>) {
      return std::move(outs[0]);
    } else {  // a tuple of new tensors
      return tuple_of(outs, std::make_index_sequence<std::tuple_size_v<Ret>>());
    }
  }

  template <size_t... I>
  static Ret tuple_of(std::vector<at::Tensor>& outs, std::index_sequence<I...>) {
    return Ret(std::move(outs[I])...);
  }

  template <class T>
  static const at::Tensor* tensor_address(const T& v) {
    if constexpr (std::is_same_v<T, at::Tensor>) return &v;
    else return nullptr;
  }
};

using MakeUnboxed = torch::CppFunction (*)(OpInfo&&);

template <class Sig>
torch::CppFunction make_unboxed(OpInfo&& info) {
  return torch::CppFunction(Unboxed<Sig>{std::make_shared<const OpInfo>(std::move(info))});
}

// The signatures of the ops a training step calls most: pointwise ops and
// their in-place forms, addmm, softmax, the reductions.
const std::unordered_map<std::string, MakeUnboxed>& unboxed_signatures() {
  using T = const at::Tensor&;
  using W = at::Tensor&;
  using S = const at::Scalar&;
  using OS = const std::optional<at::Scalar>&;
  using OD = std::optional<at::ScalarType>;
  static const std::unordered_map<std::string, MakeUnboxed> table = [] {
    std::unordered_map<std::string, MakeUnboxed> t;
    auto add = [&t](std::string code, MakeUnboxed make) { t.emplace(std::move(code), make); };
#define TPU_UNBOXED(...) add(Unboxed<__VA_ARGS__>::signature_code(), &make_unboxed<__VA_ARGS__>)
    TPU_UNBOXED(at::Tensor(T));
    TPU_UNBOXED(at::Tensor(T, T));
    TPU_UNBOXED(at::Tensor(T, S));
    TPU_UNBOXED(at::Tensor(T, T, S));
    TPU_UNBOXED(at::Tensor(T, S, S));
    TPU_UNBOXED(at::Tensor(T, T, T));
    TPU_UNBOXED(at::Tensor(T, T, T, S));
    TPU_UNBOXED(at::Tensor(T, T, T, S, S));
    TPU_UNBOXED(at::Tensor(T, OS, OS));
    TPU_UNBOXED(at::Tensor(T, int64_t, bool));
    TPU_UNBOXED(at::Tensor(T, T, int64_t, at::ScalarType));
    TPU_UNBOXED(at::Tensor(T, OD));
    TPU_UNBOXED(at::Tensor(T, at::OptionalIntArrayRef, bool, OD));
    TPU_UNBOXED(at::Tensor(T, c10::string_view));
    TPU_UNBOXED(at::Tensor(T, T, c10::string_view));
    using O = const std::optional<at::Tensor>&;
    using T2 = std::tuple<at::Tensor, at::Tensor>;
    using T3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
    TPU_UNBOXED(T3(T, T, T, O, O));                       // _thnn_fused_lstm_cell
    TPU_UNBOXED(T3(T, c10::SymIntArrayRef, O, O, double));  // native_layer_norm
    TPU_UNBOXED(T2(T, T, O, int64_t, c10::SymInt));       // nll_loss_forward
    TPU_UNBOXED(at::Tensor(T, T, T, O, int64_t, c10::SymInt, T));  // nll_loss_backward
    TPU_UNBOXED(at::Tensor(T, T, c10::SymInt, bool, bool));        // embedding
    TPU_UNBOXED(at::Tensor(T, T, c10::SymInt, c10::SymInt, bool));  // embedding_dense_backward
    TPU_UNBOXED(at::Tensor&(W));
    TPU_UNBOXED(at::Tensor&(W, T));
    TPU_UNBOXED(at::Tensor&(W, S));
    TPU_UNBOXED(at::Tensor&(W, T, S));
    TPU_UNBOXED(at::Tensor&(W, S, S));
    TPU_UNBOXED(at::Tensor&(W, T, T));
    TPU_UNBOXED(at::Tensor&(W, T, T, S));
    TPU_UNBOXED(at::Tensor&(W, T, T, S, S));
    TPU_UNBOXED(at::Tensor&(T, W));
    TPU_UNBOXED(at::Tensor&(T, T, W));
    TPU_UNBOXED(at::Tensor&(T, T, S, W));
#undef TPU_UNBOXED
    return t;
  }();
  return table;
}

}  // namespace

std::optional<torch::CppFunction> unboxed_kernel(OpInfo& info) {
  auto it = unboxed_signatures().find(schema_code(info.handle->schema()));
  if (it == unboxed_signatures().end()) return std::nullopt;
  unboxed_names().insert(c10::toString(info.handle->schema().operator_name()));
  return it->second(std::move(info));
}

std::vector<std::string> unboxed_rule_names() { return {unboxed_names().begin(), unboxed_names().end()}; }

}  // namespace torchtpu
