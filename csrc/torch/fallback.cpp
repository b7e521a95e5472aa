// The boxed CPU fallback for ops without a lowering rule: copy in, run the
// CPU kernel, copy results (and mutated arguments) back. Every use is counted
// per op; TORCHTPU_FALLBACK chooses warn-once (default), error or silent.
#include <ATen/native/CPUFallback.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <atomic>

#include "torch/dispatch.h"
#include "torch/kernel.h"
#include "torch/py_args.h"
#include "torch/tpu_torch.h"

extern "C" {
#include "base/stats.h"
}

namespace torchtpu {
namespace {

std::atomic<FallbackMode> g_mode{FallbackMode::kWarn};
PyObject* g_decomposer = nullptr;  // torchtpu._decomp.run, set at import

// Runs the decomposition of |op| (torchtpu/_decomp.py, which also decides
// which in-place ops it can take) on the stack's tpu tensors; true when it
// did. Any failure leaves the stack as it was: the CPU fallback then runs,
// and raises PyTorch's own error for bad input.
bool decompose(const c10::OperatorHandle& op, const std::string& name, torch::jit::Stack* stack) {
  if (g_decomposer == nullptr) return false;
  const c10::FunctionSchema& schema = op.schema();
  for (const auto& ret : schema.returns())
    if (ret.type()->kind() != c10::TypeKind::TensorType) return false;
  const size_t n = schema.arguments().size();
  check_before_decomposition(op, torch::jit::last(*stack, n));
  check_matmul_family(op, torch::jit::last(*stack, n));
  check_out_dtypes(op, torch::jit::last(*stack, n));
  pybind11::gil_scoped_acquire gil;
  try {
    auto [args, kwargs] = py_args(schema, torch::jit::last(*stack, n));
    pybind11::object result = pybind11::reinterpret_borrow<pybind11::object>(g_decomposer)(
        pybind11::str(name), args, kwargs);
    if (result.ptr() == Py_NotImplemented) return false;
    std::vector<c10::IValue> outs;
    const auto& rets = schema.returns();
    if (rets.empty()) {  // an in-place op that wrote its arguments
      if (!result.is_none()) return false;
    } else if (rets.size() == 1) {
      outs.push_back(torch::jit::toIValue(result, rets[0].type()));
    } else {
      auto items = result.cast<pybind11::tuple>();
      if (items.size() != rets.size()) return false;
      for (size_t i = 0; i < rets.size(); i++) outs.push_back(torch::jit::toIValue(items[i], rets[i].type()));
    }
    for (const auto& v : outs)
      if (!v.isTensor() || (v.toTensor().defined() && v.toTensor().device().type() != c10::DeviceType::PrivateUse1))
        return false;
    torch::jit::drop(*stack, n);
    for (auto& v : outs) stack->push_back(std::move(v));
    return true;
  } catch (const std::exception&) {
    PyErr_Clear();
    return false;
  }
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = c10::toString(op.schema().operator_name());
  if (decompose(op, name, stack)) {
    tpu_stats_op_bump(TPU_OPSTAT_DECOMPOSITION, name.c_str());
    return;
  }
  FallbackMode mode = g_mode.load(std::memory_order_relaxed);
  TORCH_CHECK_NOT_IMPLEMENTED(mode != FallbackMode::kError, "The operator '", name,
                              "' is not implemented for the tpu device and TORCHTPU_FALLBACK=error forbids "
                              "running it on the CPU.");
  uint64_t count = tpu_stats_op_bump(TPU_OPSTAT_FALLBACK, name.c_str());
  if (mode == FallbackMode::kWarn && count == 1)
    TORCH_WARN("torchtpu: '", name, "' has no tpu lowering and runs on the CPU (tensors are copied there and back). "
               "Set TORCHTPU_FALLBACK=error to make this an error, =silent to hide this warning.");
  at::native::cpu_fallback(op, stack);
}

}  // namespace

void set_fallback_mode(FallbackMode mode) { g_mode.store(mode); }

void set_decomposer(PyObject* fn) {
  Py_XINCREF(fn);
  Py_XDECREF(g_decomposer);
  g_decomposer = fn;
}

}  // namespace torchtpu

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torchtpu::cpu_fallback>());
}
