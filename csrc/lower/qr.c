/* Householder QR (linalg_qr, geqrf, linalg_householder_product, ormqr) and
 * least squares on it (linalg_lstsq).
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
    tpu_lower_jacobi_svd(c, wide ? mT(c, rr, true) : rr, f);
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

const tpu_lower_rule tpu_rules_qr[] = {
    {{"linalg_householder_product", "linalg_householder_product.out"}, householder_product_rule, 0, 0},
    {{"ormqr", "ormqr.out"}, ormqr_rule, 0, 0},
    {{"linalg_qr", "linalg_qr.out"}, qr_rule, 0, 0},
    {{"geqrf", "geqrf.a"}, geqrf_rule, 0, 0},
    {{"torchtpu::lstsq"}, lstsq_rule, 0, 0},
};
TPU_COUNT_RULES(qr);
