/* Hand-written scaled dot-product attention for host (CPU) devices: the
 * forward pass and its gradients, in float32, over blocks of queries and
 * keys that never materialize more than a row block of scores.
 *
 * Layouts are dense row-major: q [B, H, T, D], k [B, H, S, D], v [B, H, S, E],
 * bias [B, H, T, S] (additive, NULL for none), out and dout [B, H, T, E],
 * lse [B, H, T]; dq, dk, dv as q, k, v. With |token_major| q, k, v, out,
 * dout, dq, dk and dv are [B, T, H, D] (and so on) instead: the layout of a
 * projection viewed as heads, which then needs no transposes; bias and lse
 * keep theirs. With |causal|, query i sees keys j <= i (PyTorch's
 * is_causal: the mask is anchored at the top left). Scores are
 * scale * q.k + bias; lse is the natural log-sum-exp of a query's allowed
 * scores. A query that sees no key (all masked, or -inf bias everywhere) has
 * an output row of zeros and lse -inf, as PyTorch's safe softmax gives, and
 * zero gradients.
 *
 * Work is split into independent tasks run through |par| (serial when NULL):
 * the forward one per (batch, head, 64 queries), the backward one per
 * (batch, head). The functions own no threads and allocate nothing; a task
 * needs up to about 52 KiB of stack. The caller owns every buffer. */
#ifndef TPU_KERNELS_ATTENTION_H_
#define TPU_KERNELS_ATTENTION_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernels/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_attention_shape {
  int64_t batch, heads, q_len, kv_len, head_dim, v_dim; /* B, H, T, S, D, E */
  bool token_major;
} tpu_attention_shape;

void tpu_attention_forward(const tpu_attention_shape *s, const float *q, const float *k, const float *v,
                           const float *bias, bool causal, float scale, float *out, float *lse,
                           const tpu_parallel *par);

/* dq, dk, dv as q, k, v; dbias (NULL when not wanted) as bias: the gradient
 * of the scores. */
void tpu_attention_backward(const tpu_attention_shape *s, const float *q, const float *k, const float *v,
                            const float *bias, const float *out, const float *lse, const float *dout,
                            bool causal, float scale, float *dq, float *dk, float *dv, float *dbias,
                            const tpu_parallel *par);

#ifdef __cplusplus
}
#endif

#endif /* TPU_KERNELS_ATTENTION_H_ */
