/* The shifted QR iterations of the general eigenproblem (LAPACK's lahqr),
 * from Hessenberg to Schur form, for eig.c: Francis double shifts for real
 * matrices, whose complex pairs end as 2x2 blocks in lanv2's standard form;
 * Wilkinson single shifts for complex ones.
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
 * in the windows. */
#include "lower/eig.h"

/* --- QR iterations (lahqr) ---------------------------------------------------------
 * The matrices are [batch, N, N], N = n + 3, padded with a zero row and
 * column in front and two behind, so that the windows a microstep reads
 * (rows or columns p-1..p+2, gathered per matrix) stay inside even at the
 * edges: logical row j is row j + 1. Registers per matrix: i (the active
 * block's last row), l (its first), k (the next bulge position; past i - 1
 * when a new iteration starts), its (iterations since the last deflation),
 * kdefl (for exceptional shifts), info (LAPACK's: the row where iterations
 * ran out, 1-based), ilo, ihi. */

/* s64 [batch, 3] start indices (matrix, row, col) for per-matrix |row| and
 * |col| ([batch, 1, 1]). */
static tpu_hlo_value starts(tpu_lower_ctx *c, tpu_hlo_value row, tpu_hlo_value col) {
  int64_t bn = tpu_hlo_type_of(B, row)->dims[0], d2[2] = {bn, 1};
  tpu_hlo_type bt = tpu_hlo_make_type(TPU_S64, 2, d2);
  tpu_hlo_value parts[3] = {tpu_hlo_iota(B, &bt, 0), tpu_hlo_reshape(B, row, 2, d2), tpu_hlo_reshape(B, col, 2, d2)};
  return tpu_hlo_concatenate(B, parts, 3, 1);
}

/* Rows (|rows|: [batch, 3, N]) or columns ([batch, N, 3]) p..p+2 (logical)
 * of each matrix of |h|. */
static tpu_hlo_value window(tpu_lower_ctx *c, tpu_hlo_value h, tpu_hlo_value p, bool rows) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, h);
  tpu_hlo_value zero = const_like(c, p, 0.0), at = plus_i(c, p, 1);
  int64_t size[3] = {1, rows ? 3 : t.dims[1], rows ? t.dims[2] : 3};
  tpu_hlo_gather_dims d = {.num_offset = 2, .offset_dims = {1, 2}, .num_collapsed = 1, .collapsed_slice_dims = {0},
                           .num_start_map = 3, .start_index_map = {0, 1, 2}, .index_vector_dim = 1};
  tpu_hlo_type out = tpu_hlo_make_type(t.dtype, 3, (int64_t[]){t.dims[0], size[1], size[2]});
  return tpu_hlo_gather(B, h, rows ? starts(c, at, zero) : starts(c, zero, at), &d, size, &out);
}

/* |h| with the window of window() replaced by |w|. */
static tpu_hlo_value put_window(tpu_lower_ctx *c, tpu_hlo_value h, tpu_hlo_value p, bool rows, tpu_hlo_value w) {
  tpu_hlo_value zero = const_like(c, p, 0.0), at = plus_i(c, p, 1);
  tpu_hlo_scatter_dims d = {.num_update_window = 2, .update_window_dims = {1, 2}, .num_inserted = 1,
                            .inserted_window_dims = {0}, .num_to_operand = 3,
                            .scatter_dims_to_operand_dims = {0, 1, 2}, .index_vector_dim = 1};
  return tpu_hlo_scatter(B, h, rows ? starts(c, at, zero) : starts(c, zero, at), w, &d, NULL, true);
}

/* |h| with logical element (row, col) of each matrix set to |v| ([batch, 1, 1]). */
static tpu_hlo_value put_element(tpu_lower_ctx *c, tpu_hlo_value h, tpu_hlo_value row, tpu_hlo_value col,
                                 tpu_hlo_value v) {
  int64_t bn = tpu_hlo_type_of(B, h)->dims[0];
  tpu_hlo_scatter_dims d = {.num_inserted = 3, .inserted_window_dims = {0, 1, 2}, .num_to_operand = 3,
                            .scatter_dims_to_operand_dims = {0, 1, 2}, .index_vector_dim = 1};
  return tpu_hlo_scatter(B, h, starts(c, plus_i(c, row, 1), plus_i(c, col, 1)), tpu_hlo_reshape(B, v, 1, &bn), &d, NULL,
                         true);
}

/* The subdiagonal (S[j] = H(j, j-1)), diagonal and superdiagonal (U[j] =
 * H(j-1, j)) of the padded |h| as [batch, 1, n] row vectors. */
static void bands(tpu_lower_ctx *c, tpu_hlo_value h, int64_t n, tpu_hlo_value *out_s, tpu_hlo_value *out_d,
                  tpu_hlo_value *out_u) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, h);
  int64_t bn = t.dims[0];
  tpu_hlo_type it = tpu_hlo_make_type(TPU_S64, 3, (int64_t[]){bn, n, 1});
  tpu_hlo_value j = tpu_hlo_iota(B, &it, 1);
  tpu_hlo_value parts[3] = {tpu_hlo_iota(B, &it, 0), plus_i(c, j, 1), j};
  tpu_hlo_gather_dims d = {.num_offset = 1, .offset_dims = {2}, .num_collapsed = 2, .collapsed_slice_dims = {0, 1},
                           .num_start_map = 3, .start_index_map = {0, 1, 2}, .index_vector_dim = 2};
  tpu_hlo_type out = tpu_hlo_make_type(t.dtype, 3, (int64_t[]){bn, n, 3});
  tpu_hlo_value g = tpu_hlo_gather(B, h, tpu_hlo_concatenate(B, parts, 3, 2), &d, (int64_t[]){1, 1, 3}, &out);
  int64_t row[3] = {bn, 1, n};
  *out_s = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, g, 2, 0, 1, 1), 3, row);
  *out_d = tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, g, 2, 1, 2, 1), 3, row);
  *out_u = shift(c, tpu_hlo_reshape(B, tpu_hlo_slice_dim(B, g, 2, 2, 3, 1), 3, row), 1);
}

/* |w| ([batch, rows, cols]) with element (row, col) (per matrix, window
 * coordinates) set to |v| where |when|. */
