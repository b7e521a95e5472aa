/* SVD and Hermitian eigendecomposition by Jacobi rotations (_linalg_svd,
 * _linalg_eigh); tpu_lower_jacobi_svd serves qr.c's least squares too.
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
void tpu_lower_jacobi_svd(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value *out) {
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
  tpu_lower_jacobi_svd(c, a, sorted);
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

const tpu_lower_rule tpu_rules_svd[] = {
    {{"_linalg_svd", "_linalg_svd.U"}, svd_rule, 0, 0},
    {{"_linalg_eigh", "_linalg_eigh.eigenvalues"}, eigh_rule, 0, 0},
};
TPU_COUNT_RULES(svd);
