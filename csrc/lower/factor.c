/* Factorizations and what is built on them: triangular solves
 * (linalg_solve_triangular, triangular_solve, on stablehlo.triangular_solve);
 * Cholesky (linalg_cholesky_ex, cholesky, cholesky_inverse,
 * _cholesky_solve_helper); LU with partial pivoting (linalg_lu_factor_ex,
 * linalg_lu, lu_unpack, linalg_lu_solve, _linalg_det, _linalg_slogdet,
 * linalg_inv_ex, _linalg_solve_ex); matrix_exp; SVD and Hermitian
 * eigendecomposition by Jacobi rotations (_linalg_svd, _linalg_eigh);
 * Householder QR (linalg_qr, linalg_householder_product, ormqr); and the
 * Bunch-Kaufman LDL factorization and solve (torchtpu::ldl_factor,
 * linalg_ldl_solve). General eigenproblems are eig.c's.
 *
 * The plugin has no LAPACK, so the factorizations are loops written in HLO
 * (a stablehlo.while over columns or rotations), following LAPACK's
 * conventions where PyTorch exposes them (pivots and info, the signs of R).
 * Matrices are the last two dims; the leading ones are a batch, broadcast
 * to the output's batch where PyTorch broadcasts. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>

#include "lower/matrix.h"

/* Tensor argument |arg| as matrices of |dtype| with the batch |batch_of|
 * (whose last two dims are ignored). */
static tpu_hlo_value batched(tpu_lower_ctx *c, int arg, const tpu_hlo_type *batch_of, tpu_dtype_t dtype) {
  tpu_hlo_type t = *batch_of;
  t.dtype = dtype;
  t.dims[t.rank - 2] = c->args[arg].sizes[c->args[arg].rank - 2];
  t.dims[t.rank - 1] = c->args[arg].sizes[c->args[arg].rank - 1];
  return tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, arg), &t);
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

/* |x| (s64) plus |k|. */
static tpu_hlo_value plus_i(tpu_lower_ctx *c, tpu_hlo_value x, int64_t k) {
  return add(c, x, tpu_hlo_const_i64(B, tpu_hlo_type_of(B, x), k));
}

/* --- loops ---------------------------------------------------------------------
 * A factorization is a loop (tpu_lower_loop) whose body is one step (a
 * column, a rotation); its state vectors keep size-1 dims (matrix.h). */

/* Asks for info == 0 everywhere when argument |arg| (check_errors) is set,
 * or always for |arg| -1. */
static void check_info(tpu_lower_ctx *c, int arg, tpu_hlo_value info, const char *message) {
  if (arg >= 0 && !tpu_lower_bool(c, arg, false)) return;
  tpu_hlo_type t = *tpu_hlo_type_of(B, info);
  int64_t all[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) all[d] = d;
  tpu_hlo_value worst = tpu_lower_reduce(B, info, TPU_HLO_MAX, all, t.rank); /* the type's minimum if empty */
  tpu_lower_require(c, cmp(c, TPU_HLO_LE, worst, tpu_hlo_scalar_i64(B, t.dtype, 0)), TPU_ERR_RUNTIME, message);
}

/* --- Cholesky ------------------------------------------------------------------ */

/* One column of potrf (right-looking). State: the matrices, info (s64
 * [batch, 1, 1]). A matrix stops changing at its first non-positive pivot
 * (NaN included), whose order is LAPACK's info. */
static void cholesky_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, s[0]), it = *tpu_hlo_type_of(B, s[1]);
  int r = t.rank;
  tpu_hlo_value col = pick(c, s[0], r - 1, k);
  tpu_hlo_type ct = *tpu_hlo_type_of(B, col), ci = ct;
  ci.dtype = TPU_S64;
  tpu_hlo_value d = un(c, TPU_HLO_REAL, pick(c, col, r - 2, k));
  tpu_hlo_type dt = *tpu_hlo_type_of(B, d);
  tpu_hlo_value fine = cmp(c, TPU_HLO_EQ, s[1], tpu_hlo_const_i64(B, &it, 0));
  tpu_hlo_value positive = cmp(c, TPU_HLO_GT, d, tpu_hlo_const_f64(B, &dt, 0.0));
  tpu_hlo_value failed = and_(c, fine, tpu_hlo_unary(B, TPU_HLO_NOT, positive));
  s[1] = sel(c, failed, add(c, spread(c, k, &it), tpu_hlo_const_i64(B, &it, 1)), s[1]);
  tpu_hlo_value l = as_type_of(c, un(c, TPU_HLO_SQRT, d), col);
  tpu_hlo_value crow = index_along(c, col, r - 2), kc = spread(c, k, &ci);
  tpu_hlo_value lc = sel(c, cmp(c, TPU_HLO_GT, crow, kc), dvd(c, col, spread(c, l, &ct)),
                         sel(c, cmp(c, TPU_HLO_EQ, crow, kc), spread(c, l, &ct), tpu_hlo_const_f64(B, &ct, 0.0)));
  tpu_hlo_type tt = t;
  tt.dtype = TPU_S64;
  tpu_hlo_value rows = index_along(c, s[0], r - 2), cols = index_along(c, s[0], r - 1), kk = spread(c, k, &tt);
  tpu_hlo_value trailing = and_(c, cmp(c, TPU_HLO_GT, rows, kk), cmp(c, TPU_HLO_GT, cols, kk));
  tpu_hlo_value outer = mul(c, spread(c, lc, &t), spread(c, mT(c, lc, true), &t));
  tpu_hlo_value next = sel(c, trailing, sub(c, s[0], outer), sel(c, cmp(c, TPU_HLO_EQ, cols, kk), spread(c, lc, &t), s[0]));
  s[0] = sel(c, spread(c, and_(c, fine, positive), &t), next, s[0]);
}

/* linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info);
 * cholesky(self, upper) -> L */
static tpu_status_t cholesky_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype);
  tpu_hlo_type it = *tpu_hlo_type_of(B, a);
  int r = it.rank;
  int64_t n = it.dims[r - 1];
  it.dtype = TPU_S64;
  it.dims[r - 2] = it.dims[r - 1] = 1;
  tpu_hlo_value s[2] = {a, tpu_hlo_const_i64(B, &it, 0)};
  tpu_lower_loop(c, n, 2, s, cholesky_step);
  tpu_hlo_value l = keep_triangle(c, s[0], false);
  bool ex = c->num_outputs > 1;
  check_info(c, ex ? 2 : -1, s[1],
             ex ? "linalg.cholesky_ex: The factorization could not be completed because the input is not "
                  "positive-definite."
                : "cholesky: The factorization could not be completed because the input is not positive-definite.");
  tpu_lower_set_output(c, 0, tpu_lower_bool(c, 1, false) ? mT(c, l, true) : l);
  if (ex) set_vector(c, 1, s[1]);
  return NULL;
}

/* --- LU with partial pivoting ------------------------------------------------
 * A right-looking elimination as LAPACK's getrf: the pivot is the first row
 * of largest |x| (|re| + |im| for complex), a zero pivot sets info and the
 * column is left unscaled. */

/* One column of getrf. State: the matrices, pivots (1-based, s64), info (s64). */
static void lu_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, s[0]);
  int r = t.rank;
  int64_t m = t.dims[r - 2];
  tpu_hlo_value rows = index_along(c, s[0], r - 2), cols = index_along(c, s[0], r - 1), kk = spread(c, k, &t);
  tpu_hlo_value col = pick(c, s[0], r - 1, k);
  tpu_hlo_value crow = index_along(c, col, r - 2);
  tpu_hlo_value mag = tpu_dtype_is_complex(t.dtype)
                          ? add(c, un(c, TPU_HLO_ABS, un(c, TPU_HLO_REAL, col)), un(c, TPU_HLO_ABS, un(c, TPU_HLO_IMAG, col)))
                          : un(c, TPU_HLO_ABS, col);
  tpu_hlo_type mt = *tpu_hlo_type_of(B, mag), ct = mt;
  ct.dtype = TPU_S64;
  mag = sel(c, cmp(c, TPU_HLO_GE, crow, spread(c, k, &ct)), mag, tpu_hlo_const_f64(B, &mt, -1.0));
  tpu_hlo_value hit = cmp(c, TPU_HLO_EQ, mag, spread(c, reduce_keep(c, mag, TPU_HLO_MAX, r - 2), &mt));
  tpu_hlo_value p = reduce_keep(c, sel(c, hit, crow, tpu_hlo_const_i64(B, &ct, m)), TPU_HLO_MIN, r - 2);
  const tpu_hlo_type pt = *tpu_hlo_type_of(B, p);
  p = sel(c, cmp(c, TPU_HLO_EQ, p, tpu_hlo_const_i64(B, &pt, m)), spread(c, k, &pt), p); /* NaN column */
  tpu_hlo_value at_k = cmp(c, TPU_HLO_EQ, rows, kk), at_p = cmp(c, TPU_HLO_EQ, rows, spread(c, p, &t));
  tpu_hlo_value row_k = row_where(c, s[0], at_k, r - 2), row_p = row_where(c, s[0], at_p, r - 2);
  tpu_hlo_value a = sel(c, at_k, spread(c, row_p, &t), sel(c, at_p, spread(c, row_k, &t), s[0]));
  tpu_hlo_value pivot = pick(c, row_p, r - 1, k);
  tpu_hlo_type vt = *tpu_hlo_type_of(B, pivot);
  tpu_hlo_value zero_pivot = cmp(c, TPU_HLO_EQ, pivot, tpu_hlo_const_f64(B, &vt, 0.0));
  tpu_hlo_value first_zero = and_(c, zero_pivot, cmp(c, TPU_HLO_EQ, s[2], tpu_hlo_const_i64(B, &pt, 0)));
  s[2] = sel(c, first_zero, add(c, spread(c, k, &pt), tpu_hlo_const_i64(B, &pt, 1)), s[2]);
  tpu_hlo_value l = pick(c, a, r - 1, k);
  l = dvd(c, l, spread(c, sel(c, zero_pivot, tpu_hlo_const_f64(B, &vt, 1.0), pivot), tpu_hlo_type_of(B, l)));
  l = spread(c, l, &t);
  tpu_hlo_value below = cmp(c, TPU_HLO_GT, rows, kk);
  tpu_hlo_value trailing = and_(c, below, cmp(c, TPU_HLO_GT, cols, kk));
  tpu_hlo_value update = sub(c, a, mul(c, l, spread(c, row_p, &t)));
  s[0] = sel(c, trailing, update, sel(c, and_(c, below, cmp(c, TPU_HLO_EQ, cols, kk)), l, a));
  tpu_hlo_type it = *tpu_hlo_type_of(B, s[1]);
  tpu_hlo_value at = cmp(c, TPU_HLO_EQ, index_along(c, s[1], r - 1), spread(c, k, &it));
  s[1] = sel(c, at, spread(c, add(c, p, tpu_hlo_const_i64(B, &pt, 1)), &it), s[1]);
}

/* getrf of |a| ([batch, m, n]): out_lu (L and U packed), out_piv (1-based
 * s64 [batch, 1, min(m, n)]), out_info (s64 [batch, 1, 1]). */
static void lu_factor(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value *out_lu, tpu_hlo_value *out_piv,
                      tpu_hlo_value *out_info) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, a), pt = t;
  int r = t.rank;
  int64_t k = t.dims[r - 2] < t.dims[r - 1] ? t.dims[r - 2] : t.dims[r - 1];
  pt.dtype = TPU_S64;
  pt.dims[r - 2] = 1;
  pt.dims[r - 1] = k;
  tpu_hlo_type it = pt;
  it.dims[r - 1] = 1;
  tpu_hlo_value s[3] = {a, tpu_hlo_const_i64(B, &pt, 0), tpu_hlo_const_i64(B, &it, 0)};
  tpu_lower_loop(c, k, 3, s, lu_step);
  *out_lu = s[0];
  *out_piv = s[1];
  *out_info = s[2];
}

/* One swap of the row permutation. State: perm ([batch, 1, m]), pivots. */
static void perm_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, s[0]);
  int r = t.rank;
  tpu_hlo_value p = pick(c, s[1], r - 1, k);
  p = spread(c, sub(c, p, tpu_hlo_const_i64(B, tpu_hlo_type_of(B, p), 1)), &t);
  tpu_hlo_value idx = index_along(c, s[0], r - 1);
  tpu_hlo_value at_k = cmp(c, TPU_HLO_EQ, idx, spread(c, k, &t)), at_p = cmp(c, TPU_HLO_EQ, idx, p);
  tpu_hlo_value was_k = spread(c, row_where(c, s[0], at_k, r - 1), &t);
  tpu_hlo_value was_p = spread(c, row_where(c, s[0], at_p, r - 1), &t);
  s[0] = sel(c, at_k, was_p, sel(c, at_p, was_k, s[0]));
}

