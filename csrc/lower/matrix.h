/* Matrix helpers of the factorization families (factor.c, svd.c, ldl.c,
 * qr.c, eig.c): matrices are the last two dims of a value, the leading ones
 * a batch; per-matrix scalars and vectors keep size-1 dims ([batch, 1, 1],
 * [batch, 1, k]) so that they broadcast against the matrices by NumPy rules.
 * Private to csrc/lower. */
#ifndef TPU_LOWER_MATRIX_H_
#define TPU_LOWER_MATRIX_H_

#include <stdio.h>

#include "lower/rules.h"

/* The conjugate of |x| (the identity for real types). */
static inline tpu_hlo_value conj_of(tpu_lower_ctx *c, tpu_hlo_value x) {
  if (!tpu_dtype_is_complex(tpu_hlo_dtype(B, x))) return x;
  return tpu_hlo_binary(B, TPU_HLO_COMPLEX, un(c, TPU_HLO_REAL, x), neg(c, un(c, TPU_HLO_IMAG, x)));
}

/* The transpose of each matrix of |x|, conjugated if |adjoint| (and complex). */
static inline tpu_hlo_value mT(tpu_lower_ctx *c, tpu_hlo_value x, bool adjoint) {
  int rank = tpu_hlo_rank(B, x);
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int d = 0; d < rank; d++) perm[d] = d;
  perm[rank - 2] = rank - 1;
  perm[rank - 1] = rank - 2;
  x = tpu_hlo_transpose(B, x, perm);
  return adjoint ? conj_of(c, x) : x;
}

/* |x| (real) as |like|'s dtype (complex with zero imaginary part). */
static inline tpu_hlo_value as_type_of(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value like) {
  return tpu_hlo_convert(B, x, tpu_hlo_dtype(B, like));
}

/* i1 of |t|'s shape: true where col - row >= |from| (|upper|) or col - row <= |from|. */
static inline tpu_hlo_value triangle(tpu_lower_ctx *c, const tpu_hlo_type *t, bool upper, int64_t from) {
  tpu_hlo_type it = *t;
  it.dtype = TPU_S64;
  tpu_hlo_value diff = sub(c, tpu_hlo_iota(B, &it, t->rank - 1), tpu_hlo_iota(B, &it, t->rank - 2));
  return cmp(c, upper ? TPU_HLO_GE : TPU_HLO_LE, diff, tpu_hlo_const_i64(B, &it, from));
}

/* |x| with the elements outside the triangle replaced by zeros. */
static inline tpu_hlo_value keep_triangle(tpu_lower_ctx *c, tpu_hlo_value x, bool upper) {
  const tpu_hlo_type *t = tpu_hlo_type_of(B, x);
  tpu_hlo_type tt = *t;
  return sel(c, triangle(c, &tt, upper, 0), x, tpu_hlo_const_f64(B, &tt, 0.0));
}

enum { NO_TRANSPOSE, TRANSPOSE, ADJOINT };

/* op(a) x = b (|left|) or x op(a) = b, a triangular; batches equal. */
static inline tpu_hlo_value tri_solve(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value b, bool left, bool lower,
                                      bool unit, int transpose) {
  static const char *const mode[] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "left_side = %s, lower = %s, unit_diagonal = %s, transpose_a = #stablehlo<transpose %s>",
           left ? "true" : "false", lower ? "true" : "false", unit ? "true" : "false", mode[transpose]);
  tpu_hlo_type t = *tpu_hlo_type_of(B, b);
  tpu_hlo_value operands[2] = {a, b}, x;
  tpu_hlo_op(B, "stablehlo.triangular_solve", operands, 2, NULL, 0, attrs, &t, 1, &x);
  return x;
}

/* The identity matrices of type |t|. */
static inline tpu_hlo_value identity(tpu_lower_ctx *c, const tpu_hlo_type *t) {
  tpu_hlo_type tt = *t;
  tpu_hlo_value eye = and_(c, triangle(c, &tt, true, 0), triangle(c, &tt, false, 0));
  return sel(c, eye, tpu_hlo_const_f64(B, &tt, 1.0), tpu_hlo_const_f64(B, &tt, 0.0));
}

/* |x| (rank 0 or NumPy-broadcastable) spread to |t|'s shape, keeping its dtype. */
static inline tpu_hlo_value spread(tpu_lower_ctx *c, tpu_hlo_value x, const tpu_hlo_type *t) {
  tpu_hlo_type to = *t;
  to.dtype = tpu_hlo_dtype(B, x);
  return tpu_hlo_broadcast_to(B, x, &to);
}

/* |x| with |extra| slices of the rank-0 |fill| added at the end of |dim|. */
static inline tpu_hlo_value pad_end(tpu_lower_ctx *c, tpu_hlo_value x, int dim, int64_t extra, tpu_hlo_value fill) {
  if (extra == 0) return x;
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0}, in[TPU_HLO_MAX_RANK] = {0};
  hi[dim] = extra;
  return tpu_hlo_pad(B, x, fill, lo, hi, in);
}

