// The pieces of a call that eager dispatch and compiled graphs share (call.h).
#include "torch/call.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>

#include <cstdlib>
#include <mutex>

#include "torch/generator.h"

namespace torchtpu {

tpu_hlo_precision_t matmul_precision() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST: return TPU_HLO_PRECISION_HIGHEST;
    case at::Float32MatmulPrecision::HIGH: return TPU_HLO_PRECISION_HIGH;
    default: return TPU_HLO_PRECISION_DEFAULT;
  }
}

std::string call_key(const tpu_eager_call& call) {
  // The key reads the storages' buffer types: recorded calls on them run first.
  for (int a = 0; a < call.num_args; a++) {
    const tpu_eager_arg& arg = call.args[a];
    if (arg.lower.kind == TPU_ARG_TENSOR && arg.tensor.storage != nullptr)
      TPU_CHECK(tpu_storage_settle(arg.tensor.storage, TPU_CUT_GRAPH));
    if (arg.lower.kind == TPU_ARG_TENSOR_LIST)
      for (int i = 0; i < arg.lower.n; i++)
        if (arg.items[i].storage != nullptr) TPU_CHECK(tpu_storage_settle(arg.items[i].storage, TPU_CUT_GRAPH));
  }
  char* key = nullptr;
  size_t len = 0;
  TPU_CHECK(tpu_eager_call_key(&call, &key, &len));
  std::string out(key, len);
  free(key);
  return out;
}

void draw_rng(tpu_eager_call& call, at::Generator gen) {
  if (!gen.defined()) gen = default_generator(call.device);
  TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1, "expected a tpu generator, got one for ",
              gen.device());
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto seed_offset = gen.get<TpuGenerator>()->next(1);
  call.rng_seed = seed_offset.first;
  call.rng_offset = seed_offset.second;
}

at::Tensor new_output(const tpu_eager_entry* entry, int o) {
  const tpu_eager_out_meta* m = tpu_eager_entry_meta(entry, o);
  if (m->dtype == TPU_INVALID) return at::Tensor();
  return at::detail::empty_strided_generic(at::IntArrayRef(m->sizes, m->rank), at::IntArrayRef(m->strides, m->rank),
                                           allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           to_torch(m->dtype));
}

void execute_entry(tpu_eager_entry* entry, const tpu_eager_call& call, tpu_storage* const* storages, RunMode mode) {
  TPU_CHECK(mode == RunMode::kEager ? tpu_eager_run(entry, &call, storages)
                                    : tpu_eager_execute(entry, &call, storages));
}

}  // namespace torchtpu