/* The permutation matrices P ([batch, m, m] of |dtype|, A = P L U) of the
 * 1-based s64 pivots |piv| ([batch, 1, k]). */
static tpu_hlo_value permutation(tpu_lower_ctx *c, tpu_hlo_value piv, int64_t m, tpu_dtype_t dtype) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, piv);
  int r = t.rank;
  int64_t k = t.dims[r - 1];
  t.dims[r - 1] = m;
  tpu_hlo_value s[2] = {tpu_hlo_iota(B, &t, r - 1), piv};
  tpu_lower_loop(c, k, 2, s, perm_step);
  tpu_hlo_type pt = t;
  pt.dims[r - 2] = m;
  pt.dtype = dtype;
  tpu_hlo_value hit = cmp(c, TPU_HLO_EQ, index_along(c, spread(c, s[0], &pt), r - 2), spread(c, s[0], &pt));
  return sel(c, hit, tpu_hlo_const_f64(B, &pt, 1.0), tpu_hlo_const_f64(B, &pt, 0.0));
}

/* The solution of op(A) x = b (|left|) or x op(A) = b, A = P L U given as
 * |lu| and |p|, op the conjugate transpose if |adjoint|; batches equal. */
static tpu_hlo_value lu_solve(tpu_lower_ctx *c, tpu_hlo_value lu, tpu_hlo_value p, tpu_hlo_value b, bool left,
                              bool adjoint) {
  if (left && !adjoint) { /* U^-1 L^-1 P^T b */
    b = tri_solve(c, lu, matmul(c, mT(c, p, false), b), true, true, true, NO_TRANSPOSE);
    return tri_solve(c, lu, b, true, false, false, NO_TRANSPOSE);
  }
  if (left) { /* P L^-H U^-H b */
    b = tri_solve(c, lu, tri_solve(c, lu, b, true, false, false, ADJOINT), true, true, true, ADJOINT);
    return matmul(c, p, b);
  }
  if (!adjoint) { /* b U^-1 L^-1 P^T */
    b = tri_solve(c, lu, tri_solve(c, lu, b, false, false, false, NO_TRANSPOSE), false, true, true, NO_TRANSPOSE);
    return matmul(c, b, mT(c, p, false));
  }
  /* b P L^-H U^-H */
  b = tri_solve(c, lu, matmul(c, b, p), false, true, true, ADJOINT);
  return tri_solve(c, lu, b, false, false, false, ADJOINT);
}

/* linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info) */
static tpu_status_t lu_factor_rule(tpu_lower_ctx *c) {
  if (!tpu_lower_bool(c, 1, true))
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
  tpu_hlo_value lu, piv, info;
  lu_factor(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype), &lu, &piv, &info);
  check_info(c, 2, info, "torch.linalg.lu_factor_ex: U is singular (a zero diagonal element), and using it on lu_solve "
                         "would result in a division by zero.");
  tpu_lower_set_output(c, 0, lu);
  set_vector(c, 1, piv);
  set_vector(c, 2, info);
  return NULL;
}

/* The diagonals of |lu| as [batch, 1, k] and the parity of |piv| as a bool [batch, 1, 1] (odd). */
static tpu_hlo_value lu_diagonal(tpu_lower_ctx *c, tpu_hlo_value lu, tpu_hlo_value piv, tpu_hlo_value *out_odd) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, lu);
  int r = t.rank;
  tpu_hlo_value eye = and_(c, triangle(c, &t, true, 0), triangle(c, &t, false, 0));
  tpu_hlo_value d = row_where(c, lu, eye, r - 2);
  int64_t k = tpu_hlo_type_of(B, piv)->dims[r - 1];
  d = tpu_hlo_slice_dim(B, d, r - 1, 0, k, 1);
  tpu_hlo_value idx = add(c, index_along(c, piv, r - 1), tpu_hlo_const_i64(B, tpu_hlo_type_of(B, piv), 1));
  tpu_hlo_type pt = *tpu_hlo_type_of(B, piv);
  tpu_hlo_value swaps = tpu_hlo_convert(B, cmp(c, TPU_HLO_NE, piv, idx), TPU_S64);
  swaps = reduce_keep(c, swaps, TPU_HLO_ADD, r - 1);
  pt.dims[r - 1] = 1;
  *out_odd = cmp(c, TPU_HLO_EQ, tpu_hlo_binary(B, TPU_HLO_REM, swaps, tpu_hlo_const_i64(B, &pt, 2)),
                 tpu_hlo_const_i64(B, &pt, 1));
  return d;
}

/* True when tensor argument |arg| is row-major contiguous (PyTorch's
 * is_contiguous); unknown strides (graphs) count as contiguous. */
static bool contiguous(const tpu_lower_ctx *c, int arg) {
  const tpu_lower_arg *a = &c->args[arg];
  int64_t expected = 1;
  for (int d = 0; d < a->rank; d++)
    if (a->sizes[d] == 0) return true;
  for (int d = a->rank - 1; d >= 0 && a->strides != NULL; d--) {
    if (a->sizes[d] != 1 && a->strides[d] != expected) return false;
    expected *= a->sizes[d];
  }
  return true;
}

/* The factorization of A for _linalg_det and _linalg_slogdet. PyTorch
 * factors A^T for a contiguous real A (the same determinant, and no copy for
 * LAPACK), and their backwards solve with the LU they return accordingly. */
static void det_factor(tpu_lower_ctx *c, tpu_hlo_value *out_lu, tpu_hlo_value *out_piv) {
  tpu_hlo_value a = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype), info;
  if (!tpu_dtype_is_complex(c->args[0].dtype) && contiguous(c, 0)) a = mT(c, a, false);
  lu_factor(c, a, out_lu, out_piv, &info);
}

/* _linalg_det(A) -> (det, LU, pivots) */
static tpu_status_t det_rule(tpu_lower_ctx *c) {
  tpu_hlo_value lu, piv, odd;
  det_factor(c, &lu, &piv);
  tpu_hlo_value det = reduce_keep(c, lu_diagonal(c, lu, piv, &odd), TPU_HLO_MUL, tpu_hlo_rank(B, lu) - 1);
  set_vector(c, 0, sel(c, odd, neg(c, det), det));
  tpu_lower_set_output(c, 1, lu);
  set_vector(c, 2, piv);
  return NULL;
}

/* _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots) */
static tpu_status_t slogdet_rule(tpu_lower_ctx *c) {
  tpu_hlo_value lu, piv, odd;
  det_factor(c, &lu, &piv);
  int r = tpu_hlo_rank(B, lu);
  tpu_hlo_value d = lu_diagonal(c, lu, piv, &odd), mag = un(c, TPU_HLO_ABS, d);
  tpu_hlo_type dt = *tpu_hlo_type_of(B, d), mt = *tpu_hlo_type_of(B, mag);
  tpu_hlo_value zero = cmp(c, TPU_HLO_EQ, mag, tpu_hlo_const_f64(B, &mt, 0.0));
  tpu_hlo_value unit = tpu_dtype_is_complex(dt.dtype)
                           ? dvd(c, d, tpu_hlo_binary(B, TPU_HLO_COMPLEX, mag, tpu_hlo_const_f64(B, &mt, 0.0)))
                           : un(c, TPU_HLO_SIGN, d);
  unit = sel(c, zero, tpu_hlo_const_f64(B, &dt, 0.0), unit);
  tpu_hlo_value sign = reduce_keep(c, unit, TPU_HLO_MUL, r - 1);
  set_vector(c, 0, sel(c, odd, neg(c, sign), sign));
  set_vector(c, 1, reduce_keep(c, un(c, TPU_HLO_LOG, mag), TPU_HLO_ADD, r - 1));
  tpu_lower_set_output(c, 2, lu);
  set_vector(c, 3, piv);
  return NULL;
}

/* linalg_inv_ex(A, *, check_errors) -> (inverse, info) */
static tpu_status_t inv_rule(tpu_lower_ctx *c) {
  tpu_hlo_value lu, piv, info;
  lu_factor(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype), &lu, &piv, &info);
  check_info(c, 1, info, "linalg.inv_ex: The inversion could not be completed because the input matrix is singular.");
  tpu_hlo_value p = permutation(c, piv, OUT->dims[OUT->rank - 1], OUT->dtype);
  tpu_lower_set_output(c, 0, lu_solve(c, lu, p, identity(c, OUT), true, false));
  set_vector(c, 1, info);
  return NULL;
}

/* The right-hand side argument |arg| as matrices of the output's batch;
 * a vector (the output has the rank of A less one) becomes one column, or
 * one row unless |left|. */
static tpu_hlo_value rhs(tpu_lower_ctx *c, int arg, int a_rank, bool left) {
  if (OUT->rank != a_rank - 1) return tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, arg), OUT);
  tpu_hlo_type t = *OUT;
  t.rank++;
  t.dims[t.rank - 2] = left ? OUT->dims[OUT->rank - 1] : 1;
  t.dims[t.rank - 1] = left ? 1 : OUT->dims[OUT->rank - 1];
  return tpu_hlo_reshape(B, tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, arg), OUT), t.rank, t.dims);
}

/* |lu| and |p| broadcast to the batch of |b|. */
static void to_batch_of(tpu_lower_ctx *c, tpu_hlo_value b, tpu_hlo_value *lu, tpu_hlo_value *p) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, b);
  t.dims[t.rank - 2] = t.dims[t.rank - 1] = tpu_hlo_type_of(B, *lu)->dims[t.rank - 1];
  *lu = tpu_hlo_broadcast_to(B, *lu, &t);
  *p = tpu_hlo_broadcast_to(B, *p, &t);
}

/* _linalg_solve_ex(A, B, *, left, check_errors) -> (result, LU, pivots, info) */
static tpu_status_t solve_rule(tpu_lower_ctx *c) {
  bool left = tpu_lower_bool(c, 2, true);
  tpu_hlo_value lu, piv, info;
  lu_factor(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype), &lu, &piv, &info);
  check_info(c, 3, info, "torch.linalg.solve_ex: The solver failed because the input matrix is singular.");
  tpu_hlo_value p = permutation(c, piv, c->args[0].sizes[c->args[0].rank - 1], OUT->dtype);
  tpu_hlo_value b = rhs(c, 1, c->args[0].rank, left);
  to_batch_of(c, b, &lu, &p);
  tpu_hlo_value x = lu_solve(c, lu, p, b, left, false);
  tpu_lower_set_output(c, 0, tpu_hlo_reshape(B, x, OUT->rank, OUT->dims));
  tpu_lower_set_output(c, 1, tpu_hlo_reshape(B, lu, c->out_types[1].rank, c->out_types[1].dims));
  set_vector(c, 2, piv);
  set_vector(c, 3, info);
  return NULL;
}

/* Vector argument |arg| ([batch, k]) as [batch, 1, k] of |dtype|. */
static tpu_hlo_value vector_arg(tpu_lower_ctx *c, int arg, tpu_dtype_t dtype) {
  const tpu_lower_arg *a = &c->args[arg];
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int d = 0; d < a->rank - 1; d++) dims[d] = a->sizes[d];
  dims[a->rank - 1] = 1;
  dims[a->rank] = a->sizes[a->rank - 1];
  return tpu_hlo_reshape(B, tpu_hlo_convert(B, tpu_lower_tensor(c, arg), dtype), a->rank + 1, dims);
}

/* Argument |arg| (pivots, s32 [batch, k]) as s64 [batch, 1, k]. */
static tpu_hlo_value pivots_arg(tpu_lower_ctx *c, int arg) { return vector_arg(c, arg, TPU_S64); }

/* linalg_lu_solve(LU, pivots, B, *, left, adjoint) */
static tpu_status_t lu_solve_rule(tpu_lower_ctx *c) {
  tpu_hlo_value lu = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype);
  tpu_hlo_value p = permutation(c, pivots_arg(c, 1), c->args[0].sizes[c->args[0].rank - 1], OUT->dtype);
  tpu_hlo_value b = tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, 2), OUT);
  to_batch_of(c, b, &lu, &p);
  return done(c, lu_solve(c, lu, p, b, tpu_lower_bool(c, 3, true), tpu_lower_bool(c, 4, false)));
}

