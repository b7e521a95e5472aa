/* Eigendecomposition of general matrices (linalg_eig, _linalg_eigvals,
 * linalg_eigvals.out) the way LAPACK's geev computes it, so that the
 * eigenvalues come in LAPACK's order and the eigenvectors with its
 * normalization: balancing (gebal: permutations that isolate eigenvalues,
 * then power-of-2 scaling of rows and columns), Householder reduction to
 * Hessenberg form (gehd2), shifted QR iterations to Schur form (lahqr:
 * Francis double shifts for real matrices, whose complex pairs end as 2x2
 * blocks in lanv2's standard form; Wilkinson single shifts for complex
 * ones), eigenvectors by back-substitution on the (complex) triangular form
 * (trevc), transformed back, unscaled (gebak) and normalized to unit norm
 * with their largest component real.
 *
 * The QR iterations run every matrix of the batch at once, each at its own
 * place: a loop over iterations (for each matrix not done: the deflation
 * search, then the end of a converged block, lanv2's 2x2 standardization, or
 * the shifts and the first reflector) with an inner loop over the bulge
 * chase (one reflector per step, 3x3 real, 2x2 complex). A step gathers the
 * rows and then the columns it turns (a window of 3 per matrix) and
 * scatters them back, so that it costs O(n), not O(n^2); the loops end when
 * every matrix has converged. The reflectors act on whole rows and columns
 * where LAPACK skips parts that are zero (the same result), and the elements
 * LAPACK sets explicitly (the bulge's column, the block's entries) are set
 * in the windows. Rounding differs from LAPACK's, so an eigenvalue that
 * converges at the edge of the deflation test may take one iteration more
 * or less: the order can then differ (for some float32 matrices from about
 * 30x30, whose order the CPU's float32 and float64 results disagree on
 * too), and a complex pair's vectors may come out negated. */
#include "lower/eig.h"

/* --- balancing (gebal) ---------------------------------------------------------
 * Permutations first: a row whose off-diagonal elements in columns 0..l are
 * zero isolates an eigenvalue and moves to l (the last such row, searching
 * again after each move), then a column zero off the diagonal in rows k..l
 * moves to k (the first such). Then sweeps scale row and column i of the
 * block k..l by a power of 2 that brings their norms within a factor 2,
 * until a sweep changes nothing (gebal's guards against overflow near the
 * type's limits are not repeated). The transforms are kept as the row order
 * (perm: balanced row j is row perm[j]) and the scale of each row. */

enum { P_K, P_L, P_PHASE, P_COUNT };

/* One move of the permutation search. State: A, perm (s64 [batch, 1, n]),
 * registers (k, l, phase: 0 rows, 1 columns, 2 done). */