static tpu_hlo_value set_in(tpu_lower_ctx *c, tpu_hlo_value w, tpu_hlo_value when, tpu_hlo_value row, tpu_hlo_value col,
                            tpu_hlo_value v) {
  tpu_hlo_value hit = and_(c, cmpb(c, TPU_HLO_EQ, index_along(c, w, 1), row),
                           cmpb(c, TPU_HLO_EQ, index_along(c, w, 2), col));
  return selb(c, and_(c, hit, as_shape(c, when, hit)), v, w);
}
/* [batch, 3, 3] of nine per-matrix scalars, row-major. */
static tpu_hlo_value mat3(tpu_lower_ctx *c, const tpu_hlo_value *x) {
  tpu_hlo_value rows[3];
  for (int i = 0; i < 3; i++) rows[i] = tpu_hlo_concatenate(B, x + 3 * i, 3, 2);
  return tpu_hlo_concatenate(B, rows, 3, 1);
}

/* LAPACK's lanv2: the standardized Schur factorization of the real 2x2
 * [[a, b], [c, d]]: out[0..3] the new a, b, c, d (c zero for real
 * eigenvalues, a == d for complex ones), out[4], out[5] the rotation's cs,
 * sn. */
static void lanv2(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value b, tpu_hlo_value cc, tpu_hlo_value d,
                  tpu_hlo_value *out) {
  tpu_dtype_t rt = tpu_hlo_dtype(B, a);
  tpu_hlo_value zero = const_like(c, a, 0.0), one = const_like(c, a, 1.0), half = const_like(c, a, 0.5);
  tpu_hlo_value c_zero = cmp(c, TPU_HLO_EQ, cc, zero);
  tpu_hlo_value b_zero = and_(c, not_(c, c_zero), cmp(c, TPU_HLO_EQ, b, zero));
  tpu_hlo_value sgn_b = sel(c, cmp(c, TPU_HLO_GE, b, zero), one, neg(c, one));
  tpu_hlo_value sgn_c = sel(c, cmp(c, TPU_HLO_GE, cc, zero), one, neg(c, one));
  tpu_hlo_value temp = sub(c, a, d);
  tpu_hlo_value equal_diag = and_(c, not_(c, or_(c, c_zero, b_zero)),
                                  and_(c, cmp(c, TPU_HLO_EQ, temp, zero), cmp(c, TPU_HLO_NE, sgn_b, sgn_c)));
  tpu_hlo_value general = not_(c, or_(c, or_(c, c_zero, b_zero), equal_diag));
  tpu_hlo_value p = mul(c, half, temp);
  tpu_hlo_value bcmax = maxv(c, absv(c, b), absv(c, cc));
  tpu_hlo_value bcmis = mul(c, mul(c, minv(c, absv(c, b), absv(c, cc)), sgn_b), sgn_c);
  tpu_hlo_value scale = maxv(c, absv(c, p), bcmax);
  tpu_hlo_value sscale = sel(c, general, scale, one);
  tpu_hlo_value z = add(c, mul(c, dvd(c, p, sscale), p), mul(c, dvd(c, bcmax, sscale), bcmis));
  tpu_hlo_value real = and_(c, general, cmp(c, TPU_HLO_GE, z, const_like(c, a, 4.0 * ulp_of(rt))));
  /* real eigenvalues */
  tpu_hlo_value sq = mul(c, un(c, TPU_HLO_SQRT, sscale), un(c, TPU_HLO_SQRT, sel(c, real, z, one)));
  tpu_hlo_value zr = add(c, p, sel(c, cmp(c, TPU_HLO_GE, p, zero), sq, neg(c, sq)));
  tpu_hlo_value zr_safe = sel(c, real, zr, one);
  tpu_hlo_value ra = add(c, d, zr_safe);
  tpu_hlo_value rd = sub(c, d, mul(c, dvd(c, bcmax, zr_safe), bcmis));
  tpu_hlo_value tau = un(c, TPU_HLO_SQRT, add(c, mul(c, cc, cc), mul(c, zr_safe, zr_safe)));
  tpu_hlo_value rcs = dvd(c, zr_safe, tau), rsn = dvd(c, cc, tau), rb = sub(c, b, cc);
  /* complex or almost equal eigenvalues: equal diagonals */
  tpu_hlo_value sigma = add(c, b, cc);
  tpu_hlo_value tau2 = un(c, TPU_HLO_SQRT, add(c, mul(c, sigma, sigma), mul(c, temp, temp)));
  tpu_hlo_value tau2s = sel(c, cmp(c, TPU_HLO_EQ, tau2, zero), one, tau2);
  tpu_hlo_value cs = un(c, TPU_HLO_SQRT, mul(c, half, add(c, one, dvd(c, absv(c, sigma), tau2s))));
  tpu_hlo_value sn = mul(c, neg(c, dvd(c, p, mul(c, tau2s, cs))),
                         sel(c, cmp(c, TPU_HLO_GE, sigma, zero), one, neg(c, one)));
  tpu_hlo_value aa = add(c, mul(c, a, cs), mul(c, b, sn)), bb = add(c, mul(c, neg(c, a), sn), mul(c, b, cs));
  tpu_hlo_value cc2 = add(c, mul(c, cc, cs), mul(c, d, sn)), dd = add(c, mul(c, neg(c, cc), sn), mul(c, d, cs));
  tpu_hlo_value na = add(c, mul(c, aa, cs), mul(c, cc2, sn)), nb = add(c, mul(c, bb, cs), mul(c, dd, sn));
  tpu_hlo_value nc = add(c, mul(c, neg(c, aa), sn), mul(c, cc2, cs));
  tpu_hlo_value nd = add(c, mul(c, neg(c, bb), sn), mul(c, dd, cs));
  tpu_hlo_value mid = mul(c, half, add(c, na, nd));
  tpu_hlo_value nc_nz = cmp(c, TPU_HLO_NE, nc, zero), nb_nz = cmp(c, TPU_HLO_NE, nb, zero);
  tpu_hlo_value same = cmp(c, TPU_HLO_EQ, sel(c, cmp(c, TPU_HLO_GE, nb, zero), one, neg(c, one)),
                           sel(c, cmp(c, TPU_HLO_GE, nc, zero), one, neg(c, one)));
  tpu_hlo_value split = and_(c, and_(c, nc_nz, nb_nz), same); /* real after all: triangular */
  tpu_hlo_value turn = and_(c, nc_nz, not_(c, nb_nz));       /* b vanished: swap the roles */
  tpu_hlo_value sab = un(c, TPU_HLO_SQRT, absv(c, nb)), sac = un(c, TPU_HLO_SQRT, absv(c, nc));
  tpu_hlo_value pp = mul(c, sab, sac);
  pp = sel(c, cmp(c, TPU_HLO_GE, nc, zero), pp, neg(c, pp));
  tpu_hlo_value bpc = absv(c, add(c, nb, nc));
  tpu_hlo_value tau3 = dvd(c, one, un(c, TPU_HLO_SQRT, sel(c, split, bpc, one)));
  tpu_hlo_value cs1 = mul(c, sab, tau3), sn1 = mul(c, sac, tau3);
  tpu_hlo_value ca = sel(c, split, add(c, mid, pp), mid), cd = sel(c, split, sub(c, mid, pp), mid);
  tpu_hlo_value cb = sel(c, split, sub(c, nb, nc), sel(c, turn, neg(c, nc), nb));
  tpu_hlo_value ccn = sel(c, or_(c, split, turn), zero, nc);
  tpu_hlo_value ccs = sel(c, split, sub(c, mul(c, cs, cs1), mul(c, sn, sn1)), sel(c, turn, neg(c, sn), cs));
  tpu_hlo_value csn = sel(c, split, add(c, mul(c, cs, sn1), mul(c, sn, cs1)), sel(c, turn, cs, sn));
  /* the cases in LAPACK's order */
  out[0] = sel(c, c_zero, a, sel(c, b_zero, d, sel(c, equal_diag, a, sel(c, real, ra, ca))));
  out[1] = sel(c, c_zero, b, sel(c, b_zero, neg(c, cc), sel(c, equal_diag, b, sel(c, real, rb, cb))));
  out[2] = sel(c, c_zero, cc, sel(c, b_zero, zero, sel(c, equal_diag, cc, sel(c, real, zero, ccn))));
  out[3] = sel(c, c_zero, d, sel(c, b_zero, a, sel(c, equal_diag, d, sel(c, real, rd, cd))));
  out[4] = sel(c, c_zero, one, sel(c, b_zero, zero, sel(c, equal_diag, one, sel(c, real, rcs, ccs))));
  out[5] = sel(c, c_zero, zero, sel(c, b_zero, one, sel(c, equal_diag, zero, sel(c, real, rsn, csn))));
}