/* Outputs |first| .. |first| + 2 = (P, L, U) of the packed |lu| and the pivots |piv|. */
static void unpack(tpu_lower_ctx *c, int first, tpu_hlo_value lu, tpu_hlo_value piv, bool data, bool pivots) {
  const tpu_hlo_type *pt = &c->out_types[first], *lt = &c->out_types[first + 1], *ut = &c->out_types[first + 2];
  if (pivots) tpu_lower_set_output(c, first, permutation(c, piv, pt->dims[pt->rank - 1], pt->dtype));
  else tpu_lower_set_output(c, first, tpu_hlo_const_f64(B, pt, 0.0));
  if (!data) {
    tpu_lower_set_output(c, first + 1, tpu_hlo_const_f64(B, lt, 0.0));
    tpu_lower_set_output(c, first + 2, tpu_hlo_const_f64(B, ut, 0.0));
    return;
  }
  int r = lt->rank;
  tpu_hlo_value l = tpu_hlo_slice_dim(B, lu, r - 1, 0, lt->dims[r - 1], 1);
  tpu_hlo_value u = tpu_hlo_slice_dim(B, lu, r - 2, 0, ut->dims[r - 2], 1);
  tpu_hlo_type t = *tpu_hlo_type_of(B, l);
  tpu_lower_set_output(c, first + 1, sel(c, triangle(c, &t, false, -1), l, identity(c, &t)));
  tpu_lower_set_output(c, first + 2, keep_triangle(c, u, true));
}

/* linalg_lu(A, *, pivot) -> (P, L, U) */
static tpu_status_t lu_rule(tpu_lower_ctx *c) {
  if (!tpu_lower_bool(c, 1, true))
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "linalg.lu: LU without pivoting is not implemented on the CPU");
  tpu_hlo_value lu, piv, info;
  lu_factor(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), c->out_types[1].dtype), &lu, &piv, &info);
  unpack(c, 0, lu, piv, true, true);
  return NULL;
}

/* lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U) */
static tpu_status_t lu_unpack_rule(tpu_lower_ctx *c) {
  tpu_hlo_value lu = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), c->out_types[1].dtype);
  unpack(c, 0, lu, pivots_arg(c, 1), tpu_lower_bool(c, 2, true), tpu_lower_bool(c, 3, true));
  return NULL;
}

/* --- matrix_exp ------------------------------------------------------------------
 * Scaling and squaring: each matrix is scaled by 2^-s to a 1-norm of at most
 * theta, where the degree-18 Taylor polynomial is exact to below the type's
 * rounding (theta 1 for double, 3 for float: fewer squarings, each of which
 * doubles the relative error), and then squared s times (s per matrix, in a
 * loop to the largest). */

/* One squaring. State: the matrices, the squarings each needs (s64 [batch, 1, 1]). */
static void square_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, s[0]), st = *tpu_hlo_type_of(B, s[1]);
  tpu_hlo_value more = spread(c, cmp(c, TPU_HLO_LT, spread(c, k, &st), s[1]), &t);
  s[0] = sel(c, more, matmul(c, s[0], s[0]), s[0]);
}

/* linalg_matrix_exp(self) */
static tpu_status_t matrix_exp_rule(tpu_lower_ctx *c) {
  tpu_hlo_type t = *OUT;
  t.dtype = tpu_lower_opmath(OUT->dtype);
  int r = t.rank;
  tpu_hlo_value a = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), t.dtype);
  tpu_hlo_value norm = reduce_keep(c, reduce_keep(c, un(c, TPU_HLO_ABS, a), TPU_HLO_ADD, r - 2), TPU_HLO_MAX, r - 1);
  tpu_hlo_type nt = *tpu_hlo_type_of(B, norm);
  double theta = nt.dtype == TPU_F64 ? 1.0 : 3.0;
  tpu_hlo_value sq = un(c, TPU_HLO_CEIL, dvd(c, un(c, TPU_HLO_LOG, dvd(c, norm, tpu_hlo_const_f64(B, &nt, theta))),
                                             tpu_hlo_const_f64(B, &nt, M_LN2)));
  sq = tpu_hlo_clamp(B, tpu_hlo_scalar_f64(B, nt.dtype, 0.0), sq, tpu_hlo_scalar_f64(B, nt.dtype, 1100.0));
  sq = sel(c, is_nan(c, sq), tpu_hlo_const_f64(B, &nt, 0.0), sq); /* NaN (or empty) matrices */
  tpu_hlo_value scale = tpu_hlo_binary(B, TPU_HLO_POW, tpu_hlo_const_f64(B, &nt, 2.0), neg(c, sq));
  a = mul(c, a, spread(c, tpu_hlo_convert(B, scale, t.dtype), &t));
  tpu_hlo_value eye = identity(c, &t), e = eye;
  for (int k = 18; k >= 1; k--) e = add(c, eye, mul(c, matmul(c, a, e), tpu_hlo_const_f64(B, &t, 1.0 / k)));
  tpu_hlo_value state[2] = {e, tpu_hlo_convert(B, sq, TPU_S64)};
  int64_t all[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) all[d] = d;
  tpu_lower_loop_to(c, tpu_lower_reduce(B, state[1], TPU_HLO_MAX, all, r), 2, state, square_step);
  return done(c, state[0]);
}

/* --- SVD -------------------------------------------------------------------------
 * One-sided (Hestenes) Jacobi on the tall side (A^H when A is wide): sweeps
 * of plane rotations over every column pair (p, q) orthogonalize the columns
 * of W = A V; the singular values are the column norms, U = W / S, sorted
 * descending. Left vectors that W cannot give (zero singular values, or the
 * rest of U for full_matrices) are completed one at a time with the identity
 * column of largest residual against those found, orthogonalized twice. */

/* The plane rotation J = [[cs, sn e], [-sn conj(e), cs]] that zeroes the
 * off-diagonal g e of the Hermitian 2x2 [[app, g e], [conj(g e), aqq]]
 * (g = |gamma| >= 0, real app, aqq: [batch, 1, pairs]), as the combine_pairs weights of
 * columns (X J) in |out_cols| and of rows (J^H X) in |out_rows| (NULL: not
 * wanted). No rotation where g == 0 or !|want|. */
static void rotation(tpu_lower_ctx *c, tpu_hlo_value app, tpu_hlo_value aqq, tpu_hlo_value gamma, tpu_hlo_value want,
                     tpu_hlo_value *out_cols, tpu_hlo_value *out_rows) {
  tpu_hlo_value g = un(c, TPU_HLO_ABS, gamma);
  tpu_hlo_type gt = *tpu_hlo_type_of(B, g);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &gt, 0.0), one = tpu_hlo_const_f64(B, &gt, 1.0);
  tpu_hlo_value rotate = and_(c, cmp(c, TPU_HLO_GT, g, zero), want);
  tpu_hlo_value safe_g = sel(c, rotate, g, one);
  tpu_hlo_value zeta = dvd(c, sub(c, aqq, app), mul(c, tpu_hlo_const_f64(B, &gt, 2.0), safe_g));
  tpu_hlo_value t = dvd(c, sel(c, cmp(c, TPU_HLO_GE, zeta, zero), one, neg(c, one)),
                        add(c, un(c, TPU_HLO_ABS, zeta), un(c, TPU_HLO_SQRT, add(c, one, mul(c, zeta, zeta)))));
  t = sel(c, rotate, t, zero);
  tpu_hlo_value cs = un(c, TPU_HLO_RSQRT, add(c, one, mul(c, t, t)));
  tpu_hlo_value e = dvd(c, gamma, as_type_of(c, safe_g, gamma)); /* the phase of gamma */
  tpu_hlo_value sn = as_type_of(c, mul(c, cs, t), gamma), cw = as_type_of(c, cs, gamma);
  tpu_hlo_value sn_e = mul(c, sn, e), sn_ce = mul(c, sn, conj_of(c, e));
  out_cols[0] = cw, out_cols[1] = neg(c, sn_ce), out_cols[2] = sn_e, out_cols[3] = cw;
  if (out_rows != NULL) out_rows[0] = cw, out_rows[1] = neg(c, sn_e), out_rows[2] = sn_ce, out_rows[3] = cw;
}

/* Columns |idx| (s64 [n]) of |x|, in that order. */
static tpu_hlo_value take_columns(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value idx) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  int r = t.rank;
  tpu_hlo_gather_dims g = {.num_offset = r - 1, .num_collapsed = 1, .num_start_map = 1, .index_vector_dim = 1};
  int64_t slice[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) slice[d] = t.dims[d];
  for (int d = 0; d < r - 1; d++) g.offset_dims[d] = d;
  g.collapsed_slice_dims[0] = g.start_index_map[0] = r - 1;
  slice[r - 1] = 1;
  int64_t n = tpu_hlo_type_of(B, idx)->dims[0], col[2] = {n, 1};
  t.dims[r - 1] = n;
  return tpu_hlo_gather(B, x, tpu_hlo_reshape(B, idx, 2, col), &g, slice, &t);
}

/* Columns 2i (|out_p|) and 2i + 1 (|out_q|) of |x| ([batch, rows, n]). */
static void split_pairs(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value *out_p, tpu_hlo_value *out_q) {
  tpu_hlo_type half = *tpu_hlo_type_of(B, x);
  int r = half.rank;
  half.dims[r - 1] /= 2;
  int64_t split[TPU_HLO_MAX_RANK + 1];
  for (int d = 0; d < r; d++) split[d] = half.dims[d];
  split[r] = 2;
  tpu_hlo_value pairs = tpu_hlo_reshape(B, x, r + 1, split);
  *out_p = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, pairs, r, 0, 1, 1), r, half.dims);
  *out_q = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, pairs, r, 1, 2, 1), r, half.dims);
}

/* |x| with each pair of columns (2i, 2i + 1) replaced by the combinations
 * w[0] x_p + w[1] x_q and w[2] x_p + w[3] x_q (|w|: [batch, 1, n / 2]
 * each, of x's dtype). */
static tpu_hlo_value combine_pairs(tpu_lower_ctx *c, tpu_hlo_value x, const tpu_hlo_value *w) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  int r = t.rank;
  tpu_hlo_value xp, xq;
  split_pairs(c, x, &xp, &xq);
  tpu_hlo_type half = *tpu_hlo_type_of(B, xp);
  int64_t split[TPU_HLO_MAX_RANK + 1];
  for (int d = 0; d < r; d++) split[d] = half.dims[d];
  split[r] = 1;
  tpu_hlo_value parts[2] = {
      tpu_hlo_reshape(B, add(c, mul(c, spread(c, w[0], &half), xp), mul(c, spread(c, w[1], &half), xq)), r + 1, split),
      tpu_hlo_reshape(B, add(c, mul(c, spread(c, w[2], &half), xp), mul(c, spread(c, w[3], &half), xq)), r + 1, split)};
  return tpu_hlo_reshape(B, tpu_hlo_concatenate(B, parts, 2, r), r, t.dims);
}

/* The column order of step |k|'s round and its inverse ([n] each), from the
 * tables of a Jacobi loop's state (s[2], s[3]: [rounds, n]). */
static void round_orders(tpu_lower_ctx *c, tpu_hlo_value k, const tpu_hlo_value *s, tpu_hlo_value *out_order,
                         tpu_hlo_value *out_back) {
  const tpu_hlo_type *ot = tpu_hlo_type_of(B, s[2]);
  int64_t rounds = ot->dims[0], n = ot->dims[1], row[2] = {1, n};
  tpu_hlo_value round = tpu_hlo_binary(B, TPU_HLO_REM, k, tpu_hlo_scalar_i64(B, TPU_S64, rounds));
  tpu_hlo_value at[2] = {round, tpu_hlo_scalar_i64(B, TPU_S64, 0)};
  *out_order = tpu_hlo_reshape(B, tpu_hlo_dynamic_slice(B, s[2], at, row), 1, &n);
  *out_back = tpu_hlo_reshape(B, tpu_hlo_dynamic_slice(B, s[3], at, row), 1, &n);
}

/* One round of the one-sided Jacobi sweeps: n / 2 disjoint column pairs
 * rotated at once, the pairs of a round-robin tournament (every pair once
 * in n - 1 rounds). State: W ([batch, m, n]), V ([batch, n0, n]), the
 * rounds' column orders and their inverses ([n - 1, n], s64). */
static void jacobi_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  int r = tpu_hlo_rank(B, s[0]);
  tpu_hlo_value order, back;
  round_orders(c, k, s, &order, &back);
  tpu_hlo_value w = take_columns(c, s[0], order), ap, aq;
  split_pairs(c, w, &ap, &aq);
  tpu_hlo_value gamma = reduce_keep(c, mul(c, conj_of(c, ap), aq), TPU_HLO_ADD, r - 2);
  tpu_hlo_value app = column_norm2(c, ap), weights[4];
  tpu_hlo_type gt = *tpu_hlo_type_of(B, app);
  gt.dtype = TPU_BOOL;
  rotation(c, app, column_norm2(c, aq), gamma, tpu_hlo_const_i64(B, &gt, 1), weights, NULL);
  s[0] = take_columns(c, combine_pairs(c, w, weights), back);
  s[1] = take_columns(c, combine_pairs(c, take_columns(c, s[1], order), weights), back);
}