static void permute_step(tpu_lower_ctx *c, tpu_hlo_value counter, tpu_hlo_value *s) {
  (void)counter;
  tpu_hlo_value a = s[0], perm = s[1], regs = s[2];
  int r = tpu_hlo_rank(B, a);
  int64_t n = tpu_hlo_type_of(B, a)->dims[r - 1];
  tpu_hlo_value k = field(c, regs, P_K), l = field(c, regs, P_L), phase = field(c, regs, P_PHASE);
  tpu_hlo_value rows = index_along(c, a, r - 2), cols = index_along(c, a, r - 1);
  tpu_hlo_value nz = cmpb(c, TPU_HLO_NE, a, const_like(c, a, 0.0));
  tpu_hlo_value off = cmp(c, TPU_HLO_NE, rows, cols);
  tpu_hlo_type bt = with_dtype(tpu_hlo_type_of(B, a), TPU_S64);
  tpu_hlo_value one = tpu_hlo_const_i64(B, &bt, 1), zero = tpu_hlo_const_i64(B, &bt, 0);
  /* rows j <= l with no nonzero off the diagonal in columns 0..l */
  tpu_hlo_value row_nz = and_(c, and_(c, nz, off), cmpb(c, TPU_HLO_LE, cols, l));
  tpu_hlo_value row_busy = reduce_keep(c, sel(c, row_nz, one, zero), TPU_HLO_MAX, r - 1); /* [batch, n, 1] */
  tpu_hlo_value jr_ok = and_(c, cmpb(c, TPU_HLO_EQ, row_busy, tpu_hlo_scalar_i64(B, TPU_S64, 0)),
                             cmpb(c, TPU_HLO_LE, index_along(c, row_busy, r - 2), l));
  tpu_hlo_value jr = reduce_keep(c, selb(c, jr_ok, index_along(c, row_busy, r - 2), tpu_hlo_scalar_i64(B, TPU_S64, -1)),
                                 TPU_HLO_MAX, r - 2);
  /* columns k <= j <= l with no nonzero off the diagonal in rows k..l */
  tpu_hlo_value col_nz = and_(c, and_(c, nz, off), and_(c, cmpb(c, TPU_HLO_GE, rows, k), cmpb(c, TPU_HLO_LE, rows, l)));
  tpu_hlo_value col_busy = reduce_keep(c, sel(c, col_nz, one, zero), TPU_HLO_MAX, r - 2); /* [batch, 1, n] */
  tpu_hlo_value ci = index_along(c, col_busy, r - 1);
  tpu_hlo_value jc_ok = and_(c, cmpb(c, TPU_HLO_EQ, col_busy, tpu_hlo_scalar_i64(B, TPU_S64, 0)),
                             and_(c, cmpb(c, TPU_HLO_GE, ci, k), cmpb(c, TPU_HLO_LE, ci, l)));
  tpu_hlo_value jc = reduce_keep(c, selb(c, jc_ok, ci, tpu_hlo_scalar_i64(B, TPU_S64, n)), TPU_HLO_MIN, r - 1);
  tpu_hlo_value in_rows = cmpb(c, TPU_HLO_EQ, phase, tpu_hlo_scalar_i64(B, TPU_S64, 0));
  tpu_hlo_value in_cols = cmpb(c, TPU_HLO_EQ, phase, tpu_hlo_scalar_i64(B, TPU_S64, 1));
  tpu_hlo_value found_r = and_(c, in_rows, cmpb(c, TPU_HLO_GE, jr, tpu_hlo_scalar_i64(B, TPU_S64, 0)));
  tpu_hlo_value found_c = and_(c, in_cols, cmpb(c, TPU_HLO_LT, jc, tpu_hlo_scalar_i64(B, TPU_S64, n)));
  /* swap j and m (symmetric permutation) where found */
  tpu_hlo_value swap = or_(c, found_r, found_c);
  tpu_hlo_value j = selb(c, found_r, jr, jc), m = selb(c, found_r, l, k);
  j = selb(c, swap, j, plus_i(c, k, 0));
  m = selb(c, swap, m, plus_i(c, k, 0));
  for (int pass = 0; pass < 2; pass++) {
    int dim = pass == 0 ? r - 2 : r - 1;
    tpu_hlo_value idx = index_along(c, a, dim);
    tpu_hlo_value at_j = cmpb(c, TPU_HLO_EQ, idx, j), at_m = cmpb(c, TPU_HLO_EQ, idx, m);
    tpu_hlo_value was_j = as_shape(c, row_where(c, a, at_j, dim), a);
    tpu_hlo_value was_m = as_shape(c, row_where(c, a, at_m, dim), a);
    a = sel(c, at_j, was_m, sel(c, at_m, was_j, a));
  }
  tpu_hlo_value pi = index_along(c, perm, r - 1);
  tpu_hlo_value p_j = cmpb(c, TPU_HLO_EQ, pi, j), p_m = cmpb(c, TPU_HLO_EQ, pi, m);
  tpu_hlo_value pj = as_shape(c, row_where(c, perm, p_j, r - 1), perm);
  tpu_hlo_value pm = as_shape(c, row_where(c, perm, p_m, r - 1), perm);
  perm = sel(c, p_j, pm, sel(c, p_m, pj, perm));
  /* the registers: a found row moves l up (all done at l == 0); a found
   * column moves k down; nothing found ends the phase */
  tpu_hlo_value last = and_(c, found_r, cmpb(c, TPU_HLO_EQ, l, tpu_hlo_scalar_i64(B, TPU_S64, 0)));
  tpu_hlo_value nl = selb(c, and_(c, found_r, not_(c, last)), plus_i(c, l, -1), l);
  tpu_hlo_value nk = selb(c, found_c, plus_i(c, k, 1), k);
  tpu_hlo_value nphase = selb(c, or_(c, last, and_(c, in_cols, not_(c, found_c))), tpu_hlo_scalar_i64(B, TPU_S64, 2),
                              selb(c, and_(c, in_rows, not_(c, found_r)), tpu_hlo_scalar_i64(B, TPU_S64, 1), phase));
  tpu_hlo_value f[P_COUNT] = {nk, nl, nphase};
  s[0] = a, s[1] = perm, s[2] = pack(c, f, P_COUNT);
}

static tpu_hlo_value permute_more(tpu_lower_ctx *c, const tpu_hlo_value *s) {
  return any(c, cmpb(c, TPU_HLO_LT, field(c, s[2], P_PHASE), tpu_hlo_scalar_i64(B, TPU_S64, 2)));
}

enum { S_K, S_L, S_CHANGED, S_DONE, S_COUNT };

/* The sum of |x|^2 (real) over |dim| where |mask|, kept. */
static tpu_hlo_value norm2_where(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value mask, int dim) {
  tpu_hlo_value m = absv(c, x);
  m = selb(c, mask, m, const_like(c, m, 0.0));
  return reduce_keep(c, mul(c, m, m), TPU_HLO_ADD, dim);
}

/* The smallest j >= 0 with x 2^j >= y 2^-(j + 1) (|up|) or with
 * x 2^-(j + 1) < y 2^j: how many times gebal's scaling loops double (halve)
 * a column against a row. x, y > 0 real. */