/* The deflation search of lahqr: the largest j in (l, i] whose subdiagonal
 * H(j, j-1) is negligible (Ahues and Kressner's criterion), or l. D, S, U:
 * the diagonal, subdiagonal (S[j] = H(j, j-1)) and superdiagonal (U[j] =
 * H(j-1, j)). */
static tpu_hlo_value deflation(tpu_lower_ctx *c, tpu_hlo_value dg, tpu_hlo_value sd, tpu_hlo_value ud, tpu_hlo_value i,
                               tpu_hlo_value l, tpu_hlo_value ilo, tpu_hlo_value ihi, tpu_hlo_value smlnum,
                               double ulp) {
  int r = tpu_hlo_rank(B, dg);
  tpu_hlo_value j = index_along(c, dg, r - 1);
  tpu_hlo_value dm1 = shift(c, dg, 1);
  tpu_hlo_value as = cabs1(c, sd), re_s = absv(c, real_of(c, sd));
  tpu_hlo_value zero = const_like(c, as, 0.0);
  tpu_hlo_value tst = add(c, cabs1(c, dm1), cabs1(c, dg));
  tpu_hlo_value extra = add(c, selb(c, cmpb(c, TPU_HLO_GE, plus_i(c, j, -2), ilo), shift(c, re_s, 1), zero),
                            selb(c, cmpb(c, TPU_HLO_LE, plus_i(c, j, 1), ihi), shift(c, re_s, -1), zero));
  tst = sel(c, cmp(c, TPU_HLO_EQ, tst, zero), add(c, tst, extra), tst);
  tpu_hlo_value au = cabs1(c, ud), ad = cabs1(c, dg), adiff = cabs1(c, sub(c, dm1, dg));
  tpu_hlo_value ab = maxv(c, as, au), ba = minv(c, as, au), aa = maxv(c, ad, adiff), bb = minv(c, ad, adiff);
  tpu_hlo_value ss = add(c, aa, ab);
  tpu_hlo_value ulpv = const_like(c, as, ulp);
  tpu_hlo_value ak = cmp(c, TPU_HLO_LE, mul(c, ba, dvd(c, ab, ss)),
                         maxv(c, as_shape(c, smlnum, as), mul(c, ulpv, mul(c, bb, dvd(c, aa, ss)))));
  tpu_hlo_value small = or_(c, cmpb(c, TPU_HLO_LE, as, smlnum),
                            and_(c, cmp(c, TPU_HLO_LE, re_s, mul(c, ulpv, tst)), ak));
  tpu_hlo_value cand = and_(c, small, and_(c, cmpb(c, TPU_HLO_GT, j, l), cmpb(c, TPU_HLO_LE, j, i)));
  tpu_hlo_value found = reduce_keep(c, selb(c, cand, j, tpu_hlo_scalar_i64(B, TPU_S64, -1)), TPU_HLO_MAX, r - 1);
  return maxv(c, found, l);
}

/* The shift of zlahqr (complex matrices): Wilkinson's, or an exceptional
 * one every 10th iteration without deflation. */
