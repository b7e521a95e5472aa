/* Hand-written paged attention for host (CPU) devices: one ragged call over
 * a batch that mixes prefills, chunked prefills and decodes, reading keys
 * and values through vLLM's block tables, in float32 over a float32 or
 * bfloat16 cache.
 *
 * Layouts are dense row-major: query and out [T, H, D]; cache [N, KH, BS,
 * 2D] (a token's key is the first half of its row, its value the second);
 * block_table [R, W] (block ids, W per request); seq_lens [R] (keys per
 * request, the step's own tokens included); query_start_loc [R + 1] (request
 * r's queries are tokens query_start_loc[r] .. query_start_loc[r + 1] - 1).
 * Query i of a request of q queries and s keys sits at position s - q + i
 * and sees the keys j with j <= position (causal), and, with |window| > 0,
 * position - window < j; keys past W * BS are not seen. Query head h reads
 * key head h / (H / KH) (grouped-query attention). A score is scale * q.k,
 * then soft_cap * tanh(score / soft_cap) where soft_cap > 0, then plus
 * alibi[h] * (j - position) where |alibi| is not NULL. Tokens past the last
 * request's queries, and queries that see no key, get rows of zeros. Block
 * ids are clamped into [0, N), as XLA's gather clamps them.
 *
 * tpu_paged_attention: work is split into independent tasks run through |par| (serial when NULL),
 * one per (8 tokens, key head). The function owns no threads, allocates
 * nothing and needs about 24 KiB of stack per task. The caller owns every
 * buffer. False (nothing written) when a shape is beyond the kernel:
 * head_dim over TPU_PAGED_MAX_HEAD_DIM. */
#ifndef TPU_KERNELS_PAGED_ATTENTION_H_
#define TPU_KERNELS_PAGED_ATTENTION_H_

#include <stdbool.h>
#include <stdint.h>

#include "kernels/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TPU_PAGED_MAX_HEAD_DIM = 512 };

typedef struct tpu_paged_shape {
  int64_t tokens, heads, kv_heads, head_dim;     /* T, H, KH, D */
  int64_t blocks, block_size, requests, width;   /* N, BS, R, W */
  bool bf16_cache;                               /* the cache holds bfloat16, else float32 */
} tpu_paged_shape;

typedef struct tpu_paged_params {
  float scale, soft_cap; /* soft_cap 0: none */
  int64_t window;        /* 0: none */
  const float *alibi;    /* [H] or NULL */
} tpu_paged_params;

/* Writes row t of |key| and of |value| ([M, KH, D], in the cache's dtype)
 * to slot slots[t] of |cache| (block slot / BS, offset slot % BS) for t <
 * |num_slots|; a slot outside the cache (-1 for a padding token) writes
 * nothing, as XLA's scatter drops it. */
void tpu_paged_cache_write(const tpu_paged_shape *s, const void *key, const void *value, const int32_t *slots,
                           int64_t num_slots, void *cache);

bool tpu_paged_attention(const tpu_paged_shape *s, const tpu_paged_params *p, const float *query,
                         const void *cache, const int32_t *block_table, const int32_t *seq_lens,
                         const int32_t *query_start_loc, float *out, const tpu_parallel *par);

#ifdef __cplusplus
}
#endif

#endif /* TPU_KERNELS_PAGED_ATTENTION_H_ */