static tpu_hlo_value doublings(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y, bool up) {
  tpu_hlo_type ft = *tpu_hlo_type_of(B, x);
  tpu_hlo_type it = with_dtype(&ft, TPU_S64);
  tpu_dtype_t dt = ft.dtype;
  tpu_hlo_value ratio = up ? dvd(c, y, x) : dvd(c, x, y);
  tpu_hlo_value e = dvd(c, un(c, TPU_HLO_LOG, ratio), tpu_hlo_const_f64(B, &ft, M_LN2));
  tpu_hlo_value half = mul(c, sub(c, e, tpu_hlo_const_f64(B, &ft, 1.0)), tpu_hlo_const_f64(B, &ft, 0.5));
  tpu_hlo_value j = up ? un(c, TPU_HLO_CEIL, half) : add(c, un(c, TPU_HLO_FLOOR, half), tpu_hlo_const_f64(B, &ft, 1.0));
  j = tpu_hlo_clamp(B, tpu_hlo_scalar_f64(B, dt, 0.0), j, tpu_hlo_scalar_f64(B, dt, dt == TPU_F64 ? 500.0 : 60.0));
  j = tpu_hlo_convert(B, j, TPU_S64);
  /* the logarithm is within an ulp: settle the boundary exactly */
  for (int fix = 0; fix < 2; fix++) {
    tpu_hlo_value jj = fix == 0 ? j : plus_i(c, j, -1);
    tpu_hlo_value lhs = up ? mul(c, x, pow2(c, jj, dt)) : mul(c, x, pow2(c, neg(c, plus_i(c, jj, 1)), dt));
    tpu_hlo_value rhs = up ? mul(c, y, pow2(c, neg(c, plus_i(c, jj, 1)), dt)) : mul(c, y, pow2(c, jj, dt));
    tpu_hlo_value holds = up ? cmp(c, TPU_HLO_GE, lhs, rhs) : cmp(c, TPU_HLO_LT, lhs, rhs);
    if (fix == 0) j = sel(c, holds, j, plus_i(c, j, 1));
    else j = sel(c, and_(c, holds, cmp(c, TPU_HLO_GT, j, tpu_hlo_const_i64(B, &it, 0))), plus_i(c, j, -1), j);
  }
  return j;
}

/* One row and column of a scaling sweep: i = counter mod n. State: A,
 * scale (real [batch, 1, n]), registers (k, l, changed this sweep, done). */
static void scale_step(tpu_lower_ctx *c, tpu_hlo_value counter, tpu_hlo_value *s) {
  tpu_hlo_value a = s[0], scale = s[1], regs = s[2];
  int r = tpu_hlo_rank(B, a);
  int64_t n = tpu_hlo_type_of(B, a)->dims[r - 1];
  tpu_dtype_t rt = tpu_hlo_dtype(B, scale);
  tpu_hlo_value i = tpu_hlo_binary(B, TPU_HLO_REM, counter, tpu_hlo_scalar_i64(B, TPU_S64, n));
  tpu_hlo_value k = field(c, regs, S_K), l = field(c, regs, S_L), changed = field(c, regs, S_CHANGED),
                done = field(c, regs, S_DONE);
  tpu_hlo_value is0 = cmpb(c, TPU_HLO_EQ, as_shape(c, i, k), tpu_hlo_scalar_i64(B, TPU_S64, 0));
  changed = selb(c, is0, tpu_hlo_scalar_i64(B, TPU_S64, 0), changed);
  tpu_hlo_value col = pick(c, a, r - 1, i), row = pick(c, a, r - 2, i); /* [batch, n, 1], [batch, 1, n] */
  tpu_hlo_value ci = index_along(c, col, r - 2), ri = index_along(c, row, r - 1);
  tpu_hlo_value in_kl_c = and_(c, cmpb(c, TPU_HLO_GE, ci, k), cmpb(c, TPU_HLO_LE, ci, l));
  tpu_hlo_value in_kl_r = and_(c, cmpb(c, TPU_HLO_GE, ri, k), cmpb(c, TPU_HLO_LE, ri, l));
  tpu_hlo_value cn = un(c, TPU_HLO_SQRT, norm2_where(c, col, in_kl_c, r - 2));
  tpu_hlo_value rn = un(c, TPU_HLO_SQRT, norm2_where(c, row, in_kl_r, r - 1));
  tpu_hlo_type ft = *tpu_hlo_type_of(B, cn);
  tpu_hlo_value zero = tpu_hlo_const_f64(B, &ft, 0.0);
  tpu_hlo_value ii = as_shape(c, i, k);
  tpu_hlo_value active = and_(c, and_(c, cmpb(c, TPU_HLO_EQ, done, tpu_hlo_scalar_i64(B, TPU_S64, 0)),
                                      and_(c, cmp(c, TPU_HLO_GE, ii, k), cmp(c, TPU_HLO_LE, ii, l))),
                              and_(c, cmp(c, TPU_HLO_GT, cn, zero), cmp(c, TPU_HLO_GT, rn, zero)));
  tpu_hlo_value safe_c = sel(c, active, cn, tpu_hlo_const_f64(B, &ft, 1.0));
  tpu_hlo_value safe_r = sel(c, active, rn, tpu_hlo_const_f64(B, &ft, 1.0));
  tpu_hlo_value j1 = doublings(c, safe_c, safe_r, true);
  tpu_hlo_value c1 = mul(c, safe_c, pow2(c, j1, rt)), r1 = mul(c, safe_r, pow2(c, neg(c, j1), rt));
  tpu_hlo_value j2 = doublings(c, c1, r1, false);
  tpu_hlo_value e = sub(c, j1, j2);
  tpu_hlo_value f = pow2(c, e, rt), g = pow2(c, neg(c, e), rt);
  tpu_hlo_value sum = add(c, mul(c, safe_c, f), mul(c, safe_r, g));
  tpu_hlo_value worth = cmp(c, TPU_HLO_LT, sum, mul(c, tpu_hlo_const_f64(B, &ft, 0.95), add(c, safe_c, safe_r)));
  tpu_hlo_value old = at_row(c, scale, ii);
  double sfmin1 = safmin_of(rt) / ulp_of(rt), sfmax1 = 1.0 / sfmin1;
  tpu_hlo_value one = tpu_hlo_const_f64(B, &ft, 1.0);
  tpu_hlo_value too_small = and_(c, and_(c, cmp(c, TPU_HLO_LT, f, one), cmp(c, TPU_HLO_LT, old, one)),
                                 cmp(c, TPU_HLO_LE, mul(c, f, old), tpu_hlo_const_f64(B, &ft, sfmin1)));
  tpu_hlo_value too_big = and_(c, and_(c, cmp(c, TPU_HLO_GT, f, one), cmp(c, TPU_HLO_GT, old, one)),
                               cmp(c, TPU_HLO_GE, old, dvd(c, tpu_hlo_const_f64(B, &ft, sfmax1), f)));
  tpu_hlo_value go = and_(c, and_(c, active, worth), not_(c, or_(c, too_small, too_big)));
  tpu_hlo_value fs = sel(c, go, f, one), gs = sel(c, go, g, one);
  scale = mul(c, scale, selb(c, cmpb(c, TPU_HLO_EQ, index_along(c, scale, r - 1), ii), as_shape(c, fs, scale),
                            const_like(c, scale, 1.0)));
  /* row i (columns k..) times g, column i (rows ..l) times f */
  tpu_hlo_value rows = index_along(c, a, r - 2), cols = index_along(c, a, r - 1);
  tpu_hlo_value in_row = and_(c, cmpb(c, TPU_HLO_EQ, rows, ii), cmpb(c, TPU_HLO_GE, cols, k));
  tpu_hlo_value in_col = and_(c, cmpb(c, TPU_HLO_EQ, cols, ii), cmpb(c, TPU_HLO_LE, rows, l));
  tpu_dtype_t dt = tpu_hlo_dtype(B, a);
  a = selb(c, in_row, bin_matched(c, TPU_HLO_MUL, a, tpu_hlo_convert(B, gs, dt)), a);
  a = selb(c, in_col, bin_matched(c, TPU_HLO_MUL, a, tpu_hlo_convert(B, fs, dt)), a);
  changed = selb(c, go, tpu_hlo_scalar_i64(B, TPU_S64, 1), changed);
  tpu_hlo_value last = cmpb(c, TPU_HLO_EQ, ii, tpu_hlo_scalar_i64(B, TPU_S64, n - 1));
  done = selb(c, and_(c, last, cmpb(c, TPU_HLO_EQ, changed, tpu_hlo_scalar_i64(B, TPU_S64, 0))),
              tpu_hlo_scalar_i64(B, TPU_S64, 1), done);
  tpu_hlo_value fl[S_COUNT] = {k, l, changed, done};
  s[0] = a, s[1] = scale, s[2] = pack(c, fl, S_COUNT);
}