static tpu_hlo_value complex_shift(tpu_lower_ctx *c, tpu_hlo_value dg, tpu_hlo_value sd, tpu_hlo_value ud,
                                   tpu_hlo_value i, tpu_hlo_value ll, tpu_hlo_value ex20, tpu_hlo_value ex10) {
  tpu_hlo_value di = at_row(c, dg, i), si = at_row(c, sd, i);
  tpu_hlo_value ex = add(c, as_type_of(c, mul(c, const_like(c, real_of(c, si), 0.75),
                                               absv(c, real_of(c, sel(c, ex20, si, at_row(c, sd, plus_i(c, ll, 1)))))),
                                          di),
                         sel(c, ex20, di, at_row(c, dg, ll)));
  tpu_hlo_value u = mul(c, un(c, TPU_HLO_SQRT, at_row(c, ud, i)), un(c, TPU_HLO_SQRT, si));
  tpu_hlo_value su = cabs1(c, u);
  tpu_hlo_value x = mul(c, const_like(c, di, 0.5), sub(c, at_row(c, dg, plus_i(c, i, -1)), di));
  tpu_hlo_value sx = cabs1(c, x), rzero = const_like(c, sx, 0.0);
  tpu_hlo_value s2 = maxv(c, su, sx);
  s2 = sel(c, cmp(c, TPU_HLO_EQ, s2, rzero), const_like(c, s2, 1.0), s2);
  tpu_hlo_value s2c = as_type_of(c, s2, x);
  tpu_hlo_value xs = dvd(c, x, s2c), us = dvd(c, u, s2c);
  tpu_hlo_value y = mul(c, s2c, un(c, TPU_HLO_SQRT, add(c, mul(c, xs, xs), mul(c, us, us))));
  tpu_hlo_value xd = dvd(c, x, as_type_of(c, sel(c, cmp(c, TPU_HLO_GT, sx, rzero), sx, const_like(c, sx, 1.0)), x));
  tpu_hlo_value dot = add(c, mul(c, real_of(c, xd), real_of(c, y)), mul(c, imag_of(c, xd), imag_of(c, y)));
  y = sel(c, and_(c, cmp(c, TPU_HLO_GT, sx, rzero), cmp(c, TPU_HLO_LT, dot, rzero)), neg(c, y), y);
  tpu_hlo_value xy = add(c, x, y);
  tpu_hlo_value safe = sel(c, cmp(c, TPU_HLO_EQ, cabs1(c, xy), rzero), const_like(c, xy, 1.0), xy);
  tpu_hlo_value wil = sel(c, cmp(c, TPU_HLO_NE, su, rzero), sub(c, di, mul(c, u, dvd(c, u, safe))), di);
  return sel(c, or_(c, ex20, ex10), ex, wil);
}

/* The rows window |x| by g^H (|left|) or the columns window by g, where
 * |active|; unchanged elsewhere (exactly, NaNs included). */
static tpu_hlo_value turn(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value g, tpu_hlo_value active, bool left) {
  tpu_hlo_value y = left ? matmul(c, mT(c, g, true), x) : matmul(c, x, g);
  return selb(c, active, y, x);
}

/* G = I - tau v v^H for v = (1, w2, w3), as [batch, 3, 3]. */
static tpu_hlo_value reflector(tpu_lower_ctx *c, tpu_hlo_value tau, tpu_hlo_value w2, tpu_hlo_value w3) {
  tpu_hlo_value one = const_like(c, tau, 1.0);
  tpu_hlo_value v[3] = {one, w2, w3}, g[9];
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) {
      tpu_hlo_value t = mul(c, mul(c, tau, v[a]), conj_of(c, v[b]));
      g[3 * a + b] = a == b ? sub(c, one, t) : neg(c, t);
    }
  return mat3(c, g);
}

/* The bulge chase: one reflector at k, from column k - 1 (rows k..k+2;
 * k..k+1 for complex matrices), for every matrix still chasing. State: H, Z
 * (when |vectors|), registers. */
