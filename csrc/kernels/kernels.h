/* The hand-written kernels programs can call: XLA FFI custom calls that the
 * runtime registers with the plugin, emitted by the lowering rules where a
 * benchmark shows they beat XLA's composite on that platform. Today, on the
 * CPU plugin: scaled dot-product attention (forward and gradients), and
 * float32 matrix products on CPUs with AVX2 or AVX-512 (plain and grouped).
 *
 * Custom call contracts (all buffers float32, dense row-major; attributes
 * are a dictionary on the op):
 *   torchtpu_attention_fwd(q, k, v[, bias]) -> (out, lse)
 *   torchtpu_attention_bwd(q, k, v[, bias], out, lse, dout) -> (dq, dk, dv[, dbias])
 * with i32 attributes causal, has_bias, bias_grad and f32 scale; shapes and
 * semantics as kernels/attention.h says.
 *   torchtpu_matmul(a, b[, bias]) -> c
 * with i32 attributes lhs_t, rhs_t and has_bias: operands of rank 2, or 3
 * with one batch dim, bias [N], as kernels/matmul.h says.
 *   torchtpu_grouped_matmul(a, b, offs) -> c
 * (part of the matmul kernel) with i32 attributes rows and rhs_t, offs int32:
 * torch._grouped_mm's products, one per group, as ffi.c says.
 *   torchtpu_paged_attention(query, cache, block_table, seq_lens,
 *                            query_start_loc[, alibi][, key, value, slots])
 *     -> (out[, cache])
 * with f32 attributes scale and soft_cap, i32 window, has_alibi and
 * has_write: query and out float32 [T, H, D], cache float32 or bfloat16
 * [N, KH, BS, 2D], the index operands int32, alibi float32 [H]; with
 * has_write, key and value [M, KH, D] in the cache's dtype and slots int32
 * [M] are written first, into the cache result, aliased to the cache
 * operand. kernels/paged_attention.h says the rest. */
#ifndef TPU_KERNELS_KERNELS_H_
#define TPU_KERNELS_KERNELS_H_

#include <stdbool.h>
#include <stddef.h>

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel bits. TPU_KERNEL_MATMUL_BF16 is no kernel of its own: registering
 * matmul sets it too where the CPU has the bfloat16 inner kernel. */
enum { TPU_KERNEL_ATTENTION = 1u << 0, TPU_KERNEL_MATMUL = 1u << 1, TPU_KERNEL_MATMUL_BF16 = 1u << 2 };
enum { TPU_KERNEL_PAGED_ATTENTION = 1u << 4 };
/* Not a kernel to choose: the boundary between two eager calls in one fused
 * program, registered on the CPU plugin whatever TORCHTPU_KERNELS says.
 *   torchtpu_boundary(x_1..x_n, keep...) -> (x_1..x_n)
 * (any dtypes and shapes, result i aliased to x_i; the other operands are
 * only kept alive until then, see tpu_program_end_call): XLA neither
 * fuses across it nor sees through it, so the next call reads x as a buffer
 * in the default layout, as strict eager's program reads its parameter. */
enum { TPU_KERNEL_BOUNDARY = 1u << 3 };
#define TPU_KERNEL_BOUNDARY_CALL "torchtpu_boundary"

#define TPU_KERNEL_ATTENTION_FWD "torchtpu_attention_fwd"
#define TPU_KERNEL_ATTENTION_BWD "torchtpu_attention_bwd"
#define TPU_KERNEL_MATMUL_CALL "torchtpu_matmul"
#define TPU_KERNEL_GROUPED_MATMUL_CALL "torchtpu_grouped_matmul"
#define TPU_KERNEL_PAGED_ATTENTION_CALL "torchtpu_paged_attention"

/* The TPU_KERNEL_* bits a TORCHTPU_KERNELS setting names: "1", "on" or
 * "all" every kernel, "0", "off" or "none" none, else a comma-separated list
 * of kernel names (attention, paged_attention, matmul). False, with *out_bits 0, when a name is
 * unknown. */
bool tpu_kernels_select(const char *setting, unsigned *out_bits);

/* Writes the names of kernels |bits| into |buf| (|cap| bytes, cut short
 * if need be), with the instruction set of those that depend on the CPU's:
 * "attention, matmul (AVX-512)"; "" for none. */
void tpu_kernels_describe(unsigned bits, char *buf, size_t cap);

/* Registers those of the |wanted| kernels that |rt|'s platform runs (the CPU
 * plugin's), and the boundary, and returns their TPU_KERNEL_* bits; 0 on
 * other platforms or when the plugin cannot take them. Call once, before
 * compiling programs. */
unsigned tpu_kernels_register(tpu_runtime *rt, unsigned wanted);

#ifdef __cplusplus
}
#endif

#endif /* TPU_KERNELS_KERNELS_H_ */