static tpu_hlo_value scale_more(tpu_lower_ctx *c, const tpu_hlo_value *s) {
  return any(c, cmpb(c, TPU_HLO_EQ, field(c, s[2], S_DONE), tpu_hlo_scalar_i64(B, TPU_S64, 0)));
}

/* gebal('B') of |a|: the balanced matrices, the row order and scales, ilo
 * and ihi (s64 [batch, 1, 1]). */
static void balance(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value *out_a, tpu_hlo_value *out_perm,
                    tpu_hlo_value *out_scale, tpu_hlo_value *out_ilo, tpu_hlo_value *out_ihi) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, a);
  int r = t.rank;
  int64_t n = t.dims[r - 1];
  tpu_hlo_type vt = with_dtype(&t, TPU_S64);
  vt.dims[r - 2] = 1;
  tpu_hlo_type it = scalar_type(c, a, TPU_S64);
  tpu_hlo_value regs[P_COUNT] = {tpu_hlo_const_i64(B, &it, 0), tpu_hlo_const_i64(B, &it, n - 1),
                                 tpu_hlo_const_i64(B, &it, 0)};
  tpu_hlo_value s[3] = {a, tpu_hlo_iota(B, &vt, r - 1), pack(c, regs, P_COUNT)};
  tpu_lower_loop_while(c, 2 * n + 2, 3, s, permute_step, permute_more);
  tpu_hlo_value k = field(c, s[2], P_K), l = field(c, s[2], P_L);
  *out_perm = s[1];
  tpu_hlo_type st = with_dtype(&vt, tpu_dtype_real(t.dtype));
  tpu_hlo_value sregs[S_COUNT] = {k, l, tpu_hlo_const_i64(B, &it, 0), tpu_hlo_const_i64(B, &it, 0)};
  tpu_hlo_value ss[3] = {s[0], tpu_hlo_const_f64(B, &st, 1.0), pack(c, sregs, S_COUNT)};
  /* each sweep brings the norms within the factor at once; a few sweeps settle */
  tpu_lower_loop_while(c, 40 * n, 3, ss, scale_step, scale_more);
  *out_a = ss[0];
  *out_scale = ss[1];
  *out_ilo = k;
  *out_ihi = l;
}

/* --- Hessenberg reduction (gehd2) ------------------------------------------------ */

/* Column i of gehd2 (all i, the reflector only where ilo <= i < ihi). State:
 * A, Z (or a placeholder), registers (ilo, ihi). */