/* |x| ([batch, n, n]) with its rows and columns in the order |idx|. */
static tpu_hlo_value take_rows_columns(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value idx) {
  return mT(c, take_columns(c, mT(c, take_columns(c, x, idx), false), idx), false);
}

/* Of each diagonal pair (2i, 2i + 1) of |h| ([batch, n, n]): the diagonal
 * elements (|out_pp|, |out_qq|, real) and h[2i, 2i + 1] (|out_pq|), each
 * [batch, 1, n / 2]. */
static void pair_blocks(tpu_lower_ctx *c, tpu_hlo_value h, tpu_hlo_value *out_pp, tpu_hlo_value *out_qq,
                        tpu_hlo_value *out_pq) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, h), it = t;
  int r = t.rank;
  it.dtype = TPU_S64;
  tpu_hlo_value row = tpu_hlo_iota(B, &it, r - 2), col = tpu_hlo_iota(B, &it, r - 1), zero = tpu_hlo_const_f64(B, &t, 0.0);
  tpu_hlo_value above = add(c, row, tpu_hlo_const_i64(B, &it, 1));
  tpu_hlo_value diag = reduce_keep(c, sel(c, cmp(c, TPU_HLO_EQ, row, col), h, zero), TPU_HLO_ADD, r - 2);
  tpu_hlo_value super = reduce_keep(c, sel(c, cmp(c, TPU_HLO_EQ, above, col), h, zero), TPU_HLO_ADD, r - 2), unused;
  split_pairs(c, diag, out_pp, out_qq);
  *out_pp = un(c, TPU_HLO_REAL, *out_pp);
  *out_qq = un(c, TPU_HLO_REAL, *out_qq);
  split_pairs(c, super, &unused, out_pq);
}

/* One round of the two-sided (eigenvalue) Jacobi sweeps: n / 2 disjoint
 * pairs rotated at once, as jacobi_step. State: A ([batch, n, n],
 * Hermitian), V ([batch, n0, n]), the rounds' orders and inverses. */
static void eigh_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  tpu_hlo_value order, back;
  round_orders(c, k, s, &order, &back);
  tpu_hlo_value h = take_rows_columns(c, s[0], order), app, aqq, gamma, cols[4], rows[4];
  pair_blocks(c, h, &app, &aqq, &gamma);
  tpu_hlo_type gt = *tpu_hlo_type_of(B, app);
  gt.dtype = TPU_BOOL;
  rotation(c, app, aqq, gamma, tpu_hlo_const_i64(B, &gt, 1), cols, rows);
  h = mT(c, combine_pairs(c, mT(c, combine_pairs(c, h, cols), false), rows), false);
  s[0] = take_rows_columns(c, h, back);
  s[1] = take_columns(c, combine_pairs(c, take_columns(c, s[1], order), cols), back);
}

/* Sorts |n| values along their last dim by |keys| ([batch, 1, k]),
 * descending or ascending. */
static void sort_by(tpu_lower_ctx *c, tpu_hlo_value keys, tpu_hlo_value *xs, int n, bool descending) {
  for (int i = 0; i < n; i++) {
    tpu_hlo_type xt = *tpu_hlo_type_of(B, xs[i]), kt = *tpu_hlo_type_of(B, keys);
    tpu_hlo_value ops[2] = {spread(c, keys, &xt), xs[i]}, out[2];
    tpu_hlo_type args[4] = {tpu_hlo_make_type(kt.dtype, 0, NULL), tpu_hlo_make_type(kt.dtype, 0, NULL),
                            tpu_hlo_make_type(xt.dtype, 0, NULL), tpu_hlo_make_type(xt.dtype, 0, NULL)};
    tpu_hlo_value a[4];
    tpu_hlo_region cmp_region;
    tpu_hlo_region_begin(B, 4, args, a);
    tpu_hlo_value before = cmp(c, descending ? TPU_HLO_GT : TPU_HLO_LT, a[0], a[1]);
    tpu_hlo_region_end(B, &before, 1, &cmp_region);
    tpu_hlo_sort(B, ops, 2, xt.rank - 1, true, &cmp_region, out);
    xs[i] = out[1];
  }
}

/* One completion step. State: Q ([batch, m, k], orthonormal columns where
 * not missing, zero where missing), missing ([batch, 1, k], s64 0/1). */
static void complete_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  (void)k;
  tpu_hlo_type qt = *tpu_hlo_type_of(B, s[0]), mt = *tpu_hlo_type_of(B, s[1]);
  int r = qt.rank;
  int64_t m = qt.dims[r - 2];
  tpu_hlo_type st = qt;
  st.dims[r - 1] = m;
  /* the residuals of the identity columns: I - Q Q^H */
  tpu_hlo_value res = sub(c, identity(c, &st), matmul(c, s[0], mT(c, s[0], true)));
  tpu_hlo_value norms = column_norm2(c, res);
  tpu_hlo_type nt = *tpu_hlo_type_of(B, norms);
  tpu_hlo_value best = cmp(c, TPU_HLO_EQ, norms, spread(c, reduce_keep(c, norms, TPU_HLO_MAX, r - 1), &nt));
  tpu_hlo_type it = nt;
  it.dtype = TPU_S64;
  tpu_hlo_value idx = index_along(c, norms, r - 1);
  tpu_hlo_value j = reduce_keep(c, sel(c, best, idx, tpu_hlo_const_i64(B, &it, m)), TPU_HLO_MIN, r - 1);
  tpu_hlo_value v = row_where(c, res, cmp(c, TPU_HLO_EQ, index_along(c, res, r - 1), spread(c, j, &st)), r - 1);
  for (int i = 0; i < 2; i++) {
    tpu_hlo_value proj = matmul(c, s[0], matmul(c, mT(c, s[0], true), v));
    v = sub(c, v, proj);
  }
  tpu_hlo_value vn = un(c, TPU_HLO_SQRT, column_norm2(c, v));
  v = dvd(c, v, spread(c, as_type_of(c, vn, v), tpu_hlo_type_of(B, v)));
  /* into the first missing column */
  tpu_hlo_value slot = index_along(c, s[1], r - 1);
  tpu_hlo_value missing = cmp(c, TPU_HLO_EQ, s[1], tpu_hlo_const_i64(B, &mt, 1));
  tpu_hlo_value first = reduce_keep(c, sel(c, missing, slot, tpu_hlo_const_i64(B, &mt, qt.dims[r - 1])), TPU_HLO_MIN,
                                    r - 1);
  tpu_hlo_value here = cmp(c, TPU_HLO_EQ, slot, spread(c, first, &mt));
  s[0] = sel(c, spread(c, here, &qt), spread(c, v, &qt), s[0]);
  s[1] = sel(c, here, tpu_hlo_const_i64(B, &mt, 0), s[1]);
}

/* The column orders of the n - 1 rounds of a round-robin tournament of |n|
 * (even) columns, by the circle method (round j pairs column n - 1 with j,
 * and j + i with j - i, mod n - 1), and their inverses: [n - 1, n] each. */
static void tournament(tpu_lower_ctx *c, int64_t n, tpu_hlo_value *out_order, tpu_hlo_value *out_back) {
  int64_t rounds = n - 1, count = rounds * n, table[2] = {rounds, n};
  int64_t *order = malloc(sizeof(int64_t) * (size_t)count), *back = malloc(sizeof(int64_t) * (size_t)count);
  if (order == NULL || back == NULL) {
    tpu_hlo_fail(B, TPU_ERR_RUNTIME, "%s: out of memory", c->op);
  } else {
    for (int64_t j = 0; j < rounds; j++) {
      int64_t *o = order + j * n;
      o[0] = n - 1, o[1] = j;
      for (int64_t i = 1; i < n / 2; i++) {
        o[2 * i] = (j + i) % rounds;
        o[2 * i + 1] = ((j - i) % rounds + rounds) % rounds;
      }
      for (int64_t i = 0; i < n; i++) back[j * n + o[i]] = i;
    }
    *out_order = tpu_hlo_reshape(B, tpu_hlo_const_i64_list(B, order, (int)count), 2, table);
    *out_back = tpu_hlo_reshape(B, tpu_hlo_const_i64_list(B, back, (int)count), 2, table);
  }
  free(order);
  free(back);
}

/* The sweeps of a Jacobi loop over |even| columns: the rounds' tables go
 * into state[2] and state[3], the matrices are state[0] and state[1]. */
static void jacobi_loop(tpu_lower_ctx *c, int64_t even, tpu_hlo_value *state, tpu_lower_step_fn step) {
  if (even < 2) return;
  tournament(c, even, &state[2], &state[3]);
  int sweeps = tpu_dtype_real(tpu_hlo_dtype(B, state[0])) == TPU_F64 ? 16 : 12;
  tpu_lower_loop(c, sweeps * (even - 1), 4, state, step);
}

/* One-sided Jacobi on |a| ([batch, m, n], m >= n): |out| receives the
 * singular values ([batch, 1, n], the norms of W's columns), W = A V (columns
 * U S) and V, largest singular value first. Each sweep is the n - 1 rounds
 * of a tournament (an odd n gets a zero column, which never rotates). */
static void jacobi_svd(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value *out) {
  tpu_hlo_type vt = *tpu_hlo_type_of(B, a);
  int r = vt.rank;
  int64_t n = vt.dims[r - 1], even = n + n % 2;
  vt.dims[r - 2] = n;
  tpu_hlo_value state[4] = {a, identity(c, &vt)};
  for (int i = 0; i < 2; i++) state[i] = pad_end(c, state[i], r - 1, even - n, tpu_hlo_scalar_f64(B, vt.dtype, 0.0));
  jacobi_loop(c, even, state, jacobi_step);
  for (int i = 0; i < 2; i++) state[i] = tpu_hlo_slice_dim(B, state[i], r - 1, 0, n, 1);
  tpu_hlo_value sv = un(c, TPU_HLO_SQRT, column_norm2(c, state[0]));
  out[0] = sv, out[1] = state[0], out[2] = state[1];
  sort_by(c, sv, out, 3, true);
}

/* _linalg_svd(A, full_matrices, compute_uv, *, driver) -> (U, S, Vh) */
static tpu_status_t svd_rule(tpu_lower_ctx *c) {
  const tpu_hlo_type *st = &c->out_types[1];
  tpu_dtype_t dtype = tpu_lower_opmath(c->args[0].dtype);
  tpu_hlo_value a = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), dtype);
  int r = c->args[0].rank;
  int64_t all[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) all[d] = d;
  tpu_hlo_value finite = un(c, TPU_HLO_IS_FINITE, tpu_dtype_is_complex(dtype) ? un(c, TPU_HLO_ABS, a) : a);
  tpu_lower_require(c, tpu_lower_reduce(B, finite, TPU_HLO_AND, all, r), TPU_ERR_RUNTIME,
                    "linalg.svd: The algorithm failed to converge because the input matrix contained non-finite "
                    "values.");
  int64_t m = c->args[0].sizes[r - 2], n = c->args[0].sizes[r - 1];
  bool wide = m < n, full = tpu_lower_bool(c, 1, false), uv = tpu_lower_bool(c, 2, true);
  if (wide) {
    a = mT(c, a, true);
    int64_t t = m;
    m = n;
    n = t;
  }
  tpu_hlo_value sorted[3];
  jacobi_svd(c, a, sorted);
  if (!uv) {
    tpu_lower_set_output(c, 0, tpu_hlo_const_f64(B, &c->out_types[0], 0.0));
    tpu_lower_set_output(c, 1, tpu_hlo_reshape(B, sorted[0], st->rank, st->dims));
    tpu_lower_set_output(c, 2, tpu_hlo_const_f64(B, &c->out_types[2], 0.0));
    return NULL;
  }
  /* U = W / S; singular values at rounding level of the largest give no direction */
  tpu_hlo_type kt = *tpu_hlo_type_of(B, sorted[0]);
  double eps = tpu_dtype_real(dtype) == TPU_F64 ? 2.2e-16 : 1.2e-7;
  tpu_hlo_value cut = mul(c, spread(c, reduce_keep(c, sorted[0], TPU_HLO_MAX, r - 1), &kt),
                          tpu_hlo_const_f64(B, &kt, eps * (double)m));
  tpu_hlo_value missing = tpu_hlo_unary(B, TPU_HLO_NOT, cmp(c, TPU_HLO_GT, sorted[0], cut));
  tpu_hlo_type wt = *tpu_hlo_type_of(B, sorted[1]);
  tpu_hlo_value safe = sel(c, missing, tpu_hlo_const_f64(B, &kt, 1.0), sorted[0]);
  tpu_hlo_value u = dvd(c, sorted[1], spread(c, as_type_of(c, safe, sorted[1]), &wt));
  u = sel(c, spread(c, missing, &wt), tpu_hlo_const_f64(B, &wt, 0.0), u);
  tpu_hlo_type mk = kt;
  mk.dtype = TPU_S64;
  tpu_hlo_value miss = sel(c, missing, tpu_hlo_const_i64(B, &mk, 1), tpu_hlo_const_i64(B, &mk, 0));
  int64_t cols = full ? m : n;
  u = pad_end(c, u, r - 1, cols - n, tpu_hlo_scalar_f64(B, dtype, 0.0));
  miss = pad_end(c, miss, r - 1, cols - n, tpu_hlo_scalar_i64(B, TPU_S64, 1));
  tpu_hlo_value fill[2] = {u, miss};
  tpu_lower_loop(c, m > 0 ? cols : 0, 2, fill, complete_step);
  u = fill[0];
  tpu_hlo_value v = sorted[2];
  /* A = U S V^H; for a wide A those came from A^H = V S U^H */
  tpu_lower_set_output(c, 0, wide ? v : u);
  tpu_lower_set_output(c, 1, tpu_hlo_reshape(B, sorted[0], st->rank, st->dims));
  tpu_lower_set_output(c, 2, mT(c, wide ? u : v, true));
  return NULL;
}