/* s64 indices along |dim| of |x|'s shape. */
static inline tpu_hlo_value index_along(tpu_lower_ctx *c, tpu_hlo_value x, int dim) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  t.dtype = TPU_S64;
  return tpu_hlo_iota(B, &t, dim);
}

/* |x| reduced over |dim| with |op|, the dim kept as size 1. */
static inline tpu_hlo_value reduce_keep(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_binary_t op, int dim) {
  int rank = tpu_hlo_rank(B, x);
  int64_t d = dim;
  return tpu_lower_keepdim(B, tpu_lower_reduce(B, x, op, &d, 1), rank, &d, 1);
}

/* The element of |x| at index |k| (a value) of |dim|, the dim kept as size 1. */
static inline tpu_hlo_value pick(tpu_lower_ctx *c, tpu_hlo_value x, int dim, tpu_hlo_value k) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  tpu_hlo_value starts[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) starts[d] = d == dim ? k : tpu_hlo_scalar_i64(B, TPU_S64, 0);
  t.dims[dim] = 1;
  return tpu_hlo_dynamic_slice(B, x, starts, t.dims);
}

/* The slices of |x| along |dim| where |pred| holds, summed: the one selected slice. */
static inline tpu_hlo_value row_where(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value pred, int dim) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  return reduce_keep(c, sel(c, pred, x, tpu_hlo_const_f64(B, &t, 0.0)), TPU_HLO_ADD, dim);
}

/* Output |i| from a state vector with size-1 dims (pivots, info). */
static inline void set_vector(tpu_lower_ctx *c, int i, tpu_hlo_value v) {
  if (c->out_types[i].dtype == TPU_INVALID) return;
  tpu_lower_set_output(c, i, tpu_hlo_reshape(B, v, c->out_types[i].rank, c->out_types[i].dims));
}

/* x @ y for matrices with equal batches, exact for permutation matrices. */
static inline tpu_hlo_value matmul(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) {
  int r = tpu_hlo_rank(B, x);
  tpu_hlo_dot_dims d = {.num_batch = r - 2, .num_contract = 1, .lhs_contract = {r - 1}, .rhs_contract = {r - 2}};
  for (int i = 0; i < r - 2; i++) d.lhs_batch[i] = d.rhs_batch[i] = i;
  return tpu_hlo_dot_general(B, x, y, &d, tpu_hlo_dtype(B, x), TPU_HLO_PRECISION_HIGHEST);
}

/* The squared norm of each column of |x|, kept as [batch, 1, n] (real). */
static inline tpu_hlo_value column_norm2(tpu_lower_ctx *c, tpu_hlo_value x) {
  tpu_hlo_value mag = un(c, TPU_HLO_ABS, x);
  return reduce_keep(c, mul(c, mag, mag), TPU_HLO_ADD, tpu_hlo_rank(B, x) - 2);
}

/* |x| (s64: rank 0, or per-matrix) plus |k|. */
static inline tpu_hlo_value plus_i(tpu_lower_ctx *c, tpu_hlo_value x, int64_t k) {
  return add(c, x, tpu_hlo_const_i64(B, tpu_hlo_type_of(B, x), k));
}

/* Asks for info == 0 everywhere when argument |arg| (check_errors) is set,
 * or always for |arg| -1. */
static inline void check_info(tpu_lower_ctx *c, int arg, tpu_hlo_value info, const char *message) {
  if (arg >= 0 && !tpu_lower_bool(c, arg, false)) return;
  tpu_hlo_type t = *tpu_hlo_type_of(B, info);
  int64_t all[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) all[d] = d;
  tpu_hlo_value worst = tpu_lower_reduce(B, info, TPU_HLO_MAX, all, t.rank); /* the type's minimum if empty */
  tpu_lower_require(c, cmp(c, TPU_HLO_LE, worst, tpu_hlo_scalar_i64(B, t.dtype, 0)), TPU_ERR_RUNTIME, message);
}

/* Vector argument |arg| ([batch, k]) as [batch, 1, k] of |dtype|. */
static inline tpu_hlo_value vector_arg(tpu_lower_ctx *c, int arg, tpu_dtype_t dtype) {
  const tpu_lower_arg *a = &c->args[arg];
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int d = 0; d < a->rank - 1; d++) dims[d] = a->sizes[d];
  dims[a->rank - 1] = 1;
  dims[a->rank] = a->sizes[a->rank - 1];
  return tpu_hlo_reshape(B, tpu_hlo_convert(B, tpu_lower_tensor(c, arg), dtype), a->rank + 1, dims);
}

/* Argument |arg| (pivots, s32 [batch, k]) as s64 [batch, 1, k]. */
static inline tpu_hlo_value pivots_arg(tpu_lower_ctx *c, int arg) { return vector_arg(c, arg, TPU_S64); }

/* One-sided Jacobi SVD of |a| ([batch, m, n], m >= n), in svd.c: |out|
 * receives the singular values ([batch, 1, n]), W = A V (columns U S) and
 * V, largest singular value first. */
void tpu_lower_jacobi_svd(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value *out);

#endif /* TPU_LOWER_MATRIX_H_ */