static void hessenberg_step(tpu_lower_ctx *c, tpu_hlo_value i, tpu_hlo_value *s, bool vectors) {
  tpu_hlo_value a = s[0], regs = s[2];
  int r = tpu_hlo_rank(B, a);
  tpu_hlo_value ilo = field(c, regs, 0), ihi = field(c, regs, 1);
  tpu_hlo_value ii = as_shape(c, i, ilo);
  tpu_hlo_value col = pick(c, a, r - 1, i); /* [batch, n, 1] */
  tpu_hlo_value rows = index_along(c, col, r - 2);
  tpu_hlo_value active = and_(c, cmp(c, TPU_HLO_GE, ii, ilo), cmp(c, TPU_HLO_LT, ii, ihi));
  tpu_hlo_value at_top = cmpb(c, TPU_HLO_EQ, rows, plus_i(c, ii, 1));
  tpu_hlo_value below = and_(c, cmpb(c, TPU_HLO_GT, rows, plus_i(c, ii, 1)), cmpb(c, TPU_HLO_LE, rows, ihi));
  tpu_hlo_value alpha = row_where(c, col, at_top, r - 2);
  tpu_hlo_value beta, tau, scale;
  larfg(c, alpha, norm2_where(c, col, below, r - 2), &beta, &tau, &scale);
  tau = selb(c, active, tau, const_like(c, tau, 0.0));
  tpu_hlo_value v = selb(c, below, bin_matched(c, TPU_HLO_MUL, col, scale), const_like(c, col, 0.0));
  v = selb(c, at_top, const_like(c, col, 1.0), v);
  tpu_hlo_value vh = mT(c, v, true);
  /* A H, then H^H A, then Z H (H = I - tau v v^H); inactive matrices keep
   * their values exactly (NaNs included) */
  tpu_hlo_value a0 = a;
  tpu_hlo_value w = matmul(c, a, v);
  a = sub(c, a, bin_matched(c, TPU_HLO_MUL, matmul(c, w, vh), tau));
  tpu_hlo_value u = matmul(c, vh, a);
  a = selb(c, active, sub(c, a, bin_matched(c, TPU_HLO_MUL, matmul(c, v, u), conj_of(c, tau))), a0);
  if (vectors) s[1] = selb(c, active, sub(c, s[1], bin_matched(c, TPU_HLO_MUL, matmul(c, matmul(c, s[1], v), vh), tau)), s[1]);
  /* column i: beta, then zeros */
  tpu_hlo_value arows = index_along(c, a, r - 2), acols = index_along(c, a, r - 1);
  tpu_hlo_value in_col = and_(c, cmpb(c, TPU_HLO_EQ, acols, ii), as_shape(c, active, arows));
  tpu_hlo_value newcol = selb(c, at_top, as_type_of(c, beta, a), selb(c, below, const_like(c, col, 0.0), col));
  a = selb(c, in_col, as_shape(c, newcol, a), a);
  s[0] = a;
}
static void hessenberg_vectors(tpu_lower_ctx *c, tpu_hlo_value i, tpu_hlo_value *s) { hessenberg_step(c, i, s, true); }
static void hessenberg_values(tpu_lower_ctx *c, tpu_hlo_value i, tpu_hlo_value *s) { hessenberg_step(c, i, s, false); }

/* --- the rules -------------------------------------------------------------------- */

/* The Schur form of |a| (real or complex [batch, n, n]) as geev reaches it:
 * out_t (quasi-)triangular, out_z the Schur vectors of the balanced matrix
 * (when |vectors|), the balancing (row order, scales), info. */
typedef struct schur {
  tpu_hlo_value t, z, perm, scale, info;
} schur;

static schur schur_of(tpu_lower_ctx *c, tpu_hlo_value a, bool vectors) {
  tpu_hlo_type at = *tpu_hlo_type_of(B, a);
  int64_t n = at.dims[2];
  schur out;
  tpu_hlo_value ilo, ihi;
  balance(c, a, &a, &out.perm, &out.scale, &ilo, &ihi);
  tpu_hlo_value hregs[2] = {ilo, ihi};
  tpu_hlo_value hs[3] = {a, vectors ? identity(c, &at) : const_like(c, ilo, 0.0), pack(c, hregs, 2)};
  tpu_lower_loop(c, n - 1, 3, hs, vectors ? hessenberg_vectors : hessenberg_values);
  tpu_hlo_type it = scalar_type(c, a, TPU_S64);
  tpu_hlo_value regs[R_COUNT] = {ihi, ilo, tpu_hlo_const_i64(B, &it, n + 8), tpu_hlo_const_i64(B, &it, 0),
                                 tpu_hlo_const_i64(B, &it, 0), tpu_hlo_const_i64(B, &it, 0), ilo, ihi};
  /* padded: one zero row and column in front, two behind */
  int64_t lo[3] = {0, 1, 1}, hi[3] = {0, 2, 2}, in[3] = {0};
  tpu_hlo_value zero = tpu_hlo_scalar_f64(B, at.dtype, 0.0);
  tpu_hlo_value qs[3] = {tpu_hlo_pad(B, hs[0], zero, lo, hi, in),
                         vectors ? tpu_hlo_pad(B, hs[1], zero, lo, hi, in) : hs[1], pack(c, regs, R_COUNT)};
  int64_t max = 30 * (n > 10 ? n : 10) * n * (n + 1) + 1;
  if (vectors) {
    tpu_lower_loop_while(c, max, 3, qs, tpu_lower_hqr_vectors, tpu_lower_hqr_more_vectors);
  } else {
    tpu_hlo_value q2[2] = {qs[0], qs[2]};
    tpu_lower_loop_while(c, max, 2, q2, tpu_lower_hqr_values, tpu_lower_hqr_more_values);
    qs[0] = q2[0], qs[2] = q2[1];
  }
  int64_t from[3] = {0, 1, 1}, to[3] = {at.dims[0], n + 1, n + 1}, step[3] = {1, 1, 1};
  out.t = tpu_hlo_slice(B, qs[0], from, to, step);
  out.z = vectors ? tpu_hlo_slice(B, qs[1], from, to, step) : TPU_HLO_NONE;
  out.info = field(c, qs[2], R_INFO);
  return out;
}