/* _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors): two-sided
 * Jacobi on the Hermitian matrix of the UPLO triangle (the diagonal's
 * imaginary part ignored, as LAPACK), eigenvalues ascending. */
static tpu_status_t eigh_rule(tpu_lower_ctx *c) {
  tpu_dtype_t dtype = tpu_lower_opmath(c->args[0].dtype);
  tpu_hlo_value a = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), dtype);
  bool upper = c->args[1].kind == TPU_ARG_STRING && (c->args[1].s[0] == 'U' || c->args[1].s[0] == 'u');
  tpu_hlo_type t = *tpu_hlo_type_of(B, a);
  int r = t.rank;
  int64_t n = t.dims[r - 1];
  tpu_hlo_value strict = sel(c, triangle(c, &t, upper, upper ? 1 : -1), a, tpu_hlo_const_f64(B, &t, 0.0));
  tpu_hlo_value h = add(c, keep_triangle(c, a, upper), mT(c, strict, true));
  tpu_hlo_value eye = and_(c, triangle(c, &t, true, 0), triangle(c, &t, false, 0));
  h = sel(c, eye, as_type_of(c, un(c, TPU_HLO_REAL, h), h), h);
  /* an odd n gets a zero row and column, which never rotate */
  int64_t even = n + n % 2;
  tpu_hlo_value zero = tpu_hlo_scalar_f64(B, dtype, 0.0);
  tpu_hlo_value state[4] = {pad_end(c, pad_end(c, h, r - 2, even - n, zero), r - 1, even - n, zero),
                            pad_end(c, identity(c, &t), r - 1, even - n, zero)};
  jacobi_loop(c, even, state, eigh_step);
  state[0] = tpu_hlo_slice_dim(B, tpu_hlo_slice_dim(B, state[0], r - 2, 0, n, 1), r - 1, 0, n, 1);
  state[1] = tpu_hlo_slice_dim(B, state[1], r - 1, 0, n, 1);
  tpu_hlo_value w = un(c, TPU_HLO_REAL, row_where(c, state[0], eye, r - 2));
  tpu_hlo_value sorted[2] = {w, state[1]};
  sort_by(c, w, sorted, 2, false);
  set_vector(c, 0, sorted[0]);
  tpu_lower_set_output(c, 1, tpu_lower_bool(c, 2, true) ? sorted[1] : tpu_hlo_const_f64(B, &c->out_types[1], 0.0));
  return NULL;
}

/* --- LDL (Bunch-Kaufman) -------------------------------------------------------------
 * LAPACK's sytf2/hetf2 with uplo 'L', as sytrf gives PyTorch: at column k
 * a 1x1 pivot, the 1x1 pivot of the row imax of the column's largest
 * element, or the 2x2 pivot of k and imax (alpha = (1 + sqrt 17) / 8),
 * swapped into place in the trailing block only; pivots 1-based, negative
 * for both columns of a 2x2 block; info the first zero column. The
 * trailing block is kept whole (both triangles, mirrored after each step,
 * Hermitian with a real diagonal), so that swaps and row reads are plain;
 * the output is its lower triangle. */

/* |x| with its upper triangle the (conjugate) transpose of its lower one,
 * and a real diagonal where |hermitian|. */
static tpu_hlo_value mirror_lower(tpu_lower_ctx *c, tpu_hlo_value x, bool hermitian) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  tpu_hlo_value y = sel(c, triangle(c, &t, false, 0), x, mT(c, x, hermitian));
  if (!hermitian) return y;
  tpu_hlo_value eye = and_(c, triangle(c, &t, true, 0), triangle(c, &t, false, 0));
  return sel(c, eye, as_type_of(c, un(c, TPU_HLO_REAL, y), y), y);
}

/* |re| + |im| (|x| for real x). */
static tpu_hlo_value abs1(tpu_lower_ctx *c, tpu_hlo_value x) {
  if (!tpu_dtype_is_complex(tpu_hlo_dtype(B, x))) return un(c, TPU_HLO_ABS, x);
  return add(c, un(c, TPU_HLO_ABS, un(c, TPU_HLO_REAL, x)), un(c, TPU_HLO_ABS, un(c, TPU_HLO_IMAG, x)));
}

/* |x| with rows (|dim| r - 2) or columns i and j (per matrix) swapped where
 * |within| (i1 of x's shape) holds. */
static tpu_hlo_value swap_lines(tpu_lower_ctx *c, tpu_hlo_value x, int dim, tpu_hlo_value i, tpu_hlo_value j,
                                tpu_hlo_value within) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x), it = t;
  it.dtype = TPU_S64;
  tpu_hlo_value idx = index_along(c, x, dim);
  tpu_hlo_value at_i = cmp(c, TPU_HLO_EQ, idx, spread(c, i, &it)), at_j = cmp(c, TPU_HLO_EQ, idx, spread(c, j, &it));
  tpu_hlo_value was_i = spread(c, row_where(c, x, at_i, dim), &t), was_j = spread(c, row_where(c, x, at_j, dim), &t);
  return sel(c, within, sel(c, at_i, was_j, sel(c, at_j, was_i, x)), x);
}

/* One column of sytf2 (hetf2 where |hermitian|). State: A ([batch, n, n]),
 * pivots (s64 [batch, 1, n]), registers (s64 [batch, 1, 2]: info, and 1
 * where column k is the second of a 2x2 block). */
