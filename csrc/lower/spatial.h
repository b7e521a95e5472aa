/* Helpers the convolution, pooling and resampling families (conv.c, pool.c,
 * resample.c) share: their argument lists and compute types. Private to
 * csrc/lower. */
#ifndef TPU_LOWER_SPATIAL_H_
#define TPU_LOWER_SPATIAL_H_

#include "lower/rules.h"

/* An int list argument expanded to |n| values: one value is repeated, an
 * empty list takes |dflt| (pooling's stride defaults to the kernel size). */
static inline void int_list(const tpu_lower_ctx *c, int arg, int n, const int64_t *dflt, int64_t *out) {
  const tpu_lower_arg *a = &c->args[arg];
  for (int i = 0; i < n; i++)
    out[i] = a->kind != TPU_ARG_INT_LIST ? a->i : a->n == 0 ? dflt[i] : a->ints[a->n == 1 ? 0 : i];
}

static inline bool is_float(tpu_dtype_t t) { return t == TPU_F16 || t == TPU_BF16 || t == TPU_F32 || t == TPU_F64; }

/* |t| with the compute dtype of its own dtype. */
static inline tpu_hlo_type opmath_type(const tpu_hlo_type *t) { return with_dtype(t, tpu_lower_opmath(t->dtype)); }

/* x contracted along dim |d| with the windows matrix m (out x in, or in x
 * out when |backward|), the new dim put back in place. */
static inline tpu_hlo_value along(tpu_lower_ctx *c, tpu_hlo_value x, int d, tpu_hlo_value m, bool backward) {
  int rank = tpu_hlo_rank(B, x);
  tpu_hlo_dot_dims dd = {.num_contract = 1, .lhs_contract = {d}, .rhs_contract = {backward ? 0 : 1}};
  tpu_hlo_value r = tpu_hlo_dot_general(B, x, m, &dd, tpu_hlo_dtype(B, x), TPU_HLO_PRECISION_HIGHEST);
  /* the dot puts the new dim last */
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int i = 0, k = 0; i < rank; i++) perm[i] = i == d ? rank - 1 : k++;
  return tpu_hlo_transpose(B, r, perm);
}

#endif /* TPU_LOWER_SPATIAL_H_ */