/* The eigenvalues ([batch, 1, n] complex) of the real Schur form |t|; the
 * pairs' first and second positions (i1 [batch, 1, n]); and (|out_u| not
 * NULL) the unitary that makes t triangular: I but for each pair's 2x2
 * block, whose first column is the eigenvector of the block's first
 * eigenvalue, scaled as trevc scales it (real positive first element when
 * |b| >= |c|, else a positive imaginary second one). */
static tpu_hlo_value schur_eigenvalues(tpu_lower_ctx *c, tpu_hlo_value t, tpu_hlo_value *out_first,
                                       tpu_hlo_value *out_second, tpu_hlo_value *out_u) {
  int r = tpu_hlo_rank(B, t);
  tpu_dtype_t ct = complex_type(tpu_hlo_dtype(B, t));
  /* sub_at[j] = t(j+1, j), sup_at[j] = t(j, j+1) */
  tpu_hlo_value dg = band(c, t, 0), sub_at = band(c, t, 1), sup_at = shift(c, band(c, t, -1), -1);
  tpu_hlo_value zero = const_like(c, dg, 0.0), one = const_like(c, dg, 1.0);
  tpu_hlo_value first = cmp(c, TPU_HLO_NE, sub_at, zero);
  tpu_hlo_value second = cmp(c, TPU_HLO_NE, shift(c, sub_at, 1), zero);
  tpu_hlo_value wi = mul(c, un(c, TPU_HLO_SQRT, absv(c, sup_at)), un(c, TPU_HLO_SQRT, absv(c, sub_at)));
  wi = sel(c, first, wi, zero);
  tpu_hlo_value im = sel(c, second, neg(c, shift(c, wi, 1)), wi);
  *out_first = first;
  *out_second = second;
  if (out_u != NULL) {
    tpu_hlo_value flip =
        and_(c, cmp(c, TPU_HLO_GE, absv(c, sup_at), absv(c, sub_at)), cmp(c, TPU_HLO_LT, sup_at, zero));
    tpu_hlo_value sgn = sel(c, flip, neg(c, one), one);
    tpu_hlo_value u0 = mul(c, sgn, sup_at), u1 = mul(c, sgn, wi);
    tpu_hlo_value nrm = sel(c, first, un(c, TPU_HLO_SQRT, add(c, mul(c, u0, u0), mul(c, u1, u1))), one);
    tpu_hlo_value g0 = sel(c, first, dvd(c, u0, nrm), one);                     /* real */
    tpu_hlo_value g1 = complex_of(c, zero, sel(c, first, dvd(c, u1, nrm), zero)); /* imaginary */
    tpu_hlo_type ut = with_dtype(tpu_hlo_type_of(B, t), ct), it = with_dtype(&ut, TPU_S64);
    tpu_hlo_value ri = tpu_hlo_iota(B, &it, r - 2), ci = tpu_hlo_iota(B, &it, r - 1);
    tpu_hlo_value diag = tpu_hlo_convert(B, sel(c, second, shift(c, g0, 1), g0), ct);
    tpu_hlo_value u = selb(c, cmp(c, TPU_HLO_EQ, ri, ci), diag, tpu_hlo_const_f64(B, &ut, 0.0));
    /* (k + 1, k) in a pair's first column, (k, k + 1) in its second */
    u = selb(c, and_(c, cmp(c, TPU_HLO_EQ, ri, plus_i(c, ci, 1)), as_shape(c, first, ri)), g1, u);
    u = selb(c, and_(c, cmp(c, TPU_HLO_EQ, plus_i(c, ri, 1), ci), as_shape(c, second, ri)), shift(c, g1, 1), u);
    *out_u = u;
  }
  return tpu_hlo_convert(B, complex_of(c, dg, im), ct);
}

/* One row of trevc's back-substitution, for every eigenvector at once:
 * row r = n - 1 - counter of X, x_rj = -(t_r,r+1: x_r+1:,j) / (t_rr - w_j)
 * for j > r, a divisor smaller than smin taken as smin. State: X
 * ([batch, n, n], the identity at first), T, w ([batch, 1, n]). */
static void trevc_step(tpu_lower_ctx *c, tpu_hlo_value counter, tpu_hlo_value *s) {
  tpu_hlo_value x = s[0], t = s[1], w = s[2];
  tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
  int64_t n = xt.dims[2];
  tpu_dtype_t rt = tpu_dtype_real(xt.dtype);
  double ulp = ulp_of(rt), smlnum = safmin_of(rt) * ((double)n / ulp);
  tpu_hlo_value r = sub(c, tpu_hlo_scalar_i64(B, TPU_S64, n - 1), counter);
  tpu_hlo_value row = pick(c, t, 1, r);               /* [batch, 1, n] */
  tpu_hlo_value sum = matmul(c, row, x);              /* over columns past r (and t_rr x_rr where j == r) */
  tpu_hlo_value cols = index_along(c, row, 2);
  tpu_hlo_value rr = as_shape(c, r, cols);
  tpu_hlo_value d = sub(c, as_shape(c, row_where(c, row, cmp(c, TPU_HLO_EQ, cols, rr), 2), w), w);
  tpu_hlo_value aw = cabs1(c, w);
  tpu_hlo_value smin = maxv(c, mul(c, aw, const_like(c, aw, ulp)), const_like(c, aw, smlnum));
  d = sel(c, cmp(c, TPU_HLO_LT, cabs1(c, d), smin), as_type_of(c, smin, d), d);
  tpu_hlo_value xr = neg(c, dvd(c, sum, d));
  tpu_hlo_value old = pick(c, x, 1, r);
  tpu_hlo_value starts3[3] = {tpu_hlo_scalar_i64(B, TPU_S64, 0), r, tpu_hlo_scalar_i64(B, TPU_S64, 0)};
  s[0] = tpu_hlo_dynamic_update_slice(B, x, sel(c, cmp(c, TPU_HLO_GT, cols, rr), xr, old), starts3);
}

