/* Hand-written float32 matrix products for host (CPU) devices: C = op(A) op(B)
 * for every operand layout, the way BLAS does them (packed panels, a
 * register-tiled inner kernel), so that a product costs the same whichever
 * operand is transposed. With |bf16| the operands are bfloat16 and C float32
 * (products of bfloat16 pairs summed in float32, on AVX-512 BF16 CPUs).
 *
 * Layouts are dense row-major, |batch| products one after another:
 * A [M, K], or [K, M] with |lhs_t|; B [K, N], or [N, K] with |rhs_t|;
 * C [M, N]; |bias| NULL, or N floats added to every row of each C after the
 * sum (F.linear's bias). K == 0 gives zeros (or the bias).
 *
 * Work runs as independent tasks through |par| (serial when NULL); a task
 * needs about 48 KiB of stack. The function allocates its packing scratch
 * (B's size for one product, for several small ones up to 64 MiB) and
 * returns false, writing nothing, when it cannot; the caller owns every
 * buffer. */
#ifndef TPU_KERNELS_MATMUL_H_
#define TPU_KERNELS_MATMUL_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernels/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_matmul_shape {
  int64_t batch, m, n, k;
  bool lhs_t, rhs_t;
  bool bf16; /* A and B are bfloat16 (C and the bias stay float32) */
} tpu_matmul_shape;

/* The widest instruction set the kernel may use (TORCHTPU_MATMUL_ISA, as
 * oneDNN's ONEDNN_MAX_CPU_ISA): for tests and A/B runs of the narrower
 * kernels on a wider CPU. Process-wide; set before products run. */
typedef enum tpu_matmul_isa_cap {
  TPU_MATMUL_ISA_ANY = 0,   /* the widest the CPU has */
  TPU_MATMUL_ISA_AVX512 = 1, /* AVX-512 without the bfloat16 path */
  TPU_MATMUL_ISA_AVX2 = 2,
} tpu_matmul_isa_cap;
void tpu_matmul_set_isa_cap(tpu_matmul_isa_cap cap);

/* True when this CPU has an inner kernel (x86-64 with AVX2 and FMA, or
 * AVX-512); without one the products are better left to XLA. */
bool tpu_matmul_available(void);

/* True when bfloat16 operands have an inner kernel here (AVX-512 BF16). */
bool tpu_matmul_bf16_available(void);

/* The inner kernel's instruction set ("AVX-512", "AVX-512 + BF16", "AVX2";
 * a static string), NULL without one. */
const char *tpu_matmul_isa(void);

/* |a| and |b| are float, or uint16_t bfloat16 bits with s->bf16 (false,
 * writing nothing, when this CPU has no bfloat16 kernel). */
bool tpu_matmul(const tpu_matmul_shape *s, const void *a, const void *b, const float *bias, float *c,
                const tpu_parallel *par);

#ifdef __cplusplus
}
#endif

#endif /* TPU_KERNELS_MATMUL_H_ */
