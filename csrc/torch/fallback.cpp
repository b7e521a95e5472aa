// The boxed CPU fallback for ops without a lowering rule: copy in, run the
// CPU kernel, copy results (and mutated arguments) back. Every use is counted
// per op; TORCHTPU_FALLBACK chooses warn-once (default), error or silent.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <atomic>

#include "torch/tpu_torch.h"

extern "C" {
#include "base/stats.h"
}

namespace torchtpu {
namespace {

std::atomic<FallbackMode> g_mode{FallbackMode::kWarn};

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = c10::toString(op.schema().operator_name());
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

}  // namespace torchtpu

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torchtpu::cpu_fallback>());
}