/* The right eigenvectors of the upper triangular |t| ([batch, n, n]
 * complex) with eigenvalues |w| ([batch, 1, n], its diagonal), as trevc
 * finds them: for eigenvalue j, x_j = 1, the rows below 0 and those above
 * solved by back-substitution; columns of [batch, n, n]. */
static tpu_hlo_value triangular_eigenvectors(tpu_lower_ctx *c, tpu_hlo_value t, tpu_hlo_value w) {
  tpu_hlo_type tt = *tpu_hlo_type_of(B, t);
  tpu_hlo_value s[3] = {identity(c, &tt), t, w};
  tpu_lower_loop(c, tt.dims[2], 3, s, trevc_step);
  return s[0];
}

/* Each column of |v| ([batch, n, n] complex) scaled to unit norm; a column
 * where |rotate| ([batch, 1, n]) turned so that its largest element (the
 * first of the largest) is real, with the sign of |first_real|: its real
 * part's where that is larger than its imaginary part in magnitude, else
 * positive (LAPACK's lartg before 3.10, as geev uses it), or always
 * positive. */
static tpu_hlo_value normalize_columns(tpu_lower_ctx *c, tpu_hlo_value v, tpu_hlo_value rotate, bool lartg) {
  int r = tpu_hlo_rank(B, v);
  tpu_hlo_value re = un(c, TPU_HLO_REAL, v), im = un(c, TPU_HLO_IMAG, v);
  tpu_hlo_value mag2 = add(c, mul(c, re, re), mul(c, im, im));
  tpu_hlo_value nrm = un(c, TPU_HLO_SQRT, reduce_keep(c, mag2, TPU_HLO_ADD, r - 2));
  nrm = sel(c, cmp(c, TPU_HLO_EQ, nrm, const_like(c, nrm, 0.0)), const_like(c, nrm, 1.0), nrm);
  v = dvd(c, v, as_shape(c, tpu_hlo_convert(B, nrm, tpu_hlo_dtype(B, v)), v));
  re = un(c, TPU_HLO_REAL, v), im = un(c, TPU_HLO_IMAG, v);
  mag2 = add(c, mul(c, re, re), mul(c, im, im));
  tpu_hlo_value big = reduce_keep(c, mag2, TPU_HLO_MAX, r - 2);
  tpu_hlo_value rows = index_along(c, v, r - 2);
  tpu_hlo_type rt = *tpu_hlo_type_of(B, rows);
  tpu_hlo_value kk = reduce_keep(c, sel(c, cmp(c, TPU_HLO_EQ, mag2, as_shape(c, big, mag2)), rows,
                                        tpu_hlo_const_i64(B, &rt, rt.dims[r - 2])),
                                 TPU_HLO_MIN, r - 2);
  tpu_hlo_value at_k = cmp(c, TPU_HLO_EQ, rows, as_shape(c, kk, rows));
  tpu_hlo_value f = row_where(c, re, at_k, r - 2), g = row_where(c, im, at_k, r - 2);
  tpu_hlo_value mag = un(c, TPU_HLO_SQRT, add(c, mul(c, f, f), mul(c, g, g)));
  tpu_hlo_value zero = const_like(c, f, 0.0);
  tpu_hlo_value rr = mag;
  if (lartg) {
    tpu_hlo_value negative = and_(c, cmp(c, TPU_HLO_GT, absv(c, f), absv(c, g)), cmp(c, TPU_HLO_LT, f, zero));
    rr = sel(c, negative, neg(c, mag), mag);
    rr = sel(c, cmp(c, TPU_HLO_EQ, g, zero), f, sel(c, cmp(c, TPU_HLO_EQ, f, zero), g, rr));
  }
  tpu_hlo_value turn = and_(c, rotate, cmp(c, TPU_HLO_NE, rr, zero));
  tpu_hlo_value safe = sel(c, turn, rr, const_like(c, rr, 1.0));
  tpu_hlo_value factor = sel(c, turn, dvd(c, complex_of(c, f, neg(c, g)), complex_of(c, safe, zero)),
                             complex_of(c, const_like(c, f, 1.0), zero));
  v = mul(c, v, as_shape(c, factor, v));
  /* the turned element is real exactly */
  tpu_hlo_value exact = and_(c, at_k, as_shape(c, turn, at_k));
  return sel(c, exact, complex_of(c, un(c, TPU_HLO_REAL, v), const_like(c, re, 0.0)), v);
}

