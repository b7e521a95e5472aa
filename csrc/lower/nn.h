/* Helpers the neural-network families (norm.c, loss.c, nn.c) share: shapes,
 * sums and broadcasts over dims, PyTorch's reduction codes. Private to
 * csrc/lower. */
#ifndef TPU_LOWER_NN_H_
#define TPU_LOWER_NN_H_

#include "lower/rules.h"

#define MAXR TPU_HLO_MAX_RANK

enum { REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM }; /* at::Reduction */

/* Tensor argument |i|'s shape with element type |dtype|. */
static inline tpu_hlo_type arg_type(const tpu_lower_ctx *c, int i, tpu_dtype_t dtype) {
  return tpu_hlo_make_type(dtype, c->args[i].rank, c->args[i].sizes);
}

static inline bool wanted(const tpu_lower_ctx *c, int out) { return c->out_types[out].dtype != TPU_INVALID; }

static inline tpu_hlo_value sum(tpu_lower_ctx *c, tpu_hlo_value x, const int64_t *dims, int n) {
  return tpu_lower_reduce(B, x, TPU_HLO_ADD, dims, n);
}

static inline tpu_hlo_value sum_all(tpu_lower_ctx *c, tpu_hlo_value x) {
  int64_t dims[MAXR];
  int n = tpu_hlo_rank(B, x);
  for (int i = 0; i < n; i++) dims[i] = i;
  return sum(c, x, dims, n);
}

/* True when every element of the i1 value |ok| is. */
static inline tpu_hlo_value all(tpu_lower_ctx *c, tpu_hlo_value ok) {
  int64_t dims[MAXR];
  int n = tpu_hlo_rank(B, ok);
  for (int i = 0; i < n; i++) dims[i] = i;
  return tpu_lower_reduce(B, ok, TPU_HLO_AND, dims, n);
}

/* |r|, a value of |to|'s shape reduced over |dims|, broadcast back to it. */
static inline tpu_hlo_value expand(tpu_lower_ctx *c, tpu_hlo_value r, const tpu_hlo_type *to, const int64_t *dims, int n) {
  int64_t kept[MAXR];
  int m = 0;
  for (int i = 0, j = 0; i < to->rank; i++) {
    if (j < n && dims[j] == i) j++;
    else kept[m++] = i;
  }
  return tpu_hlo_broadcast_in_dim(B, r, to, kept);
}

/* A per-channel vector broadcast along dim |dim| of |to|. */
static inline tpu_hlo_value along(tpu_lower_ctx *c, tpu_hlo_value v, const tpu_hlo_type *to, int dim) {
  int64_t d = dim;
  return tpu_hlo_broadcast_in_dim(B, v, to, &d);
}

/* Dims [from, to) into |dims|; returns how many. */
static inline int dim_range(int64_t *dims, int from, int to) {
  int n = 0;
  for (int i = from; i < to; i++) dims[n++] = i;
  return n;
}

static inline int64_t count_of(const tpu_hlo_type *t, const int64_t *dims, int n) {
  int64_t count = 1;
  for (int i = 0; i < n; i++) count *= t->dims[dims[i]];
  return count;
}

/* Sets an output PyTorch leaves empty or unread (eval-mode save_mean, the
 * reserve) to zeros. */
static inline void set_zeros(tpu_lower_ctx *c, int out) {
  if (wanted(c, out)) tpu_lower_set_output(c, out, tpu_hlo_const_f64(B, &c->out_types[out], 0.0));
}

#endif /* TPU_LOWER_NN_H_ */