static void ldl_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s, bool hermitian) {
  tpu_hlo_value a = s[0];
  tpu_hlo_type t = *tpu_hlo_type_of(B, a), tt = t;
  tt.dtype = TPU_S64;
  int r = t.rank;
  int64_t n = t.dims[r - 1];
  tpu_hlo_value info = tpu_hlo_slice_dim(B, s[2], r - 1, 0, 1, 1), second = tpu_hlo_slice_dim(B, s[2], r - 1, 1, 2, 1);
  tpu_hlo_type it = *tpu_hlo_type_of(B, info);
  tpu_hlo_value kk0 = spread(c, k, &it), one = tpu_hlo_const_i64(B, &it, 1), izero = tpu_hlo_const_i64(B, &it, 0);
  tpu_hlo_value go = cmp(c, TPU_HLO_EQ, second, izero);
  /* the pivot choice */
  tpu_hlo_value col = pick(c, a, r - 1, k); /* [batch, n, 1] */
  tpu_hlo_type ct = *tpu_hlo_type_of(B, col), cit = ct;
  cit.dtype = TPU_S64;
  tpu_hlo_value crow = index_along(c, col, r - 2);
  tpu_hlo_value akk = row_where(c, col, cmp(c, TPU_HLO_EQ, crow, spread(c, k, &cit)), r - 2);
  tpu_hlo_value absakk = hermitian ? un(c, TPU_HLO_ABS, un(c, TPU_HLO_REAL, akk)) : abs1(c, akk);
  tpu_hlo_type rt = *tpu_hlo_type_of(B, absakk), rct = *tpu_hlo_type_of(B, abs1(c, col));
  tpu_hlo_value mag =
      sel(c, cmp(c, TPU_HLO_GT, crow, spread(c, k, &cit)), abs1(c, col), tpu_hlo_const_f64(B, &rct, -1.0));
  tpu_hlo_value colmax = reduce_keep(c, mag, TPU_HLO_MAX, r - 2);
  tpu_hlo_value imax = reduce_keep(c, sel(c, cmp(c, TPU_HLO_EQ, mag, spread(c, colmax, &rct)), crow,
                                         tpu_hlo_const_i64(B, &cit, n)),
                                   TPU_HLO_MIN, r - 2);
  colmax = un(c, TPU_HLO_ABS, colmax); /* -1 past the last column: no element */
  imax = sel(c, cmp(c, TPU_HLO_LT, imax, tpu_hlo_const_i64(B, &it, n)), imax, kk0);
  tpu_hlo_value rzero = tpu_hlo_const_f64(B, &rt, 0.0);
  colmax = sel(c, cmp(c, TPU_HLO_LT, imax, plus_i(c, kk0, 1)), rzero, colmax);
  tpu_hlo_value rows = index_along(c, a, r - 2), cols = index_along(c, a, r - 1);
  tpu_hlo_value row_i = row_where(c, a, cmp(c, TPU_HLO_EQ, rows, spread(c, imax, &tt)), r - 2); /* [batch, 1, n] */
  tpu_hlo_type rit = *tpu_hlo_type_of(B, index_along(c, row_i, r - 1));
  tpu_hlo_value ri = index_along(c, row_i, r - 1);
  tpu_hlo_type rrt = *tpu_hlo_type_of(B, abs1(c, row_i));
  tpu_hlo_value in_row =
      and_(c, cmp(c, TPU_HLO_GE, ri, spread(c, k, &rit)), cmp(c, TPU_HLO_NE, ri, spread(c, imax, &rit)));
  tpu_hlo_value rowmax =
      reduce_keep(c, sel(c, in_row, abs1(c, row_i), tpu_hlo_const_f64(B, &rrt, 0.0)), TPU_HLO_MAX, r - 1);
  tpu_hlo_value aii = row_where(c, row_i, cmp(c, TPU_HLO_EQ, ri, spread(c, imax, &rit)), r - 1);
  aii = hermitian ? un(c, TPU_HLO_ABS, un(c, TPU_HLO_REAL, aii)) : abs1(c, aii);
  tpu_hlo_value alpha = tpu_hlo_const_f64(B, &rt, (1.0 + sqrt(17.0)) / 8.0);
  tpu_hlo_value zero_col = or_(c, cmp(c, TPU_HLO_EQ, tpu_hlo_binary(B, TPU_HLO_MAX, absakk, colmax), rzero),
                               cmp(c, TPU_HLO_NE, absakk, absakk));
  tpu_hlo_value c1 = cmp(c, TPU_HLO_GE, absakk, mul(c, alpha, colmax));
  tpu_hlo_value safe_rowmax = sel(c, cmp(c, TPU_HLO_GT, rowmax, rzero), rowmax, tpu_hlo_const_f64(B, &rt, 1.0));
  tpu_hlo_value c2 = cmp(c, TPU_HLO_GE, absakk, mul(c, mul(c, alpha, colmax), dvd(c, colmax, safe_rowmax)));
  tpu_hlo_value c3 = cmp(c, TPU_HLO_GE, aii, mul(c, alpha, rowmax));
  tpu_hlo_value stay = or_(c, or_(c, zero_col, c1), c2);
  tpu_hlo_value two = and_(c, go, and_(c, un(c, TPU_HLO_NOT, stay), un(c, TPU_HLO_NOT, c3)));
  tpu_hlo_value kp = sel(c, stay, kk0, imax);
  tpu_hlo_value kk = sel(c, two, plus_i(c, kk0, 1), kk0);
  /* the swap of kk and kp in the trailing block */
  tpu_hlo_value act = and_(c, go, un(c, TPU_HLO_NOT, zero_col));
  tpu_hlo_value kt = spread(c, k, &tt);
  tpu_hlo_type tb = t;
  tb.dtype = TPU_BOOL;
  tpu_hlo_value swap = spread(c, and_(c, act, cmp(c, TPU_HLO_NE, kp, kk)), &tb);
  a = swap_lines(c, a, r - 2, kk, kp, and_(c, swap, cmp(c, TPU_HLO_GE, cols, kt)));
  a = swap_lines(c, a, r - 1, kk, kp, and_(c, swap, cmp(c, TPU_HLO_GE, rows, kt)));
  /* the update of the trailing block by the pivot block's columns */
  tpu_hlo_value ck = pick(c, a, r - 1, k), ck1 = pick(c, a, r - 1, plus_i(c, k, 1));
  tpu_hlo_value crow2 = index_along(c, ck, r - 2);
  tpu_hlo_value d0 = row_where(c, ck, cmp(c, TPU_HLO_EQ, crow2, spread(c, k, &cit)), r - 2);
  tpu_hlo_value d1 = row_where(c, ck1, cmp(c, TPU_HLO_EQ, crow2, spread(c, plus_i(c, k, 1), &cit)), r - 2);
  tpu_hlo_value d10 = row_where(c, ck, cmp(c, TPU_HLO_EQ, crow2, spread(c, plus_i(c, k, 1), &cit)), r - 2);
  tpu_hlo_type st = *tpu_hlo_type_of(B, d0);
  tpu_hlo_value cone = tpu_hlo_const_f64(B, &st, 1.0);
  tpu_hlo_value wk, wk1; /* the new columns k and k + 1 below the block */
  /* 1x1: W = A(:, k) / d */
  tpu_hlo_value d11 = dvd(c, cone, hermitian ? as_type_of(c, un(c, TPU_HLO_REAL, d0), d0) : d0);
  tpu_hlo_value w1 = mul(c, ck, spread(c, d11, &ct));
  /* 2x2 */
  tpu_hlo_value e11, e22, e21, scale;
  if (hermitian) {
    tpu_hlo_value dd = un(c, TPU_HLO_ABS, d10);
    tpu_hlo_value dds = sel(c, cmp(c, TPU_HLO_EQ, dd, rzero), tpu_hlo_const_f64(B, &rt, 1.0), dd);
    tpu_hlo_value r11 = dvd(c, un(c, TPU_HLO_REAL, d1), dds), r22 = dvd(c, un(c, TPU_HLO_REAL, d0), dds);
    tpu_hlo_value rone = tpu_hlo_const_f64(B, &rt, 1.0);
    tpu_hlo_value ttt = dvd(c, rone, sub(c, mul(c, r11, r22), rone));
    e21 = dvd(c, d10, as_type_of(c, dds, d10));
    scale = as_type_of(c, dvd(c, ttt, dds), d10);
    e11 = as_type_of(c, r11, d10), e22 = as_type_of(c, r22, d10);
    wk = mul(c, spread(c, scale, &ct), sub(c, mul(c, spread(c, e11, &ct), ck), mul(c, spread(c, e21, &ct), ck1)));
    wk1 = mul(c, spread(c, scale, &ct),
              sub(c, mul(c, spread(c, e22, &ct), ck1), mul(c, spread(c, conj_of(c, e21), &ct), ck)));
  } else {
    tpu_hlo_value d10s = sel(c, cmp(c, TPU_HLO_EQ, d10, tpu_hlo_const_f64(B, &st, 0.0)), cone, d10);
    e11 = dvd(c, d1, d10s), e22 = dvd(c, d0, d10s);
    tpu_hlo_value ttt = dvd(c, cone, sub(c, mul(c, e11, e22), cone));
    scale = dvd(c, ttt, d10s);
    wk = mul(c, spread(c, scale, &ct), sub(c, mul(c, spread(c, e11, &ct), ck), ck1));
    wk1 = mul(c, spread(c, scale, &ct), sub(c, mul(c, spread(c, e22, &ct), ck1), ck));
  }
  /* trailing: A -= c_k w_k^T (+ c_k+1 w_k+1^T), conjugated where Hermitian */
  tpu_hlo_value up1 = matmul(c, ck, mT(c, w1, hermitian));
  tpu_hlo_value up2 = add(c, matmul(c, ck, mT(c, wk, hermitian)), matmul(c, ck1, mT(c, wk1, hermitian)));
  tpu_hlo_value two_t = spread(c, two, &tb), act_t = spread(c, act, &tb);
  tpu_hlo_value k1 = spread(c, plus_i(c, k, 1), &tt);
  tpu_hlo_value past = sel(c, two_t, and_(c, cmp(c, TPU_HLO_GT, rows, k1), cmp(c, TPU_HLO_GT, cols, k1)),
                           and_(c, cmp(c, TPU_HLO_GT, rows, kt), cmp(c, TPU_HLO_GT, cols, kt)));
  tpu_hlo_value upd = sub(c, a, sel(c, two_t, up2, up1));
  tpu_hlo_value next = sel(c, past, upd, a);
  /* the block's columns below it: L (times D, as sytf2 stores them) */
  tpu_hlo_value below1 = and_(c, cmp(c, TPU_HLO_GT, rows, kt), cmp(c, TPU_HLO_EQ, cols, kt));
  tpu_hlo_value below2k = and_(c, cmp(c, TPU_HLO_GT, rows, k1), cmp(c, TPU_HLO_EQ, cols, kt));
  tpu_hlo_value below2k1 = and_(c, cmp(c, TPU_HLO_GT, rows, k1), cmp(c, TPU_HLO_EQ, cols, k1));
  next = sel(c, and_(c, un(c, TPU_HLO_NOT, two_t), below1), spread(c, w1, &t), next);
  next = sel(c, and_(c, two_t, below2k), spread(c, wk, &t), next);
  next = sel(c, and_(c, two_t, below2k1), spread(c, wk1, &t), next);
  a = sel(c, act_t, mirror_lower(c, next, hermitian), a);
  s[0] = a;
  /* pivots, info, and the skip of a block's second column */
  tpu_hlo_type pt = *tpu_hlo_type_of(B, s[1]);
  tpu_hlo_value pidx = index_along(c, s[1], r - 1);
  tpu_hlo_value code = sel(c, two, neg(c, plus_i(c, kp, 1)), plus_i(c, kp, 1));
  tpu_hlo_type pb = pt;
  pb.dtype = TPU_BOOL;
  tpu_hlo_value at_k = and_(c, cmp(c, TPU_HLO_EQ, pidx, spread(c, k, &pt)), spread(c, go, &pb));
  tpu_hlo_value at_k1 = and_(c, cmp(c, TPU_HLO_EQ, pidx, spread(c, plus_i(c, k, 1), &pt)), spread(c, two, &pb));
  s[1] = sel(c, or_(c, at_k, at_k1), spread(c, code, &pt), s[1]);
  info = sel(c, and_(c, and_(c, go, zero_col), cmp(c, TPU_HLO_EQ, info, izero)), plus_i(c, kk0, 1), info);
  second = sel(c, two, one, izero);
  tpu_hlo_value regs[2] = {info, second};
  s[2] = tpu_hlo_concatenate(B, regs, 2, r - 1);
}
static void ldl_symmetric_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { ldl_step(c, k, s, false); }
static void ldl_hermitian_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { ldl_step(c, k, s, true); }

/* torchtpu::ldl_factor(A, hermitian) -> (LD, pivots, info): what
 * linalg_ldl_factor_ex computes (ops.cpp adds check_errors). */
static tpu_status_t ldl_factor_rule(tpu_lower_ctx *c) {
  tpu_dtype_t dt = c->args[0].dtype;
  if (!tpu_dtype_is_complex(dt) && dt != TPU_F32 && dt != TPU_F64)
    return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "\"ldl_factor_kernel_cpu\" not implemented for '%s'",
                           tpu_dtype_scalar_type(dt));
  bool hermitian = tpu_lower_bool(c, 1, false) && tpu_dtype_is_complex(dt);
  tpu_hlo_value a = tensor_as(c, 0, dt);
  tpu_hlo_type t = *tpu_hlo_type_of(B, a);
  int r = t.rank;
  int64_t n = t.dims[r - 1];
  tpu_hlo_type pt = t, it = t;
  pt.dtype = it.dtype = TPU_S64;
  pt.dims[r - 2] = 1;
  it.dims[r - 2] = 1, it.dims[r - 1] = 2;
  tpu_hlo_value s[3] = {mirror_lower(c, a, hermitian), tpu_hlo_const_i64(B, &pt, 0), tpu_hlo_const_i64(B, &it, 0)};
  if (tpu_hlo_type_numel(&t) > 0) tpu_lower_loop(c, n, 3, s, hermitian ? ldl_hermitian_step : ldl_symmetric_step);
  tpu_lower_set_output(c, 0, keep_triangle(c, s[0], false));
  set_vector(c, 1, s[1]);
  set_vector(c, 2, tpu_hlo_slice_dim(B, s[2], r - 1, 0, 1, 1));
  return NULL;
}

/* One step of sytrs's first half, L D y = P b, at column k. State: X
 * ([batch, n, nrhs]), LD, pivots, skip (s64 [batch, 1, 1]: k is a block's
 * second column). */
static void ldl_forward_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s, bool hermitian) {
  tpu_hlo_value x = s[0], ld = s[1];
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x), xi = xt;
  xi.dtype = TPU_S64;
  int r = xt.rank;
  tpu_hlo_type st = *tpu_hlo_type_of(B, s[3]);
  tpu_hlo_value p = pick(c, s[2], r - 1, k); /* [batch, 1, 1] */
  tpu_hlo_value izero = tpu_hlo_const_i64(B, &st, 0);
  tpu_hlo_value go = cmp(c, TPU_HLO_EQ, s[3], izero);
  tpu_hlo_value one = and_(c, go, cmp(c, TPU_HLO_GT, p, izero)), two = and_(c, go, cmp(c, TPU_HLO_LT, p, izero));
  tpu_hlo_value kk = spread(c, k, &st), k1 = plus_i(c, kk, 1);
  tpu_hlo_value kp = sel(c, one, plus_i(c, p, -1), plus_i(c, neg(c, p), -1));
  tpu_hlo_type xb = xt;
  xb.dtype = TPU_BOOL;
  tpu_hlo_value rows = index_along(c, x, r - 2);
  x = swap_lines(c, x, r - 2, sel(c, two, k1, kk), kp, spread(c, go, &xb));
  tpu_hlo_value lk = pick(c, ld, r - 1, k), lk1 = pick(c, ld, r - 1, plus_i(c, k, 1)); /* [batch, n, 1] */
  tpu_hlo_value xk = row_where(c, x, cmp(c, TPU_HLO_EQ, rows, spread(c, kk, &xi)), r - 2); /* [batch, 1, nrhs] */
  tpu_hlo_value xk1 = row_where(c, x, cmp(c, TPU_HLO_EQ, rows, spread(c, k1, &xi)), r - 2);
  tpu_hlo_value lrows = index_along(c, lk, r - 2);
  tpu_hlo_type lit = *tpu_hlo_type_of(B, lrows);
  tpu_hlo_value dkk = row_where(c, lk, cmp(c, TPU_HLO_EQ, lrows, spread(c, kk, &lit)), r - 2);
  tpu_hlo_value dk1k = row_where(c, lk, cmp(c, TPU_HLO_EQ, lrows, spread(c, k1, &lit)), r - 2);
  tpu_hlo_value dk1k1 = row_where(c, lk1, cmp(c, TPU_HLO_EQ, lrows, spread(c, k1, &lit)), r - 2);
  /* below the block: x_r -= l_rk x_k (and l_r,k+1 x_k+1) */
  tpu_hlo_value below1 = cmp(c, TPU_HLO_GT, rows, spread(c, kk, &xi));
  tpu_hlo_value below2 = cmp(c, TPU_HLO_GT, rows, spread(c, k1, &xi));
  tpu_hlo_value x1 = sub(c, x, mul(c, spread(c, lk, &xt), spread(c, xk, &xt)));
  tpu_hlo_value x2 = sub(c, x1, mul(c, spread(c, lk1, &xt), spread(c, xk1, &xt)));
  x = sel(c, and_(c, spread(c, one, &xb), below1), x1, sel(c, and_(c, spread(c, two, &xb), below2), x2, x));
  /* the block: x_k / d (1x1), or the 2x2 solve as sytrs writes it */
  tpu_hlo_type dt = *tpu_hlo_type_of(B, dkk);
  tpu_hlo_value cone = tpu_hlo_const_f64(B, &dt, 1.0);
  tpu_hlo_value inv = dvd(c, cone, hermitian ? as_type_of(c, un(c, TPU_HLO_REAL, dkk), dkk) : dkk);
  tpu_hlo_value safe = sel(c, two, dk1k, cone);
  tpu_hlo_value akm1 = dvd(c, dkk, hermitian ? conj_of(c, safe) : safe), ak = dvd(c, dk1k1, safe);
  tpu_hlo_value denom = sub(c, mul(c, akm1, ak), cone);
  denom = sel(c, two, denom, cone);
  tpu_hlo_type rt = *tpu_hlo_type_of(B, xk);
  tpu_hlo_value bkm1 = dvd(c, xk, spread(c, hermitian ? conj_of(c, safe) : safe, &rt));
  tpu_hlo_value bk = dvd(c, xk1, spread(c, safe, &rt));
  tpu_hlo_value nk = dvd(c, sub(c, mul(c, spread(c, ak, &rt), bkm1), bk), spread(c, denom, &rt));
  tpu_hlo_value nk1 = dvd(c, sub(c, mul(c, spread(c, akm1, &rt), bk), bkm1), spread(c, denom, &rt));
  tpu_hlo_value at_k = cmp(c, TPU_HLO_EQ, rows, spread(c, kk, &xi));
  tpu_hlo_value at_k1 = cmp(c, TPU_HLO_EQ, rows, spread(c, k1, &xi));
  /* hetrs scales by a real reciprocal: each part alone */
  tpu_hlo_value scaled = mul(c, xk, spread(c, inv, &rt));
  if (hermitian) {
    tpu_hlo_value xr = un(c, TPU_HLO_REAL, xk), xim = un(c, TPU_HLO_IMAG, xk);
    tpu_hlo_type xrt = *tpu_hlo_type_of(B, xr);
    tpu_hlo_value ir = spread(c, un(c, TPU_HLO_REAL, inv), &xrt);
    scaled = tpu_hlo_binary(B, TPU_HLO_COMPLEX, mul(c, xr, ir), mul(c, xim, ir));
  }
  x = sel(c, and_(c, spread(c, one, &xb), at_k), spread(c, scaled, &xt), x);
  x = sel(c, and_(c, spread(c, two, &xb), at_k), spread(c, nk, &xt), x);
  x = sel(c, and_(c, spread(c, two, &xb), at_k1), spread(c, nk1, &xt), x);
  s[0] = x;
  s[3] = sel(c, two, tpu_hlo_const_i64(B, &st, 1), izero);
}
static void ldl_forward_symmetric(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  ldl_forward_step(c, k, s, false);
}
static void ldl_forward_hermitian(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  ldl_forward_step(c, k, s, true);
}