/* Undoes gebal on the rows of |v|: scale, then the row order. */
static tpu_hlo_value unbalance(tpu_lower_ctx *c, tpu_hlo_value v, tpu_hlo_value perm, tpu_hlo_value scale) {
  int r = tpu_hlo_rank(B, v);
  tpu_dtype_t dt = tpu_hlo_dtype(B, v);
  v = mul(c, v, as_shape(c, tpu_hlo_convert(B, mT(c, scale, false), dt), v));
  /* P[q, j] = (perm[j] == q): original row q is balanced row j */
  tpu_hlo_value rows = index_along(c, v, r - 2);
  tpu_hlo_value p = sel(c, cmp(c, TPU_HLO_EQ, as_shape(c, perm, rows), rows), const_like(c, v, 1.0), const_like(c, v, 0.0));
  return matmul(c, p, v);
}

/* linalg_eig(A) -> (eigenvalues, eigenvectors); _linalg_eigvals(A) ->
 * eigenvalues; linalg_eigvals.out. */
static tpu_status_t eig_rule(tpu_lower_ctx *c) {
  tpu_dtype_t in = c->args[0].dtype;
  bool vectors = c->num_outputs > 1 && c->out_types[1].dtype != TPU_INVALID;
  bool cplx = tpu_dtype_is_complex(in);
  const tpu_lower_arg *arg = &c->args[0];
  int64_t n = arg->sizes[arg->rank - 1], bn = 1;
  for (int d = 0; d < arg->rank - 2; d++) bn *= arg->sizes[d];
  if (bn * n == 0) {
    tpu_lower_set_output(c, 0, tpu_hlo_const_f64(B, &c->out_types[0], 0.0));
    if (vectors) tpu_lower_set_output(c, 1, tpu_hlo_const_f64(B, &c->out_types[1], 0.0));
    return NULL;
  }
  /* one batch dim */
  tpu_hlo_value a = tpu_hlo_reshape(B, tensor_as(c, 0, in), 3, (int64_t[]){bn, n, n});
  const int64_t all[3] = {0, 1, 2};
  if (vectors) {
    tpu_hlo_value finite = un(c, TPU_HLO_IS_FINITE, cplx ? cabs1(c, a) : a);
    tpu_lower_require(c, tpu_lower_reduce(B, finite, TPU_HLO_AND, all, 3), TPU_ERR_RUNTIME,
                      "torch.linalg.eig: input tensor should not contain infs or NaNs.");
  }
  schur sf = schur_of(c, a, vectors);
  tpu_hlo_value worst = tpu_lower_reduce(B, sf.info, TPU_HLO_MAX, all, 3);
  tpu_lower_require(c, cmp(c, TPU_HLO_EQ, worst, tpu_hlo_scalar_i64(B, TPU_S64, 0)), TPU_ERR_RUNTIME,
                    "torch.linalg.eig: The algorithm failed to converge because the input matrix is ill-conditioned "
                    "or has too many repeated eigenvalues.");
  tpu_hlo_value first, second, u, w, tc, q;
  if (cplx) {
    w = band(c, sf.t, 0);
  } else {
    w = schur_eigenvalues(c, sf.t, &first, &second, vectors ? &u : NULL);
  }
  set_vector(c, 0, w);
  if (!vectors) return NULL;
  if (cplx) {
    tc = sf.t, q = sf.z;
  } else {
    /* the real Schur form made triangular by its pairs' 2x2 unitaries */
    tpu_dtype_t ct = complex_type(in);
    tc = matmul(c, mT(c, u, true), matmul(c, tpu_hlo_convert(B, sf.t, ct), u));
    q = matmul(c, tpu_hlo_convert(B, sf.z, ct), u);
  }
  tpu_hlo_type ctt = *tpu_hlo_type_of(B, tc);
  tpu_hlo_value eye = and_(c, triangle(c, &ctt, true, 0), triangle(c, &ctt, false, 0));
  tc = sel(c, eye, as_shape(c, w, tc), keep_triangle(c, tc, true));
  tpu_hlo_value v = unbalance(c, matmul(c, q, triangular_eigenvectors(c, tc, w)), sf.perm, sf.scale);
  if (cplx) {
    /* zgeev: unit norm, the largest element real positive */
    tpu_hlo_type rt = scalar_type(c, v, TPU_BOOL);
    rt.dims[2] = n;
    v = normalize_columns(c, v, tpu_hlo_const_i64(B, &rt, 1), false);
  } else {
    /* dgeev: real eigenvalues have real vectors; a pair's second is the
     * first's conjugate, the first turned by lartg */
    tpu_hlo_value pair = as_shape(c, or_(c, first, second), v);
    v = sel(c, pair, v, complex_of(c, un(c, TPU_HLO_REAL, v), const_like(c, un(c, TPU_HLO_REAL, v), 0.0)));
    v = normalize_columns(c, v, first, true);
    v = sel(c, as_shape(c, second, v), conj_of(c, shift(c, v, 1)), v);
  }
  tpu_lower_set_output(c, 1, v);
  return NULL;
}

#define EIG_DTYPES {TPU_DTS_F32_F64 | TPU_DTS_COMPLEX, 0, "linalg_eig_out_cpu"}

const tpu_lower_rule tpu_rules_eig[] = {
    {{"linalg_eig", "linalg_eig.out"}, eig_rule, 0, 0, EIG_DTYPES},
    {{"_linalg_eigvals", "linalg_eigvals.out"}, eig_rule, 0, 0, EIG_DTYPES},
};
TPU_COUNT_RULES(eig);