static void chase_step(tpu_lower_ctx *c, tpu_hlo_value counter, tpu_hlo_value *s, bool vectors) {
  (void)counter;
  tpu_hlo_value h = s[0], z = vectors ? s[1] : TPU_HLO_NONE, regs = s[vectors ? 2 : 1];
  bool cplx = tpu_dtype_is_complex(tpu_hlo_dtype(B, h));
  tpu_hlo_value f[R_COUNT];
  for (int q = 0; q < R_COUNT; q++) f[q] = field(c, regs, q);
  tpu_hlo_value i = f[R_I], k = f[R_K], ilo = f[R_ILO], info = f[R_INFO];
  tpu_hlo_value zero_i = const_like(c, i, 0.0);
  tpu_hlo_value chase = and_(c, and_(c, cmp(c, TPU_HLO_GE, i, ilo), cmp(c, TPU_HLO_EQ, info, zero_i)),
                             cmp(c, TPU_HLO_LE, k, plus_i(c, i, -1)));
  tpu_hlo_value pos = sel(c, chase, k, zero_i);
  tpu_hlo_value rows = window(c, h, pos, true); /* [batch, 3, N] */
  tpu_hlo_value bulge = selb(c, cmpb(c, TPU_HLO_EQ, index_along(c, rows, 2), pos), rows, const_like(c, rows, 0.0));
  bulge = reduce_keep(c, bulge, TPU_HLO_ADD, 2); /* column k - 1: [batch, 3, 1] */
  tpu_hlo_value alpha = tpu_hlo_slice_dim(B, bulge, 1, 0, 1, 1), xa = tpu_hlo_slice_dim(B, bulge, 1, 1, 2, 1);
  tpu_hlo_value xb = const_like(c, alpha, 0.0);
  if (!cplx) xb = sel(c, cmp(c, TPU_HLO_LT, k, plus_i(c, i, -1)), tpu_hlo_slice_dim(B, bulge, 1, 2, 3, 1), xb);
  tpu_hlo_value beta, tau, scal;
  tpu_hlo_value xa2 = absv(c, xa), xb2 = absv(c, xb);
  larfg(c, alpha, add(c, mul(c, xa2, xa2), mul(c, xb2, xb2)), &beta, &tau, &scal);
  tau = sel(c, chase, tau, const_like(c, tau, 0.0));
  tpu_hlo_value gm = reflector(c, tau, mul(c, xa, scal), mul(c, xb, scal));
  tpu_hlo_value zr = const_like(c, tau, 0.0);
  rows = turn(c, rows, gm, chase, true);
  /* column k - 1 (column k of the padded window): beta, then zeros */
  rows = set_in(c, rows, chase, zero_i, pos, as_type_of(c, beta, tau));
  rows = set_in(c, rows, chase, plus_i(c, zero_i, 1), pos, zr);
  rows = set_in(c, rows, chase, plus_i(c, zero_i, 2), pos, zr);
  tpu_hlo_value t2 = TPU_HLO_NONE, hi = TPU_HLO_NONE, endsc = TPU_HLO_NONE;
  if (cplx) {
    /* zlahqr ends a sweep making H(i, i-1) real: row i (columns past i)
     * by conj(t2), column i (rows above i) by t2, for t2 = H(i, i-1) / |.|,
     * known from the row window before the columns turn */
    tpu_hlo_value r1 = tpu_hlo_slice_dim(B, rows, 1, 1, 2, 1); /* [batch, 1, N] */
    tpu_hlo_value g00 = tpu_hlo_slice_dim(B, tpu_hlo_slice_dim(B, gm, 1, 0, 1, 1), 2, 0, 1, 1);
    tpu_hlo_value g10 = tpu_hlo_slice_dim(B, tpu_hlo_slice_dim(B, gm, 1, 1, 2, 1), 2, 0, 1, 1);
    hi = add(c, mul(c, at_row(c, r1, plus_i(c, pos, 1)), g00), mul(c, at_row(c, r1, plus_i(c, pos, 2)), g10));
    tpu_hlo_value mag = absv(c, hi), rz = const_like(c, mag, 0.0);
    endsc = and_(c, and_(c, chase, cmp(c, TPU_HLO_EQ, k, plus_i(c, i, -1))), cmp(c, TPU_HLO_NE, imag_of(c, hi), rz));
    t2 = sel(c, endsc, dvd(c, hi, as_type_of(c, sel(c, endsc, mag, const_like(c, mag, 1.0)), hi)), const_like(c, hi, 1.0));
    hi = as_type_of(c, mag, hi);
    tpu_hlo_value past = and_(c, cmpb(c, TPU_HLO_EQ, index_along(c, rows, 1), const_like(c, zero_i, 1.0)),
                              cmpb(c, TPU_HLO_GT, index_along(c, rows, 2), plus_i(c, i, 1)));
    rows = selb(c, past, bin_matched(c, TPU_HLO_MUL, rows, conj_of(c, t2)), rows);
  }
  h = put_window(c, h, pos, true, rows);
  tpu_hlo_value cols = turn(c, window(c, h, pos, false), gm, chase, false); /* [batch, N, 3] */
  if (cplx) {
    tpu_hlo_value above = and_(c, cmpb(c, TPU_HLO_EQ, index_along(c, cols, 2), const_like(c, zero_i, 1.0)),
                               cmpb(c, TPU_HLO_LT, index_along(c, cols, 1), plus_i(c, i, 1)));
    cols = selb(c, above, bin_matched(c, TPU_HLO_MUL, cols, t2), cols);
    cols = set_in(c, cols, endsc, plus_i(c, i, 1), zero_i, hi);
  }
  h = put_window(c, h, pos, false, cols);
  if (vectors) {
    tpu_hlo_value zc = turn(c, window(c, z, pos, false), gm, chase, false);
    if (cplx)
      zc = selb(c, cmpb(c, TPU_HLO_EQ, index_along(c, zc, 2), const_like(c, zero_i, 1.0)), bin_matched(c, TPU_HLO_MUL, zc, t2), zc);
    z = put_window(c, z, pos, false, zc);
  }
  f[R_K] = sel(c, chase, plus_i(c, k, 1), k);
  s[0] = h;
  if (vectors) s[1] = z;
  s[vectors ? 2 : 1] = pack(c, f, R_COUNT);
}
static void chase_vectors(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { chase_step(c, k, s, true); }
static void chase_values(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { chase_step(c, k, s, false); }

static tpu_hlo_value chase_more_of(tpu_lower_ctx *c, tpu_hlo_value regs) {
  tpu_hlo_value i = field(c, regs, R_I), ilo = field(c, regs, R_ILO), info = field(c, regs, R_INFO),
                k = field(c, regs, R_K);
  return any(c, and_(c, and_(c, cmp(c, TPU_HLO_GE, i, ilo), cmp(c, TPU_HLO_EQ, info, const_like(c, info, 0.0))),
                     cmp(c, TPU_HLO_LE, k, plus_i(c, i, -1))));
}
static tpu_hlo_value chase_more_vectors(tpu_lower_ctx *c, const tpu_hlo_value *s) { return chase_more_of(c, s[2]); }
static tpu_hlo_value chase_more_values(tpu_lower_ctx *c, const tpu_hlo_value *s) { return chase_more_of(c, s[1]); }

/* One iteration of the QR iterations (dlahqr's double shifts for real
 * matrices, zlahqr's single shifts for complex ones) for every matrix not
 * done: the deflation search, then the block's end (a 1x1 or, real, a 2x2
 * block standardized by lanv2) or the shifts and the first reflector, and
 * the rest of the bulge chase in an inner loop. State: H, Z (when
 * |vectors|), registers. */
static void hqr_step(tpu_lower_ctx *c, tpu_hlo_value counter, tpu_hlo_value *s, bool vectors) {
  (void)counter;
  tpu_hlo_value h = s[0], z = vectors ? s[1] : TPU_HLO_NONE, regs = s[vectors ? 2 : 1];
  tpu_dtype_t dt = tpu_hlo_dtype(B, h), rt = tpu_dtype_real(dt);
  bool cplx = tpu_dtype_is_complex(dt);
  int64_t n = tpu_hlo_type_of(B, h)->dims[2] - 3;
  double ulp = ulp_of(rt);
  tpu_hlo_value f[R_COUNT];
  for (int q = 0; q < R_COUNT; q++) f[q] = field(c, regs, q);
  tpu_hlo_value i = f[R_I], l = f[R_L], its = f[R_ITS], kdefl = f[R_KDEFL], info = f[R_INFO],
                ilo = f[R_ILO], ihi = f[R_IHI];
  tpu_hlo_type st = scalar_type(c, i, rt);
  tpu_hlo_value nh = plus_i(c, sub(c, ihi, ilo), 1);
  tpu_hlo_value smlnum = mul(c, tpu_hlo_const_f64(B, &st, safmin_of(rt)),
                             dvd(c, tpu_hlo_convert(B, nh, rt), tpu_hlo_const_f64(B, &st, ulp)));
  tpu_hlo_value itmax = mul(c, maxv(c, nh, const_like(c, i, 10.0)), const_like(c, i, 30.0));
  tpu_hlo_value zero_i = const_like(c, i, 0.0);
  tpu_hlo_value done = or_(c, cmp(c, TPU_HLO_LT, i, ilo), cmp(c, TPU_HLO_NE, info, zero_i));
  tpu_hlo_value start = not_(c, done);
  tpu_hlo_value fail = and_(c, start, cmp(c, TPU_HLO_GT, its, itmax));
  start = and_(c, start, not_(c, fail));

  tpu_hlo_value sd, dg, ud;
  bands(c, h, n, &sd, &dg, &ud);
  tpu_hlo_value ll = deflation(c, dg, sd, ud, i, l, ilo, ihi, smlnum, ulp);
  tpu_hlo_value split_all = cmp(c, TPU_HLO_GE, ll, cplx ? i : plus_i(c, i, -1));
  tpu_hlo_value conv = and_(c, start, split_all);
  tpu_hlo_value two = and_(c, conv, cmp(c, TPU_HLO_EQ, ll, plus_i(c, i, -1))); /* real only */
  tpu_hlo_value iter = and_(c, start, not_(c, split_all));
  tpu_hlo_value kd = plus_i(c, kdefl, 1);
  tpu_hlo_value ex20 = cmp(c, TPU_HLO_EQ, tpu_hlo_binary(B, TPU_HLO_REM, kd, const_like(c, kd, 20.0)), zero_i);
  tpu_hlo_value ex10 = and_(c, not_(c, ex20),
                            cmp(c, TPU_HLO_EQ, tpu_hlo_binary(B, TPU_HLO_REM, kd, const_like(c, kd, 10.0)), zero_i));
  tpu_hlo_value j = index_along(c, dg, 2);
  tpu_hlo_value sp1 = shift(c, sd, -1), dp1 = shift(c, dg, -1), dm1 = shift(c, dg, 1);
  tpu_hlo_value m, v1, v2, v3, std[6] = {TPU_HLO_NONE};
  if (!cplx) {
    /* the bottom 2x2 block, and Francis' double shift (exceptional ones
     * every 10th iteration without deflation) */
    tpu_hlo_value a0 = at_row(c, dg, plus_i(c, i, -1)), b0 = at_row(c, ud, i), c0 = at_row(c, sd, i),
                  d0 = at_row(c, dg, i);
    lanv2(c, a0, b0, c0, d0, std);
    tpu_hlo_value ex = or_(c, ex20, ex10);
    tpu_hlo_value sx = sel(c, ex20, add(c, absv(c, c0), absv(c, at_row(c, sd, plus_i(c, i, -1)))),
                           add(c, absv(c, at_row(c, sd, plus_i(c, ll, 1))), absv(c, at_row(c, sd, plus_i(c, ll, 2)))));
    tpu_hlo_value hx = add(c, mul(c, const_like(c, sx, 0.75), sx), sel(c, ex20, d0, at_row(c, dg, ll)));
    tpu_hlo_value h11 = sel(c, ex, hx, a0), h12 = sel(c, ex, mul(c, const_like(c, sx, -0.4375), sx), b0);
    tpu_hlo_value h21 = sel(c, ex, sx, c0), h22 = sel(c, ex, hx, d0);
    tpu_hlo_value sn = add(c, add(c, add(c, absv(c, h11), absv(c, h12)), absv(c, h21)), absv(c, h22));
    tpu_hlo_value sns = sel(c, cmp(c, TPU_HLO_EQ, sn, const_like(c, sn, 0.0)), const_like(c, sn, 1.0), sn);
    h11 = dvd(c, h11, sns), h21 = dvd(c, h21, sns), h12 = dvd(c, h12, sns), h22 = dvd(c, h22, sns);
    tpu_hlo_value tr = dvd(c, add(c, h11, h22), const_like(c, h11, 2.0));
    tpu_hlo_value det = sub(c, mul(c, sub(c, h11, tr), sub(c, h22, tr)), mul(c, h12, h21));
    tpu_hlo_value rtdisc = un(c, TPU_HLO_SQRT, absv(c, det));
    tpu_hlo_value cpx = cmp(c, TPU_HLO_GE, det, const_like(c, det, 0.0));
    tpu_hlo_value r1 = add(c, tr, rtdisc), r2 = sub(c, tr, rtdisc);
    tpu_hlo_value nearer = cmp(c, TPU_HLO_LE, absv(c, sub(c, r1, h22)), absv(c, sub(c, r2, h22)));
    tpu_hlo_value rr = mul(c, sel(c, nearer, r1, r2), sn);
    tpu_hlo_value rt1r = sel(c, cpx, mul(c, tr, sn), rr), rt2r = rt1r;
    tpu_hlo_value rt1i = sel(c, cpx, mul(c, rtdisc, sn), const_like(c, sn, 0.0)), rt2i = neg(c, rt1i);
    /* where to start: two consecutive small subdiagonals */
    tpu_hlo_value sp2 = shift(c, sd, -2), up1 = shift(c, ud, -1);
    tpu_hlo_value dr1 = bin_matched(c, TPU_HLO_SUB, dg, rt1r), dr2 = bin_matched(c, TPU_HLO_SUB, dg, rt2r);
    tpu_hlo_value sm = add(c, bin_matched(c, TPU_HLO_ADD, absv(c, dr2), absv(c, rt2i)), absv(c, sp1));
    sm = sel(c, cmp(c, TPU_HLO_EQ, sm, const_like(c, sm, 0.0)), const_like(c, sm, 1.0), sm);
    tpu_hlo_value h21s = dvd(c, sp1, sm);
    v1 = sub(c, add(c, mul(c, h21s, up1), mul(c, dr1, dvd(c, dr2, sm))),
             bin_matched(c, TPU_HLO_MUL, dvd(c, as_shape(c, rt2i, sm), sm), rt1i));
    v2 = mul(c, h21s, bin_matched(c, TPU_HLO_SUB, bin_matched(c, TPU_HLO_SUB, add(c, dg, dp1), rt1r), rt2r));
    v3 = mul(c, h21s, sp2);
    tpu_hlo_value sv = add(c, add(c, absv(c, v1), absv(c, v2)), absv(c, v3));
    sv = sel(c, cmp(c, TPU_HLO_EQ, sv, const_like(c, sv, 0.0)), const_like(c, sv, 1.0), sv);
    v1 = dvd(c, v1, sv), v2 = dvd(c, v2, sv), v3 = dvd(c, v3, sv);
    tpu_hlo_value h00 = mul(c, absv(c, sd), add(c, absv(c, v2), absv(c, v3)));
    tpu_hlo_value h01 = mul(c, absv(c, v1), add(c, add(c, absv(c, dm1), absv(c, dg)), absv(c, dp1)));
    tpu_hlo_value okm = or_(c, cmpb(c, TPU_HLO_EQ, j, ll), cmp(c, TPU_HLO_LE, h00, mul(c, const_like(c, h01, ulp), h01)));
    tpu_hlo_value candm = and_(c, okm, and_(c, cmpb(c, TPU_HLO_GE, j, ll), cmpb(c, TPU_HLO_LE, j, plus_i(c, i, -2))));
    m = reduce_keep(c, selb(c, candm, j, tpu_hlo_scalar_i64(B, TPU_S64, -1)), TPU_HLO_MAX, 2);
  } else {
    tpu_hlo_value t = complex_shift(c, dg, sd, ud, i, ll, ex20, ex10);
    tpu_hlo_value h11s = bin_matched(c, TPU_HLO_SUB, dg, t), h21 = real_of(c, sp1);
    tpu_hlo_value sm = add(c, cabs1(c, h11s), absv(c, h21));
    sm = sel(c, cmp(c, TPU_HLO_EQ, sm, const_like(c, sm, 0.0)), const_like(c, sm, 1.0), sm);
    h11s = dvd(c, h11s, as_type_of(c, sm, h11s));
    h21 = dvd(c, h21, sm);
    tpu_hlo_value okm = cmp(c, TPU_HLO_LE, mul(c, absv(c, real_of(c, sd)), absv(c, h21)),
                            mul(c, const_like(c, sm, ulp), mul(c, cabs1(c, h11s), add(c, cabs1(c, dg), cabs1(c, dp1)))));
    tpu_hlo_value candm = and_(c, okm, and_(c, cmpb(c, TPU_HLO_GT, j, ll), cmpb(c, TPU_HLO_LE, j, plus_i(c, i, -1))));
    m = maxv(c, reduce_keep(c, selb(c, candm, j, tpu_hlo_scalar_i64(B, TPU_S64, -1)), TPU_HLO_MAX, 2), ll);
    v1 = h11s, v2 = as_type_of(c, h21, h11s), v3 = const_like(c, h11s, 0.0);
  }

  /* the first reflector (at m), lanv2's rotation (at i - 1), or nothing */
  tpu_hlo_value pos = sel(c, iter, m, sel(c, two, plus_i(c, i, -1), zero_i));
  /* the negligible subdiagonal first */
  tpu_hlo_value defl = and_(c, start, cmp(c, TPU_HLO_GT, ll, ilo));
  tpu_hlo_value s_ll = at_row(c, sd, ll);
  h = put_element(c, h, ll, plus_i(c, ll, -1), sel(c, defl, const_like(c, s_ll, 0.0), s_ll));
  tpu_hlo_value rows = window(c, h, pos, true); /* [batch, 3, N] */
  tpu_hlo_value alpha = at_row(c, v1, m), xa = at_row(c, v2, m), xb = at_row(c, v3, m);
  tpu_hlo_value beta, tau, scal;
  tpu_hlo_value xa2 = absv(c, xa), xb2 = absv(c, xb);
  larfg(c, alpha, add(c, mul(c, xa2, xa2), mul(c, xb2, xb2)), &beta, &tau, &scal);
  tpu_hlo_value one = const_like(c, tau, 1.0), zr = const_like(c, tau, 0.0);
  tau = sel(c, iter, tau, zr);
  tpu_hlo_value gm = reflector(c, tau, mul(c, xa, scal), mul(c, xb, scal));
  if (!cplx) {
    tpu_hlo_value cs = std[4], sn = std[5];
    tpu_hlo_value rot[9] = {cs, neg(c, sn), zr, sn, cs, zr, zr, zr, one};
    gm = selb(c, two, mat3(c, rot), gm);
  }
  /* rows by G^H; then what LAPACK sets in column p - 1 */
  tpu_hlo_value moves = or_(c, iter, two);
  rows = turn(c, rows, gm, moves, true);
  tpu_hlo_value s_m = at_row(c, sd, m);
  tpu_hlo_value kept = cplx ? s_m : mul(c, s_m, sub(c, one, tau));
  (void)beta;
  /* column m - 1 (column m of the padded window): LAPACK leaves H(m, m-1)
   * (real: times 1 - tau) and the zeros below it */
  rows = set_in(c, rows, iter, zero_i, pos, sel(c, cmp(c, TPU_HLO_GT, m, ll), kept, zr));
  rows = set_in(c, rows, iter, plus_i(c, zero_i, 1), pos, zr);
  rows = set_in(c, rows, iter, plus_i(c, zero_i, 2), pos, zr);
  h = put_window(c, h, pos, true, rows);
  /* columns by G; then lanv2's block */
  tpu_hlo_value cols = turn(c, window(c, h, pos, false), gm, moves, false); /* [batch, N, 3] */
  if (!cplx) {
    tpu_hlo_value r0 = plus_i(c, pos, 1), r1 = plus_i(c, pos, 2);
    tpu_hlo_value c0 = zero_i, c1 = plus_i(c, zero_i, 1);
    cols = set_in(c, cols, two, r0, c0, std[0]);
    cols = set_in(c, cols, two, r0, c1, std[1]);
    cols = set_in(c, cols, two, r1, c0, std[2]);
    cols = set_in(c, cols, two, r1, c1, std[3]);
  }
  h = put_window(c, h, pos, false, cols);
  if (vectors) z = put_window(c, z, pos, false, turn(c, window(c, z, pos, false), gm, moves, false));
  if (cplx) {
    /* zlahqr's diagonal scalings: after a start at m > l, by conj(temp) at
     * m..i but m + 1 (keeping H(m, m-1)); at the end of a sweep, H(i, i-1)
     * made real. Both at once, as one diagonal similarity. */
    tpu_hlo_value mscale = and_(c, iter, cmp(c, TPU_HLO_GT, m, ll));
    tpu_hlo_value omt = sub(c, one, tau);
    tpu_hlo_value mag_omt = absv(c, omt);
    tpu_hlo_value temp = dvd(c, omt, as_type_of(c, sel(c, mscale, mag_omt, const_like(c, mag_omt, 1.0)), omt));
    temp = sel(c, mscale, temp, one);
    tpu_hlo_value last = and_(c, iter, cmp(c, TPU_HLO_EQ, m, plus_i(c, i, -1)));
    /* H(i, i-1) now: the window's row i + 1 (padded), column 0 */
    tpu_hlo_value col0 = tpu_hlo_slice_dim(B, cols, 2, 0, 1, 1);
    tpu_hlo_value hi = row_where(c, col0, cmpb(c, TPU_HLO_EQ, index_along(c, col0, 1), plus_i(c, i, 1)), 1);
    hi = mul(c, hi, sel(c, and_(c, mscale, cmp(c, TPU_HLO_EQ, m, plus_i(c, i, -1))), conj_of(c, temp), one));
    tpu_hlo_value mag_hi = absv(c, hi);
    tpu_hlo_value endsc = and_(c, last, cmp(c, TPU_HLO_NE, imag_of(c, hi), const_like(c, mag_hi, 0.0)));
    tpu_hlo_value t2 = sel(c, endsc, dvd(c, hi, as_type_of(c, sel(c, endsc, mag_hi, const_like(c, mag_hi, 1.0)), hi)), one);
    tpu_hlo_type vt = *tpu_hlo_type_of(B, h);
    vt.dims[1] = 1;
    tpu_hlo_type vit = with_dtype(&vt, TPU_S64);
    tpu_hlo_value jj = plus_i(c, tpu_hlo_iota(B, &vit, 2), -1); /* logical index of each padded column */
    tpu_hlo_value in_m = and_(c, and_(c, cmpb(c, TPU_HLO_GE, jj, m), cmpb(c, TPU_HLO_LE, jj, i)),
                              cmpb(c, TPU_HLO_NE, jj, plus_i(c, m, 1)));
    tpu_hlo_value dvec = selb(c, and_(c, in_m, as_shape(c, mscale, in_m)), conj_of(c, temp), one);
    dvec = tpu_hlo_broadcast_to(B, dvec, &vt);
    dvec = mul(c, dvec, selb(c, and_(c, cmpb(c, TPU_HLO_EQ, jj, i), as_shape(c, endsc, jj)), t2, const_like(c, dvec, 1.0)));
    tpu_hlo_value factor = mul(c, as_shape(c, conj_of(c, mT(c, dvec, false)), h), as_shape(c, dvec, h));
    tpu_hlo_value hr = index_along(c, h, 1), hc = index_along(c, h, 2);
    /* H(m, m-1) kept, H(i, i-1) := |H(i, i-1)| */
    tpu_hlo_value keep_m = and_(c, and_(c, cmpb(c, TPU_HLO_EQ, hr, plus_i(c, m, 1)), cmpb(c, TPU_HLO_EQ, hc, m)),
                                as_shape(c, mscale, hr));
    factor = sel(c, keep_m, const_like(c, factor, 1.0), factor);
    tpu_hlo_value at_i = and_(c, and_(c, cmpb(c, TPU_HLO_EQ, hr, plus_i(c, i, 1)), cmpb(c, TPU_HLO_EQ, hc, i)),
                              as_shape(c, endsc, hr));
    h = sel(c, at_i, as_shape(c, as_type_of(c, mag_hi, h), h), mul(c, h, factor));
    if (vectors) z = mul(c, z, as_shape(c, dvec, z));
  }

  /* the registers */
  tpu_hlo_value big = const_like(c, i, (double)(n + 8));
  f[R_I] = sel(c, conv, plus_i(c, ll, -1), i);
  f[R_L] = sel(c, conv, ilo, sel(c, iter, ll, l));
  f[R_K] = sel(c, iter, plus_i(c, m, 1), big);
  f[R_ITS] = sel(c, conv, zero_i, sel(c, iter, plus_i(c, its, 1), its));
  f[R_KDEFL] = sel(c, conv, zero_i, sel(c, iter, kd, kdefl));
  f[R_INFO] = sel(c, fail, plus_i(c, i, 1), info);
  s[0] = h;
  if (vectors) s[1] = z;
  s[vectors ? 2 : 1] = pack(c, f, R_COUNT);
  tpu_lower_loop_while(c, n, vectors ? 3 : 2, s, vectors ? chase_vectors : chase_values,
                       vectors ? chase_more_vectors : chase_more_values);
}
void tpu_lower_hqr_vectors(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { hqr_step(c, k, s, true); }
void tpu_lower_hqr_values(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { hqr_step(c, k, s, false); }

static tpu_hlo_value hqr_more_of(tpu_lower_ctx *c, tpu_hlo_value regs) {
  tpu_hlo_value i = field(c, regs, R_I), ilo = field(c, regs, R_ILO), info = field(c, regs, R_INFO);
  return any(c, and_(c, cmp(c, TPU_HLO_GE, i, ilo), cmp(c, TPU_HLO_EQ, info, const_like(c, info, 0.0))));
}
tpu_hlo_value tpu_lower_hqr_more_vectors(tpu_lower_ctx *c, const tpu_hlo_value *s) { return hqr_more_of(c, s[2]); }
tpu_hlo_value tpu_lower_hqr_more_values(tpu_lower_ctx *c, const tpu_hlo_value *s) { return hqr_more_of(c, s[1]); }