/* One step of sytrs's second half, L^T x = y (L^H), at column k = n - 1 -
 * counter, where a negative pivot ends a 2x2 block (k - 1, k). State as
 * ldl_forward_step's. */
static void ldl_backward_step(tpu_lower_ctx *c, tpu_hlo_value counter, tpu_hlo_value *s, bool hermitian) {
  tpu_hlo_value x = s[0], ld = s[1];
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x), xi = xt;
  xi.dtype = TPU_S64;
  int r = xt.rank;
  int64_t n = xt.dims[r - 2];
  tpu_hlo_value k = sub(c, tpu_hlo_scalar_i64(B, TPU_S64, n - 1), counter);
  tpu_hlo_type st = *tpu_hlo_type_of(B, s[3]);
  tpu_hlo_value p = pick(c, s[2], r - 1, k);
  tpu_hlo_value izero = tpu_hlo_const_i64(B, &st, 0);
  tpu_hlo_value go = cmp(c, TPU_HLO_EQ, s[3], izero);
  tpu_hlo_value one = and_(c, go, cmp(c, TPU_HLO_GT, p, izero)), two = and_(c, go, cmp(c, TPU_HLO_LT, p, izero));
  tpu_hlo_value kk = spread(c, k, &st), km1 = plus_i(c, kk, -1);
  tpu_hlo_type xb = xt;
  xb.dtype = TPU_BOOL;
  tpu_hlo_value rows = index_along(c, x, r - 2);
  tpu_hlo_value lk = pick(c, ld, r - 1, k);                                        /* [batch, n, 1] */
  tpu_hlo_value lkm1 = pick(c, ld, r - 1, tpu_hlo_clamp(B, tpu_hlo_scalar_i64(B, TPU_S64, 0), plus_i(c, k, -1),
                                                          tpu_hlo_scalar_i64(B, TPU_S64, n - 1)));
  tpu_hlo_value lrows = index_along(c, lk, r - 2);
  tpu_hlo_type lit = *tpu_hlo_type_of(B, lrows), lt = *tpu_hlo_type_of(B, lk);
  tpu_hlo_value past = cmp(c, TPU_HLO_GT, lrows, spread(c, kk, &lit));
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &lt, 0.0);
  /* x_k -= sum_{r > k} l_rk x_r (conj l where Hermitian), and x_k-1 alike */
  tpu_hlo_value xpast = sel(c, cmp(c, TPU_HLO_GT, rows, spread(c, kk, &xi)), x, tpu_hlo_const_f64(B, &xt, 0.0));
  tpu_hlo_value sk = matmul(c, mT(c, sel(c, past, lk, zero), hermitian), xpast); /* [batch, 1, nrhs] */
  tpu_hlo_value skm1 = matmul(c, mT(c, sel(c, past, lkm1, zero), hermitian), xpast);
  tpu_hlo_value at_k = cmp(c, TPU_HLO_EQ, rows, spread(c, kk, &xi));
  tpu_hlo_value at_km1 = cmp(c, TPU_HLO_EQ, rows, spread(c, km1, &xi));
  tpu_hlo_value xk = row_where(c, x, at_k, r - 2), xkm1 = row_where(c, x, at_km1, r - 2);
  tpu_hlo_value act = or_(c, one, two);
  x = sel(c, and_(c, spread(c, act, &xb), at_k), spread(c, sub(c, xk, sk), &xt), x);
  x = sel(c, and_(c, spread(c, two, &xb), at_km1), spread(c, sub(c, xkm1, skm1), &xt), x);
  tpu_hlo_value kp = sel(c, one, plus_i(c, p, -1), plus_i(c, neg(c, p), -1));
  x = swap_lines(c, x, r - 2, kk, kp, spread(c, act, &xb));
  s[0] = x;
  s[3] = sel(c, two, tpu_hlo_const_i64(B, &st, 1), izero);
}
static void ldl_backward_symmetric(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  ldl_backward_step(c, k, s, false);
}
static void ldl_backward_hermitian(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  ldl_backward_step(c, k, s, true);
}

/* linalg_ldl_solve(LD, pivots, B, *, hermitian) */
static tpu_status_t ldl_solve_rule(tpu_lower_ctx *c) {
  tpu_dtype_t dt = OUT->dtype;
  if (!tpu_dtype_is_complex(dt) && dt != TPU_F32 && dt != TPU_F64)
    return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "\"ldl_solve_kernel_cpu\" not implemented for '%s'",
                           tpu_dtype_scalar_type(dt));
  bool hermitian = tpu_lower_bool(c, 3, false) && tpu_dtype_is_complex(dt);
  int r = OUT->rank;
  int64_t n = OUT->dims[r - 2];
  tpu_hlo_value x = tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, 2), OUT);
  tpu_hlo_type lt = *OUT;
  lt.dims[r - 1] = n;
  tpu_hlo_value ld = tpu_hlo_broadcast_to(B, tpu_lower_tensor(c, 0), &lt);
  tpu_hlo_type pt = lt;
  pt.dtype = TPU_S64;
  pt.dims[r - 2] = 1;
  tpu_hlo_value piv = tpu_hlo_broadcast_to(B, pivots_arg(c, 1), &pt);
  tpu_hlo_type st = pt;
  st.dims[r - 1] = 1;
  tpu_hlo_value s[4] = {x, ld, piv, tpu_hlo_const_i64(B, &st, 0)};
  if (tpu_hlo_type_numel(OUT) > 0) {
    tpu_lower_loop(c, n, 4, s, hermitian ? ldl_forward_hermitian : ldl_forward_symmetric);
    s[3] = tpu_hlo_const_i64(B, &st, 0);
    tpu_lower_loop(c, n, 4, s, hermitian ? ldl_backward_hermitian : ldl_backward_symmetric);
  }
  return done(c, s[0]);
}

/* --- QR ---------------------------------------------------------------------------
 * Householder QR as LAPACK's geqrf, with its reflector convention (larfg:
 * beta = -sign(re alpha) |x|, tau = (beta - alpha) / beta, no reflection for
 * a column already reduced), so R's signs match LAPACK's. Q = H_1 ... H_k
 * with H_i = I - tau_i v_i v_i^H is applied reflector by reflector. */

/* One column of geqrf. State: A ([batch, m, n]), tau ([batch, 1, k]). */
static void qr_step(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, s[0]);
  int r = t.rank;
  tpu_hlo_value col = pick(c, s[0], r - 1, k);
  tpu_hlo_type ct = *tpu_hlo_type_of(B, col), it = ct;
  it.dtype = TPU_S64;
  tpu_hlo_value crow = index_along(c, col, r - 2), kc = spread(c, k, &it);
  tpu_hlo_value at_k = cmp(c, TPU_HLO_EQ, crow, kc), below = cmp(c, TPU_HLO_GT, crow, kc);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &ct, 0.0);
  tpu_hlo_value alpha = pick(c, col, r - 2, k), xnorm2 = column_norm2(c, sel(c, below, col, zero));
  tpu_hlo_value amag = un(c, TPU_HLO_ABS, alpha);
  tpu_hlo_type at = *tpu_hlo_type_of(B, amag);
  tpu_hlo_value rzero = tpu_hlo_const_f64(B, &at, 0.0);
  tpu_hlo_value norm = un(c, TPU_HLO_SQRT, add(c, mul(c, amag, amag), xnorm2));
  tpu_hlo_value beta = sel(c, cmp(c, TPU_HLO_GE, un(c, TPU_HLO_REAL, alpha), rzero), neg(c, norm), norm);
  tpu_hlo_value skip = cmp(c, TPU_HLO_EQ, xnorm2, rzero);
  if (tpu_dtype_is_complex(t.dtype)) skip = and_(c, skip, cmp(c, TPU_HLO_EQ, un(c, TPU_HLO_IMAG, alpha), rzero));
  tpu_hlo_value bc = as_type_of(c, sel(c, skip, tpu_hlo_const_f64(B, &at, 1.0), beta), alpha);
  tpu_hlo_type st = *tpu_hlo_type_of(B, alpha);
  tpu_hlo_value one = tpu_hlo_const_f64(B, &st, 1.0);
  tpu_hlo_value tau = sel(c, skip, tpu_hlo_const_f64(B, &st, 0.0), dvd(c, sub(c, bc, alpha), bc));
  tpu_hlo_value denom = sel(c, skip, one, sub(c, alpha, bc));
  tpu_hlo_value v = sel(c, at_k, tpu_hlo_const_f64(B, &ct, 1.0), sel(c, below, dvd(c, col, spread(c, denom, &ct)), zero));
  /* the trailing columns: A - conj(tau) v (v^H A) */
  tpu_hlo_value vha = reduce_keep(c, mul(c, spread(c, conj_of(c, v), &t), s[0]), TPU_HLO_ADD, r - 2);
  tpu_hlo_value upd = sub(c, s[0], mul(c, spread(c, conj_of(c, tau), &t), mul(c, spread(c, v, &t), spread(c, vha, &t))));
  tpu_hlo_type tt = t;
  tt.dtype = TPU_S64;
  tpu_hlo_value cols = index_along(c, s[0], r - 1), kk = spread(c, k, &tt);
  tpu_hlo_value new_col = sel(c, spread(c, skip, &ct), col, sel(c, at_k, spread(c, as_type_of(c, beta, alpha), &ct),
                                                                 sel(c, below, v, col)));
  s[0] = sel(c, cmp(c, TPU_HLO_GT, cols, kk), upd, sel(c, cmp(c, TPU_HLO_EQ, cols, kk), spread(c, new_col, &t), s[0]));
  tpu_hlo_type taut = *tpu_hlo_type_of(B, s[1]), ti = taut;
  ti.dtype = TPU_S64;
  s[1] = sel(c, cmp(c, TPU_HLO_EQ, index_along(c, s[1], r - 1), spread(c, k, &ti)), spread(c, tau, &taut), s[1]);
}

/* geqrf of |a|: the packed reflectors and R, and tau ([batch, 1, min(m, n)]). */
static void qr_factor(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value *out_a, tpu_hlo_value *out_tau) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, a);
  int r = t.rank;
  int64_t k = t.dims[r - 2] < t.dims[r - 1] ? t.dims[r - 2] : t.dims[r - 1];
  t.dims[r - 2] = 1;
  t.dims[r - 1] = k;
  tpu_hlo_value s[2] = {a, tpu_hlo_const_f64(B, &t, 0.0)};
  tpu_lower_loop(c, k, 2, s, qr_step);
  *out_a = s[0];
  *out_tau = s[1];
}

/* Applying the reflectors. State: X, the packed reflectors ([batch, m, *]), tau
 * ([batch, 1, k]). The step functions differ in the order of the reflectors
 * (descending: H_k first), the side and conjugation (H^H). */
