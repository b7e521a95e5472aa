/* Factorizations and the solves built on them: Cholesky (linalg_cholesky_ex,
 * cholesky, cholesky_inverse, _cholesky_solve_helper) and triangular solves
 * (linalg_solve_triangular, triangular_solve), on stablehlo.cholesky and
 * stablehlo.triangular_solve.
 *
 * Matrices are the last two dims; the leading ones are a batch, broadcast
 * to the output's batch where PyTorch broadcasts. stablehlo.cholesky leaves
 * the other triangle unspecified, so it is zeroed; a matrix that is not
 * positive-definite comes out with NaN from the failing column on, which
 * gives LAPACK's info (the order of the first failing leading minor). */
#include <stdio.h>

#include "lower/rules.h"

/* The transpose of each matrix of |x|, conjugated if |adjoint| (and complex). */
static tpu_hlo_value mT(tpu_lower_ctx *c, tpu_hlo_value x, bool adjoint) {
  int rank = tpu_hlo_rank(B, x);
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int d = 0; d < rank; d++) perm[d] = d;
  perm[rank - 2] = rank - 1;
  perm[rank - 1] = rank - 2;
  x = tpu_hlo_transpose(B, x, perm);
  if (!adjoint || !tpu_dtype_is_complex(tpu_hlo_dtype(B, x))) return x;
  return tpu_hlo_binary(B, TPU_HLO_COMPLEX, un(c, TPU_HLO_REAL, x), neg(c, un(c, TPU_HLO_IMAG, x)));
}

/* i1 of |t|'s shape: true where col - row >= |from| (|upper|) or col - row <= |from|. */
static tpu_hlo_value triangle(tpu_lower_ctx *c, const tpu_hlo_type *t, bool upper, int64_t from) {
  tpu_hlo_type it = *t;
  it.dtype = TPU_S64;
  tpu_hlo_value diff = sub(c, tpu_hlo_iota(B, &it, t->rank - 1), tpu_hlo_iota(B, &it, t->rank - 2));
  return cmp(c, upper ? TPU_HLO_GE : TPU_HLO_LE, diff, tpu_hlo_const_i64(B, &it, from));
}

/* |x| with the elements outside the triangle replaced by zeros. */
static tpu_hlo_value keep_triangle(tpu_lower_ctx *c, tpu_hlo_value x, bool upper) {
  const tpu_hlo_type *t = tpu_hlo_type_of(B, x);
  tpu_hlo_type tt = *t;
  return sel(c, triangle(c, &tt, upper, 0), x, tpu_hlo_const_f64(B, &tt, 0.0));
}

/* Tensor argument |arg| as matrices of |dtype| with the batch |batch_of|
 * (whose last two dims are ignored). */
static tpu_hlo_value batched(tpu_lower_ctx *c, int arg, const tpu_hlo_type *batch_of, tpu_dtype_t dtype) {
  tpu_hlo_type t = *batch_of;
  t.dtype = dtype;
  t.dims[t.rank - 2] = c->args[arg].sizes[c->args[arg].rank - 2];
  t.dims[t.rank - 1] = c->args[arg].sizes[c->args[arg].rank - 1];
  return tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, arg), &t);
}

enum { NO_TRANSPOSE, TRANSPOSE, ADJOINT };

/* op(a) x = b (|left|) or x op(a) = b, a triangular; batches equal. */
static tpu_hlo_value tri_solve(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value b, bool left, bool lower, bool unit,
                               int transpose) {
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

/* The lower Cholesky factor of |a| (zeros above the diagonal). */
static tpu_hlo_value cholesky_lower(tpu_lower_ctx *c, tpu_hlo_value a) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, a);
  tpu_hlo_value l;
  tpu_hlo_op(B, "stablehlo.cholesky", &a, 1, NULL, 0, "lower = true", &t, 1, &l);
  return keep_triangle(c, l, false);
}

/* LAPACK's info for the lower factor |l|: 1 + the index of the first
 * diagonal element that is not positive (NaN included), 0 if none; s32 per
 * matrix. */
static tpu_hlo_value cholesky_info(tpu_lower_ctx *c, tpu_hlo_value l) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, l);
  int64_t n = t.dims[t.rank - 1];
  tpu_hlo_type it = t;
  it.dtype = TPU_S32;
  tpu_hlo_value on_diag = triangle(c, &t, true, 0);
  on_diag = and_(c, on_diag, triangle(c, &t, false, 0));
  tpu_hlo_value d = tpu_dtype_is_complex(t.dtype) ? un(c, TPU_HLO_REAL, l) : l;
  const tpu_hlo_type *dt = tpu_hlo_type_of(B, d);
  tpu_hlo_type rt = *dt;
  tpu_hlo_value bad = and_(c, on_diag, tpu_hlo_unary(B, TPU_HLO_NOT, cmp(c, TPU_HLO_GT, d, tpu_hlo_const_f64(B, &rt, 0.0))));
  tpu_hlo_value order = add(c, tpu_hlo_iota(B, &it, t.rank - 1), tpu_hlo_const_i64(B, &it, 1));
  tpu_hlo_value first = sel(c, bad, order, tpu_hlo_const_i64(B, &it, n + 1));
  int64_t dims[2] = {t.rank - 2, t.rank - 1};
  first = tpu_hlo_reduce_simple(B, first, tpu_hlo_scalar_i64(B, TPU_S32, n + 1), TPU_HLO_MIN, dims, 2);
  tpu_hlo_type ft = *tpu_hlo_type_of(B, first);
  tpu_hlo_value none = cmp(c, TPU_HLO_EQ, first, tpu_hlo_const_i64(B, &ft, n + 1));
  return sel(c, none, tpu_hlo_const_i64(B, &ft, 0), first);
}

/* linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info);
 * cholesky(self, upper) -> L */
static tpu_status_t cholesky_rule(tpu_lower_ctx *c) {
  tpu_hlo_value l = cholesky_lower(c, tpu_lower_tensor(c, 0));
  tpu_hlo_value info = cholesky_info(c, l);
  bool ex = c->num_outputs > 1;
  if (!ex || tpu_lower_bool(c, 2, false)) {
    tpu_hlo_type it = *tpu_hlo_type_of(B, info);
    int64_t all[TPU_HLO_MAX_RANK];
    for (int d = 0; d < it.rank; d++) all[d] = d;
    tpu_hlo_value worst = tpu_hlo_reduce_simple(B, info, tpu_hlo_scalar_i64(B, it.dtype, 0), TPU_HLO_MAX, all, it.rank);
    tpu_lower_require(c, cmp(c, TPU_HLO_EQ, worst, tpu_hlo_scalar_i64(B, it.dtype, 0)), TPU_ERR_RUNTIME,
                      ex ? "linalg.cholesky_ex: The factorization could not be completed because the input is not "
                           "positive-definite."
                         : "cholesky: The factorization could not be completed because the input is not "
                           "positive-definite.");
  }
  tpu_lower_set_output(c, 0, tpu_lower_bool(c, 1, false) ? mT(c, l, true) : l);
  if (ex) tpu_lower_set_output(c, 1, info);
  return NULL;
}

/* The solution of (L L^H) x = b, or (U^H U) x = b if |upper|, for the factor |f|. */
static tpu_hlo_value cholesky_solve(tpu_lower_ctx *c, tpu_hlo_value f, tpu_hlo_value b, bool upper) {
  tpu_hlo_value y = tri_solve(c, f, b, true, !upper, false, upper ? ADJOINT : NO_TRANSPOSE);
  return tri_solve(c, f, y, true, !upper, false, upper ? NO_TRANSPOSE : ADJOINT);
}

/* _cholesky_solve_helper(self, A, upper) */
static tpu_status_t cholesky_solve_rule(tpu_lower_ctx *c) {
  tpu_hlo_value f = batched(c, 1, OUT, OUT->dtype);
  return done(c, cholesky_solve(c, f, batched(c, 0, OUT, OUT->dtype), tpu_lower_bool(c, 2, false)));
}

/* The identity matrices of type |t|. */
static tpu_hlo_value identity(tpu_lower_ctx *c, const tpu_hlo_type *t) {
  tpu_hlo_type tt = *t;
  tpu_hlo_value eye = and_(c, triangle(c, &tt, true, 0), triangle(c, &tt, false, 0));
  return sel(c, eye, tpu_hlo_const_f64(B, &tt, 1.0), tpu_hlo_const_f64(B, &tt, 0.0));
}

/* cholesky_inverse(self, upper) */
static tpu_status_t cholesky_inverse_rule(tpu_lower_ctx *c) {
  tpu_hlo_value f = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype);
  return done(c, cholesky_solve(c, f, identity(c, OUT), tpu_lower_bool(c, 1, false)));
}

/* linalg_solve_triangular(self, B, *, upper, left, unitriangular) */
static tpu_status_t solve_triangular_rule(tpu_lower_ctx *c) {
  bool upper = tpu_lower_bool(c, 2, false), left = tpu_lower_bool(c, 3, true);
  tpu_hlo_value a = batched(c, 0, OUT, OUT->dtype), b = batched(c, 1, OUT, OUT->dtype);
  return done(c, tri_solve(c, a, b, left, !upper, tpu_lower_bool(c, 4, false), NO_TRANSPOSE));
}

/* triangular_solve(self, A, upper, transpose, unitriangular) -> (solution, cloned_coefficient) */
static tpu_status_t triangular_solve_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = batched(c, 1, OUT, OUT->dtype), b = batched(c, 0, OUT, OUT->dtype);
  bool upper = tpu_lower_bool(c, 2, true), transpose = tpu_lower_bool(c, 3, false);
  tpu_lower_set_output(c, 0, tri_solve(c, a, b, true, !upper, tpu_lower_bool(c, 4, false),
                                       transpose ? TRANSPOSE : NO_TRANSPOSE));
  tpu_lower_set_output(c, 1, a);
  return NULL;
}

const tpu_lower_rule tpu_rules_factor[] = {
    {{"linalg_cholesky_ex", "linalg_cholesky_ex.L"}, cholesky_rule, 0, 0},
    {{"cholesky", "cholesky.out"}, cholesky_rule, 0, 0},
    {{"_cholesky_solve_helper", "_cholesky_solve_helper.out"}, cholesky_solve_rule, 0, 0},
    {{"cholesky_inverse", "cholesky_inverse.out"}, cholesky_inverse_rule, 0, 0},
    {{"linalg_solve_triangular", "linalg_solve_triangular.out"}, solve_triangular_rule, 0, 0},
    {{"triangular_solve", "triangular_solve.X"}, triangular_solve_rule, 0, 0},
};
TPU_COUNT_RULES(factor);
