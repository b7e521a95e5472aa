/* The hand-written kernels programs can call: XLA FFI custom calls that the
 * runtime registers with the plugin, emitted by the lowering rules where a
 * benchmark shows they beat XLA's composite on that platform. Today: scaled
 * dot-product attention (forward and gradients) on the CPU plugin.
 *
 * Custom call contracts (all buffers float32, dense row-major; attributes
 * are a dictionary on the op):
 *   torchtpu_attention_fwd(q, k, v[, bias]) -> (out, lse)
 *   torchtpu_attention_bwd(q, k, v[, bias], out, lse, dout) -> (dq, dk, dv[, dbias])
 * with i32 attributes causal, has_bias, bias_grad and f32 scale; shapes and
 * semantics as kernels/attention.h says. */
#ifndef TPU_KERNELS_KERNELS_H_
#define TPU_KERNELS_KERNELS_H_

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TPU_KERNEL_ATTENTION = 1u << 0 };

#define TPU_KERNEL_ATTENTION_FWD "torchtpu_attention_fwd"
#define TPU_KERNEL_ATTENTION_BWD "torchtpu_attention_bwd"

/* Registers the kernels |rt|'s platform runs (the CPU plugin's) and returns
 * their TPU_KERNEL_* bits; 0 on other platforms or when the plugin cannot
 * take them. Call once, before compiling programs. */
unsigned tpu_kernels_register(tpu_runtime *rt);

#ifdef __cplusplus
}
#endif

#endif /* TPU_KERNELS_KERNELS_H_ */