static void reflect(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s, bool descending, bool left, bool adjoint) {
  tpu_hlo_type at = *tpu_hlo_type_of(B, s[1]), xt = *tpu_hlo_type_of(B, s[0]);
  int r = at.rank;
  int64_t count = tpu_hlo_type_of(B, s[2])->dims[r - 1];
  tpu_hlo_value i = descending ? sub(c, tpu_hlo_scalar_i64(B, TPU_S64, count - 1), k) : k;
  tpu_hlo_value col = pick(c, s[1], r - 1, i);
  tpu_hlo_type ct = *tpu_hlo_type_of(B, col), it = ct;
  it.dtype = TPU_S64;
  tpu_hlo_value crow = index_along(c, col, r - 2), ic = spread(c, i, &it);
  tpu_hlo_value v = sel(c, cmp(c, TPU_HLO_EQ, crow, ic), tpu_hlo_const_f64(B, &ct, 1.0),
                        sel(c, cmp(c, TPU_HLO_GT, crow, ic), col, tpu_hlo_const_f64(B, &ct, 0.0)));
  tpu_hlo_value tau = pick(c, s[2], r - 1, i);
  if (adjoint) tau = conj_of(c, tau);
  tpu_hlo_value vh = mT(c, v, true);
  /* left: X - tau v (v^H X); right: X - tau (X v) v^H */
  tpu_hlo_value outer = left ? matmul(c, v, matmul(c, vh, s[0])) : matmul(c, matmul(c, s[0], v), vh);
  s[0] = sub(c, s[0], mul(c, spread(c, tau, &xt), outer));
}
static void reflect_left(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { reflect(c, k, s, true, true, false); }
static void reflect_left_adjoint(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  reflect(c, k, s, false, true, true);
}
static void reflect_right(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { reflect(c, k, s, false, false, false); }
static void reflect_right_adjoint(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) {
  reflect(c, k, s, true, false, true);
}

/* Q x (or Q^H x, x Q, x Q^H) for the reflectors |a|, |tau| ([batch, 1, k]). */
static tpu_hlo_value apply_q(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value tau, tpu_hlo_value x, bool left,
                             bool adjoint) {
  static const tpu_lower_step_fn steps[2][2] = {{reflect_right, reflect_right_adjoint}, {reflect_left, reflect_left_adjoint}};
  int r = tpu_hlo_rank(B, tau);
  tpu_hlo_value s[3] = {x, a, tau};
  tpu_lower_loop(c, tpu_hlo_type_of(B, tau)->dims[r - 1], 3, s, steps[left][adjoint]);
  return s[0];
}

/* The first |cols| columns of the identity of |a|'s rows, batched like |a|. */
static tpu_hlo_value eye_columns(tpu_lower_ctx *c, tpu_hlo_value a, int64_t cols) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, a);
  t.dims[t.rank - 1] = cols;
  return identity(c, &t);
}

/* linalg_householder_product(input, tau) */
static tpu_status_t householder_product_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype);
  tpu_hlo_value tau = vector_arg(c, 1, OUT->dtype);
  return done(c, apply_q(c, a, tau, eye_columns(c, a, OUT->dims[OUT->rank - 1]), true, false));
}

/* ormqr(self, input2 (tau), input3 (C), left, transpose) */
static tpu_status_t ormqr_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype);
  tpu_hlo_value tau = vector_arg(c, 1, OUT->dtype);
  tpu_hlo_value x = tpu_hlo_convert(B, tpu_lower_tensor(c, 2), OUT->dtype);
  return done(c, apply_q(c, a, tau, x, tpu_lower_bool(c, 3, true), tpu_lower_bool(c, 4, false)));
}

/* torchtpu::lstsq(A [.., m, n], B [.., m, k] (one batch), rcond, gels) ->
 * (X [.., n, k], residuals [.., k], rank [..], S [.., min(m, n)]). gels:
 * LAPACK's gels, QR of A (of A^H when m < n, for the minimum-norm
 * solution), full rank assumed, residuals from the rows of Q^H B past n.
 * Otherwise the minimum-norm solution through the SVD (of QR's triangle),
 * singular values at most rcond times the largest taken as zero, as gelsd
 * and gelss (gelsy's complete orthogonal factorization finds the same
 * solution); residuals ||A X - B||^2. The caller keeps what PyTorch returns
 * for its driver. */
static tpu_status_t lstsq_rule(tpu_lower_ctx *c) {
  tpu_dtype_t dt = OUT->dtype;
  tpu_hlo_value a = tensor_as(c, 0, dt), b = tensor_as(c, 1, dt), x, res, rank, sv;
  tpu_hlo_type at = *tpu_hlo_type_of(B, a);
  int r = at.rank;
  int64_t m = at.dims[r - 2], n = at.dims[r - 1];
  const tpu_hlo_type *res_t = &c->out_types[1], *rank_t = &c->out_types[2], *sv_t = &c->out_types[3];
  if (tpu_lower_bool(c, 3, false)) {
    tpu_hlo_value qa, tau;
    if (m >= n) {
      qr_factor(c, a, &qa, &tau);
      tpu_hlo_value qb = apply_q(c, qa, tau, b, true, true);
      tpu_hlo_value rr = keep_triangle(c, tpu_hlo_slice_dim(B, qa, r - 2, 0, n, 1), true);
      x = tri_solve(c, rr, tpu_hlo_slice_dim(B, qb, r - 2, 0, n, 1), true, false, false, NO_TRANSPOSE);
      res = m > n ? column_norm2(c, tpu_hlo_slice_dim(B, qb, r - 2, n, m, 1)) : tpu_hlo_const_f64(B, res_t, 0.0);
    } else { /* A = R^H Q^H: X = Q R^-H B */
      qr_factor(c, mT(c, a, true), &qa, &tau);
      tpu_hlo_value rr = keep_triangle(c, tpu_hlo_slice_dim(B, qa, r - 2, 0, m, 1), true);
      tpu_hlo_value y = tri_solve(c, rr, b, true, false, false, ADJOINT);
      x = apply_q(c, qa, tau, pad_end(c, y, r - 2, n - m, tpu_hlo_scalar_f64(B, dt, 0.0)), true, false);
      res = tpu_hlo_const_f64(B, res_t, 0.0);
    }
    rank = tpu_hlo_const_i64(B, rank_t, 0);
    sv = tpu_hlo_const_f64(B, sv_t, 0.0);
  } else {
    /* The sweeps run on the k x k triangle of a QR (k = min(m, n); of A^H
     * when wide), not on A: A = Q R gives X = R^+ Q^H B, A = R^H Q^H gives
     * X = Q [(R^H)^+ B; 0]. */
    bool wide = m < n;
    int64_t k = wide ? m : n;
    tpu_hlo_value qa, tau, f[3]; /* S, W, V of the core */
    qr_factor(c, wide ? mT(c, a, true) : a, &qa, &tau);
    tpu_hlo_value rr = keep_triangle(c, tpu_hlo_slice_dim(B, qa, r - 2, 0, k, 1), true);
    tpu_hlo_value rhs = wide ? b : tpu_hlo_slice_dim(B, apply_q(c, qa, tau, b, true, true), r - 2, 0, k, 1);
    jacobi_svd(c, wide ? mT(c, rr, true) : rr, f);
    tpu_hlo_type st = *tpu_hlo_type_of(B, f[0]);
    tpu_hlo_value cut = mul(c, spread(c, reduce_keep(c, f[0], TPU_HLO_MAX, r - 1), &st),
                            tpu_hlo_const_f64(B, &st, tpu_lower_float(c, 2, 0.0)));
    tpu_hlo_value kept = cmp(c, TPU_HLO_GT, f[0], cut);
    tpu_hlo_value safe = sel(c, kept, f[0], tpu_hlo_const_f64(B, &st, 1.0));
    tpu_hlo_value inv2 = sel(c, kept, dvd(c, tpu_hlo_const_f64(B, &st, 1.0), mul(c, safe, safe)),
                             tpu_hlo_const_f64(B, &st, 0.0));
    /* core^+ = V S^-2 W^H */
    tpu_hlo_value y = matmul(c, mT(c, f[1], true), rhs);
    y = mul(c, spread(c, as_type_of(c, mT(c, inv2, false), y), tpu_hlo_type_of(B, y)), y);
    x = matmul(c, f[2], y);
    if (wide) x = apply_q(c, qa, tau, pad_end(c, x, r - 2, n - m, tpu_hlo_scalar_f64(B, dt, 0.0)), true, false);
    res = column_norm2(c, sub(c, matmul(c, a, x), b));
    tpu_hlo_type kt = st;
    kt.dtype = TPU_S64;
    rank = tpu_lower_reduce(B, sel(c, kept, tpu_hlo_const_i64(B, &kt, 1), tpu_hlo_const_i64(B, &kt, 0)), TPU_HLO_ADD,
                            (int64_t[]){r - 1}, 1);
    sv = f[0];
  }
  tpu_lower_set_output(c, 0, x);
  tpu_lower_set_output(c, 1, tpu_hlo_reshape(B, res, res_t->rank, res_t->dims));
  tpu_lower_set_output(c, 2, tpu_hlo_reshape(B, rank, rank_t->rank, rank_t->dims));
  tpu_lower_set_output(c, 3, tpu_hlo_reshape(B, sv, sv_t->rank, sv_t->dims));
  return NULL;
}

/* geqrf(self) -> (a, tau): LAPACK's compact form, as householder_product and
 * ormqr read it. */
static tpu_status_t geqrf_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a, tau;
  qr_factor(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), OUT->dtype), &a, &tau);
  tpu_lower_set_output(c, 0, a);
  tpu_lower_set_output(c, 1, tpu_hlo_reshape(B, tau, c->out_types[1].rank, c->out_types[1].dims));
  return NULL;
}

/* linalg_qr(A, mode) -> (Q, R) */
static tpu_status_t qr_rule(tpu_lower_ctx *c) {
  const tpu_hlo_type *qt = &c->out_types[0], *rt = &c->out_types[1];
  tpu_hlo_value a, tau;
  qr_factor(c, tpu_hlo_convert(B, tpu_lower_tensor(c, 0), rt->dtype), &a, &tau);
  int r = rt->rank;
  tpu_lower_set_output(c, 1, keep_triangle(c, tpu_hlo_slice_dim(B, a, r - 2, 0, rt->dims[r - 2], 1), true));
  if (qt->rank < 2) /* mode "r" */
    tpu_lower_set_output(c, 0, tpu_hlo_const_f64(B, qt, 0.0));
  else
    tpu_lower_set_output(c, 0, apply_q(c, a, tau, eye_columns(c, a, qt->dims[r - 1]), true, false));
  return NULL;
}

const tpu_lower_rule tpu_rules_factor[] = {
    {{"linalg_cholesky_ex", "linalg_cholesky_ex.L"}, cholesky_rule, 0, 0},
    {{"cholesky", "cholesky.out"}, cholesky_rule, 0, 0},
    {{"_cholesky_solve_helper", "_cholesky_solve_helper.out"}, cholesky_solve_rule, 0, 0},
    {{"cholesky_inverse", "cholesky_inverse.out"}, cholesky_inverse_rule, 0, 0},
    {{"linalg_solve_triangular", "linalg_solve_triangular.out"}, solve_triangular_rule, 0, 0},
    {{"triangular_solve", "triangular_solve.X"}, triangular_solve_rule, 0, 0},
    {{"linalg_lu_factor_ex", "linalg_lu_factor_ex.out"}, lu_factor_rule, 0, 0},
    {{"linalg_lu", "linalg_lu.out"}, lu_rule, 0, 0},
    {{"lu_unpack", "lu_unpack.out"}, lu_unpack_rule, 0, 0},
    {{"linalg_lu_solve", "linalg_lu_solve.out"}, lu_solve_rule, 0, 0},
    {{"_linalg_det", "_linalg_det.result"}, det_rule, 0, 0},
    {{"_linalg_slogdet", "_linalg_slogdet.sign"}, slogdet_rule, 0, 0},
    {{"linalg_inv_ex", "linalg_inv_ex.inverse"}, inv_rule, 0, 0},
    {{"_linalg_solve_ex", "_linalg_solve_ex.result"}, solve_rule, 0, 0},
    {{"linalg_matrix_exp", "linalg_matrix_exp.out"}, matrix_exp_rule, 0, 0},
    {{"_linalg_svd", "_linalg_svd.U"}, svd_rule, 0, 0},
    {{"_linalg_eigh", "_linalg_eigh.eigenvalues"}, eigh_rule, 0, 0},
    {{"linalg_householder_product", "linalg_householder_product.out"}, householder_product_rule, 0, 0},
    {{"ormqr", "ormqr.out"}, ormqr_rule, 0, 0},
    {{"linalg_qr", "linalg_qr.out"}, qr_rule, 0, 0},
    {{"geqrf", "geqrf.a"}, geqrf_rule, 0, 0},
    {{"torchtpu::lstsq"}, lstsq_rule, 0, 0},
    {{"torchtpu::ldl_factor"}, ldl_factor_rule, 0, 0},
    {{"linalg_ldl_solve", "linalg_ldl_solve.out"}, ldl_solve_rule, 0, 0},
};
TPU_COUNT_RULES(factor);
