/* Factorizations and what is built on them: triangular solves
 * (linalg_solve_triangular, triangular_solve, on stablehlo.triangular_solve);
 * Cholesky (linalg_cholesky_ex, cholesky, cholesky_inverse,
 * _cholesky_solve_helper); LU with partial pivoting (linalg_lu_factor_ex,
 * linalg_lu, lu_unpack, linalg_lu_solve, _linalg_det, _linalg_slogdet,
 * linalg_inv_ex, _linalg_solve_ex); matrix_exp. The other factorizations
 * are svd.c's (SVD, Hermitian eigendecomposition), ldl.c's (Bunch-Kaufman
 * LDL), qr.c's (Householder QR) and eig.c's (general eigenproblems).
 *
 * The plugin has no LAPACK, so the factorizations are loops written in HLO
 * (a stablehlo.while over columns or rotations), following LAPACK's
 * conventions where PyTorch exposes them (pivots and info, the signs of R).
 * Matrices are the last two dims; the leading ones are a batch, broadcast
 * to the output's batch where PyTorch broadcasts (matrix.h). */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>

#include "lower/matrix.h"
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

/* --- loops ---------------------------------------------------------------------
 * A factorization is a loop (tpu_lower_loop) whose body is one step (a
 * column, a rotation); its state vectors keep size-1 dims (matrix.h). */

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
};
TPU_COUNT_RULES(factor);
