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
#include <math.h>

#include "lower/matrix.h"

/* --- small helpers --------------------------------------------------------------- */

static tpu_hlo_type with_dtype(const tpu_hlo_type *t, tpu_dtype_t dtype) {
  tpu_hlo_type to = *t;
  to.dtype = dtype;
  return to;
}

/* The [batch, 1, 1] type of the matrices |x| with |dtype|. */
static tpu_hlo_type scalar_type(tpu_lower_ctx *c, tpu_hlo_value x, tpu_dtype_t dtype) {
  tpu_hlo_type t = with_dtype(tpu_hlo_type_of(B, x), dtype);
  t.dims[t.rank - 2] = t.dims[t.rank - 1] = 1;
  return t;
}

/* A constant like the value |like| (its type) with |v|. */
static tpu_hlo_value fill(tpu_lower_ctx *c, tpu_hlo_value like, double v) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, like);
  if (tpu_dtype_is_float(t.dtype) || tpu_dtype_is_complex(t.dtype)) return tpu_hlo_const_f64(B, &t, v);
  return tpu_hlo_const_i64(B, &t, (int64_t)v);
}

/* |x| spread to the shape of |like|. */
static tpu_hlo_value as_shape(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value like) {
  return spread(c, x, tpu_hlo_type_of(B, like));
}

/* |x| and |y| brought to one shape: the smaller spread to the larger. */
static void match(tpu_lower_ctx *c, tpu_hlo_value *x, tpu_hlo_value *y) {
  const tpu_hlo_type *xt = tpu_hlo_type_of(B, *x), *yt = tpu_hlo_type_of(B, *y);
  bool same = xt->rank == yt->rank;
  for (int d = 0; same && d < xt->rank; d++) same = xt->dims[d] == yt->dims[d];
  if (same) return;
  if (xt->rank < yt->rank || (xt->rank == yt->rank && tpu_hlo_type_numel(xt) < tpu_hlo_type_numel(yt)))
    *x = as_shape(c, *x, *y);
  else
    *y = as_shape(c, *y, *x);
}

/* Elementwise ops whose operands may be per-matrix scalars or vectors. */
static tpu_hlo_value bin(tpu_lower_ctx *c, tpu_hlo_binary_t op, tpu_hlo_value x, tpu_hlo_value y) {
  match(c, &x, &y);
  return tpu_hlo_binary(B, op, x, y);
}
static tpu_hlo_value cmpb(tpu_lower_ctx *c, tpu_hlo_cmp_t d, tpu_hlo_value x, tpu_hlo_value y) {
  match(c, &x, &y);
  return cmp(c, d, x, y);
}
static tpu_hlo_value selb(tpu_lower_ctx *c, tpu_hlo_value p, tpu_hlo_value t, tpu_hlo_value f) {
  match(c, &t, &f);
  match(c, &p, &t);
  match(c, &t, &f);
  return sel(c, p, t, f);
}
static tpu_hlo_value not_(tpu_lower_ctx *c, tpu_hlo_value x) { return un(c, TPU_HLO_NOT, x); }
static tpu_hlo_value absv(tpu_lower_ctx *c, tpu_hlo_value x) { return un(c, TPU_HLO_ABS, x); }
static tpu_hlo_value maxv(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return bin(c, TPU_HLO_MAX, x, y); }
static tpu_hlo_value minv(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return bin(c, TPU_HLO_MIN, x, y); }
static tpu_hlo_value real_of(tpu_lower_ctx *c, tpu_hlo_value x) {
  return tpu_dtype_is_complex(tpu_hlo_dtype(B, x)) ? un(c, TPU_HLO_REAL, x) : x;
}
static tpu_hlo_value imag_of(tpu_lower_ctx *c, tpu_hlo_value x) { return un(c, TPU_HLO_IMAG, x); }
static tpu_hlo_value complex_of(tpu_lower_ctx *c, tpu_hlo_value re, tpu_hlo_value im) {
  return tpu_hlo_binary(B, TPU_HLO_COMPLEX, re, im);
}
/* |re| + |im| (LAPACK's cabs1; |x| for real x). */
static tpu_hlo_value cabs1(tpu_lower_ctx *c, tpu_hlo_value x) {
  if (!tpu_dtype_is_complex(tpu_hlo_dtype(B, x))) return absv(c, x);
  return add(c, absv(c, un(c, TPU_HLO_REAL, x)), absv(c, un(c, TPU_HLO_IMAG, x)));
}

/* A rank-0 s64 or per-matrix s64 plus a constant. */
static tpu_hlo_value plus(tpu_lower_ctx *c, tpu_hlo_value x, int64_t k) {
  return add(c, x, tpu_hlo_const_i64(B, tpu_hlo_type_of(B, x), k));
}

/* Element |idx| (per matrix, s64 [batch, 1, 1]) of the vectors |v| along
 * |dim| (the size-1 dim kept); zero where |idx| is out of range. */
static tpu_hlo_value at(tpu_lower_ctx *c, tpu_hlo_value v, tpu_hlo_value idx, int dim) {
  tpu_hlo_value hit = cmpb(c, TPU_HLO_EQ, index_along(c, v, dim), idx);
  return row_where(c, v, hit, dim);
}
/* Row vectors [batch, 1, n]. */
static tpu_hlo_value at_row(tpu_lower_ctx *c, tpu_hlo_value v, tpu_hlo_value idx) {
  return at(c, v, idx, tpu_hlo_rank(B, v) - 1);
}

/* u[j] = v[j - by] along the last dim, zero past the ends. */
static tpu_hlo_value shift(tpu_lower_ctx *c, tpu_hlo_value v, int64_t by) {
  int r = tpu_hlo_rank(B, v);
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0}, in[TPU_HLO_MAX_RANK] = {0};
  lo[r - 1] = by;
  hi[r - 1] = -by;
  return tpu_hlo_pad(B, v, tpu_hlo_scalar_f64(B, tpu_hlo_dtype(B, v), 0.0), lo, hi, in);
}

/* The elements h[j + d, j] as a row vector [batch, 1, n] (zero where j + d
 * is out of range): d 0 the diagonal, 1 the first subdiagonal (at its
 * column), -1 the first superdiagonal (at its column). */
static tpu_hlo_value band(tpu_lower_ctx *c, tpu_hlo_value h, int64_t d) {
  int r = tpu_hlo_rank(B, h);
  tpu_hlo_value diff = sub(c, index_along(c, h, r - 2), index_along(c, h, r - 1));
  return row_where(c, h, cmpb(c, TPU_HLO_EQ, diff, tpu_hlo_scalar_i64(B, TPU_S64, d)), r - 2);
}

/* 2^e for the integer-valued s64 |e| (within the type's normal range), as
 * |dtype|, exactly. */
static tpu_hlo_value pow2(tpu_lower_ctx *c, tpu_hlo_value e, tpu_dtype_t dtype) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, e);
  bool f64 = dtype == TPU_F64;
  tpu_hlo_value bits = add(c, e, tpu_hlo_const_i64(B, &t, f64 ? 1023 : 127));
  bits = tpu_hlo_binary(B, TPU_HLO_SHL, bits, tpu_hlo_const_i64(B, &t, f64 ? 52 : 23));
  if (!f64) bits = tpu_hlo_convert(B, bits, TPU_S32);
  tpu_hlo_type ft = with_dtype(&t, dtype);
  return tpu_hlo_bitcast(B, bits, &ft);
}

/* The complex type of real |t| (complex types are their own). */
static tpu_dtype_t complex_type(tpu_dtype_t t) {
  return t == TPU_F64 || t == TPU_C128 ? TPU_C128 : TPU_C64;
}

/* The constants of LAPACK's lamch for the real type |rt|. */
static double ulp_of(tpu_dtype_t rt) { return rt == TPU_F64 ? 0x1p-52 : 0x1p-23; }
static double safmin_of(tpu_dtype_t rt) { return rt == TPU_F64 ? 0x1p-1022 : 0x1p-126; }

/* Per-matrix integer registers: fields of one s64 [batch, 1, count]. */
static tpu_hlo_value field(tpu_lower_ctx *c, tpu_hlo_value regs, int f) {
  return tpu_hlo_slice_dim(B, regs, tpu_hlo_rank(B, regs) - 1, f, f + 1, 1);
}
static tpu_hlo_value pack(tpu_lower_ctx *c, const tpu_hlo_value *fields, int n) {
  return tpu_hlo_concatenate(B, fields, n, tpu_hlo_rank(B, fields[0]) - 1);
}
/* Whether any matrix's |flag| (i1 [batch, 1, 1]) holds, rank 0. */
static tpu_hlo_value any(tpu_lower_ctx *c, tpu_hlo_value flag) {
  int r = tpu_hlo_rank(B, flag);
  int64_t all[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) all[d] = d;
  return tpu_lower_reduce(B, flag, TPU_HLO_OR, all, r);
}

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
  tpu_hlo_value nz = cmpb(c, TPU_HLO_NE, a, fill(c, a, 0.0));
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
  j = selb(c, swap, j, plus(c, k, 0));
  m = selb(c, swap, m, plus(c, k, 0));
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
  tpu_hlo_value nl = selb(c, and_(c, found_r, not_(c, last)), plus(c, l, -1), l);
  tpu_hlo_value nk = selb(c, found_c, plus(c, k, 1), k);
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
  m = selb(c, mask, m, fill(c, m, 0.0));
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
    tpu_hlo_value jj = fix == 0 ? j : plus(c, j, -1);
    tpu_hlo_value lhs = up ? mul(c, x, pow2(c, jj, dt)) : mul(c, x, pow2(c, neg(c, plus(c, jj, 1)), dt));
    tpu_hlo_value rhs = up ? mul(c, y, pow2(c, neg(c, plus(c, jj, 1)), dt)) : mul(c, y, pow2(c, jj, dt));
    tpu_hlo_value holds = up ? cmp(c, TPU_HLO_GE, lhs, rhs) : cmp(c, TPU_HLO_LT, lhs, rhs);
    if (fix == 0) j = sel(c, holds, j, plus(c, j, 1));
    else j = sel(c, and_(c, holds, cmp(c, TPU_HLO_GT, j, tpu_hlo_const_i64(B, &it, 0))), plus(c, j, -1), j);
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
                            fill(c, scale, 1.0)));
  /* row i (columns k..) times g, column i (rows ..l) times f */
  tpu_hlo_value rows = index_along(c, a, r - 2), cols = index_along(c, a, r - 1);
  tpu_hlo_value in_row = and_(c, cmpb(c, TPU_HLO_EQ, rows, ii), cmpb(c, TPU_HLO_GE, cols, k));
  tpu_hlo_value in_col = and_(c, cmpb(c, TPU_HLO_EQ, cols, ii), cmpb(c, TPU_HLO_LE, rows, l));
  tpu_dtype_t dt = tpu_hlo_dtype(B, a);
  a = selb(c, in_row, bin(c, TPU_HLO_MUL, a, tpu_hlo_convert(B, gs, dt)), a);
  a = selb(c, in_col, bin(c, TPU_HLO_MUL, a, tpu_hlo_convert(B, fs, dt)), a);
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

/* LAPACK's larfg of [alpha; x] with |x|^2 = |xnorm2| (real, per matrix):
 * beta (real), tau, and the factor taking x to v (v = [1; x * scale]); no
 * reflection (tau 0, beta alpha) where x is zero and alpha real. */
static void larfg(tpu_lower_ctx *c, tpu_hlo_value alpha, tpu_hlo_value xnorm2, tpu_hlo_value *out_beta,
                  tpu_hlo_value *out_tau, tpu_hlo_value *out_scale) {
  bool cplx = tpu_dtype_is_complex(tpu_hlo_dtype(B, alpha));
  tpu_hlo_value ar = real_of(c, alpha);
  tpu_hlo_value zero = fill(c, ar, 0.0);
  tpu_hlo_value skip = cmp(c, TPU_HLO_EQ, xnorm2, zero);
  tpu_hlo_value amag2 = mul(c, ar, ar);
  if (cplx) {
    tpu_hlo_value ai = imag_of(c, alpha);
    skip = and_(c, skip, cmp(c, TPU_HLO_EQ, ai, zero));
    amag2 = add(c, amag2, mul(c, ai, ai));
  }
  tpu_hlo_value norm = un(c, TPU_HLO_SQRT, add(c, amag2, xnorm2));
  tpu_hlo_value beta = sel(c, cmp(c, TPU_HLO_GE, ar, zero), neg(c, norm), norm);
  tpu_hlo_value safe = sel(c, skip, fill(c, beta, 1.0), beta);
  tpu_hlo_value bc = as_type_of(c, safe, alpha);
  *out_tau = sel(c, skip, fill(c, alpha, 0.0), dvd(c, sub(c, bc, alpha), bc));
  tpu_hlo_value den = sel(c, skip, fill(c, alpha, 1.0), sub(c, alpha, bc));
  *out_scale = sel(c, skip, fill(c, alpha, 0.0), dvd(c, fill(c, alpha, 1.0), den));
  *out_beta = sel(c, skip, ar, beta);
}

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
  tpu_hlo_value at_top = cmpb(c, TPU_HLO_EQ, rows, plus(c, ii, 1));
  tpu_hlo_value below = and_(c, cmpb(c, TPU_HLO_GT, rows, plus(c, ii, 1)), cmpb(c, TPU_HLO_LE, rows, ihi));
  tpu_hlo_value alpha = row_where(c, col, at_top, r - 2);
  tpu_hlo_value beta, tau, scale;
  larfg(c, alpha, norm2_where(c, col, below, r - 2), &beta, &tau, &scale);
  tau = selb(c, active, tau, fill(c, tau, 0.0));
  tpu_hlo_value v = selb(c, below, bin(c, TPU_HLO_MUL, col, scale), fill(c, col, 0.0));
  v = selb(c, at_top, fill(c, col, 1.0), v);
  tpu_hlo_value vh = mT(c, v, true);
  /* A H, then H^H A, then Z H (H = I - tau v v^H); inactive matrices keep
   * their values exactly (NaNs included) */
  tpu_hlo_value a0 = a;
  tpu_hlo_value w = matmul(c, a, v);
  a = sub(c, a, bin(c, TPU_HLO_MUL, matmul(c, w, vh), tau));
  tpu_hlo_value u = matmul(c, vh, a);
  a = selb(c, active, sub(c, a, bin(c, TPU_HLO_MUL, matmul(c, v, u), conj_of(c, tau))), a0);
  if (vectors) s[1] = selb(c, active, sub(c, s[1], bin(c, TPU_HLO_MUL, matmul(c, matmul(c, s[1], v), vh), tau)), s[1]);
  /* column i: beta, then zeros */
  tpu_hlo_value arows = index_along(c, a, r - 2), acols = index_along(c, a, r - 1);
  tpu_hlo_value in_col = and_(c, cmpb(c, TPU_HLO_EQ, acols, ii), as_shape(c, active, arows));
  tpu_hlo_value newcol = selb(c, at_top, as_type_of(c, beta, a), selb(c, below, fill(c, col, 0.0), col));
  a = selb(c, in_col, as_shape(c, newcol, a), a);
  s[0] = a;
}
static void hessenberg_vectors(tpu_lower_ctx *c, tpu_hlo_value i, tpu_hlo_value *s) { hessenberg_step(c, i, s, true); }
static void hessenberg_values(tpu_lower_ctx *c, tpu_hlo_value i, tpu_hlo_value *s) { hessenberg_step(c, i, s, false); }

/* --- QR iterations (lahqr) ---------------------------------------------------------
 * The matrices are [batch, N, N], N = n + 3, padded with a zero row and
 * column in front and two behind, so that the windows a microstep reads
 * (rows or columns p-1..p+2, gathered per matrix) stay inside even at the
 * edges: logical row j is row j + 1. Registers per matrix: i (the active
 * block's last row), l (its first), k (the next bulge position; past i - 1
 * when a new iteration starts), its (iterations since the last deflation),
 * kdefl (for exceptional shifts), info (LAPACK's: the row where iterations
 * ran out, 1-based), ilo, ihi. */

enum { R_I, R_L, R_K, R_ITS, R_KDEFL, R_INFO, R_ILO, R_IHI, R_COUNT };

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
  tpu_hlo_value zero = fill(c, p, 0.0), at = plus(c, p, 1);
  int64_t size[3] = {1, rows ? 3 : t.dims[1], rows ? t.dims[2] : 3};
  tpu_hlo_gather_dims d = {.num_offset = 2, .offset_dims = {1, 2}, .num_collapsed = 1, .collapsed_slice_dims = {0},
                           .num_start_map = 3, .start_index_map = {0, 1, 2}, .index_vector_dim = 1};
  tpu_hlo_type out = tpu_hlo_make_type(t.dtype, 3, (int64_t[]){t.dims[0], size[1], size[2]});
  return tpu_hlo_gather(B, h, rows ? starts(c, at, zero) : starts(c, zero, at), &d, size, &out);
}

/* |h| with the window of window() replaced by |w|. */
static tpu_hlo_value put_window(tpu_lower_ctx *c, tpu_hlo_value h, tpu_hlo_value p, bool rows, tpu_hlo_value w) {
  tpu_hlo_value zero = fill(c, p, 0.0), at = plus(c, p, 1);
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
  return tpu_hlo_scatter(B, h, starts(c, plus(c, row, 1), plus(c, col, 1)), tpu_hlo_reshape(B, v, 1, &bn), &d, NULL,
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
  tpu_hlo_value parts[3] = {tpu_hlo_iota(B, &it, 0), plus(c, j, 1), j};
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
  tpu_hlo_value zero = fill(c, a, 0.0), one = fill(c, a, 1.0), half = fill(c, a, 0.5);
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
  tpu_hlo_value real = and_(c, general, cmp(c, TPU_HLO_GE, z, fill(c, a, 4.0 * ulp_of(rt))));
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
  tpu_hlo_value zero = fill(c, as, 0.0);
  tpu_hlo_value tst = add(c, cabs1(c, dm1), cabs1(c, dg));
  tpu_hlo_value extra = add(c, selb(c, cmpb(c, TPU_HLO_GE, plus(c, j, -2), ilo), shift(c, re_s, 1), zero),
                            selb(c, cmpb(c, TPU_HLO_LE, plus(c, j, 1), ihi), shift(c, re_s, -1), zero));
  tst = sel(c, cmp(c, TPU_HLO_EQ, tst, zero), add(c, tst, extra), tst);
  tpu_hlo_value au = cabs1(c, ud), ad = cabs1(c, dg), adiff = cabs1(c, sub(c, dm1, dg));
  tpu_hlo_value ab = maxv(c, as, au), ba = minv(c, as, au), aa = maxv(c, ad, adiff), bb = minv(c, ad, adiff);
  tpu_hlo_value ss = add(c, aa, ab);
  tpu_hlo_value ulpv = fill(c, as, ulp);
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
  tpu_hlo_value ex = add(c, as_type_of(c, mul(c, fill(c, real_of(c, si), 0.75),
                                               absv(c, real_of(c, sel(c, ex20, si, at_row(c, sd, plus(c, ll, 1)))))),
                                          di),
                         sel(c, ex20, di, at_row(c, dg, ll)));
  tpu_hlo_value u = mul(c, un(c, TPU_HLO_SQRT, at_row(c, ud, i)), un(c, TPU_HLO_SQRT, si));
  tpu_hlo_value su = cabs1(c, u);
  tpu_hlo_value x = mul(c, fill(c, di, 0.5), sub(c, at_row(c, dg, plus(c, i, -1)), di));
  tpu_hlo_value sx = cabs1(c, x), rzero = fill(c, sx, 0.0);
  tpu_hlo_value s2 = maxv(c, su, sx);
  s2 = sel(c, cmp(c, TPU_HLO_EQ, s2, rzero), fill(c, s2, 1.0), s2);
  tpu_hlo_value s2c = as_type_of(c, s2, x);
  tpu_hlo_value xs = dvd(c, x, s2c), us = dvd(c, u, s2c);
  tpu_hlo_value y = mul(c, s2c, un(c, TPU_HLO_SQRT, add(c, mul(c, xs, xs), mul(c, us, us))));
  tpu_hlo_value xd = dvd(c, x, as_type_of(c, sel(c, cmp(c, TPU_HLO_GT, sx, rzero), sx, fill(c, sx, 1.0)), x));
  tpu_hlo_value dot = add(c, mul(c, real_of(c, xd), real_of(c, y)), mul(c, imag_of(c, xd), imag_of(c, y)));
  y = sel(c, and_(c, cmp(c, TPU_HLO_GT, sx, rzero), cmp(c, TPU_HLO_LT, dot, rzero)), neg(c, y), y);
  tpu_hlo_value xy = add(c, x, y);
  tpu_hlo_value safe = sel(c, cmp(c, TPU_HLO_EQ, cabs1(c, xy), rzero), fill(c, xy, 1.0), xy);
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
  tpu_hlo_value one = fill(c, tau, 1.0);
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
  tpu_hlo_value zero_i = fill(c, i, 0.0);
  tpu_hlo_value chase = and_(c, and_(c, cmp(c, TPU_HLO_GE, i, ilo), cmp(c, TPU_HLO_EQ, info, zero_i)),
                             cmp(c, TPU_HLO_LE, k, plus(c, i, -1)));
  tpu_hlo_value pos = sel(c, chase, k, zero_i);
  tpu_hlo_value rows = window(c, h, pos, true); /* [batch, 3, N] */
  tpu_hlo_value bulge = selb(c, cmpb(c, TPU_HLO_EQ, index_along(c, rows, 2), pos), rows, fill(c, rows, 0.0));
  bulge = reduce_keep(c, bulge, TPU_HLO_ADD, 2); /* column k - 1: [batch, 3, 1] */
  tpu_hlo_value alpha = tpu_hlo_slice_dim(B, bulge, 1, 0, 1, 1), xa = tpu_hlo_slice_dim(B, bulge, 1, 1, 2, 1);
  tpu_hlo_value xb = fill(c, alpha, 0.0);
  if (!cplx) xb = sel(c, cmp(c, TPU_HLO_LT, k, plus(c, i, -1)), tpu_hlo_slice_dim(B, bulge, 1, 2, 3, 1), xb);
  tpu_hlo_value beta, tau, scal;
  tpu_hlo_value xa2 = absv(c, xa), xb2 = absv(c, xb);
  larfg(c, alpha, add(c, mul(c, xa2, xa2), mul(c, xb2, xb2)), &beta, &tau, &scal);
  tau = sel(c, chase, tau, fill(c, tau, 0.0));
  tpu_hlo_value gm = reflector(c, tau, mul(c, xa, scal), mul(c, xb, scal));
  tpu_hlo_value zr = fill(c, tau, 0.0);
  rows = turn(c, rows, gm, chase, true);
  /* column k - 1 (column k of the padded window): beta, then zeros */
  rows = set_in(c, rows, chase, zero_i, pos, as_type_of(c, beta, tau));
  rows = set_in(c, rows, chase, plus(c, zero_i, 1), pos, zr);
  rows = set_in(c, rows, chase, plus(c, zero_i, 2), pos, zr);
  tpu_hlo_value t2 = TPU_HLO_NONE, hi = TPU_HLO_NONE, endsc = TPU_HLO_NONE;
  if (cplx) {
    /* zlahqr ends a sweep making H(i, i-1) real: row i (columns past i)
     * by conj(t2), column i (rows above i) by t2, for t2 = H(i, i-1) / |.|,
     * known from the row window before the columns turn */
    tpu_hlo_value r1 = tpu_hlo_slice_dim(B, rows, 1, 1, 2, 1); /* [batch, 1, N] */
    tpu_hlo_value g00 = tpu_hlo_slice_dim(B, tpu_hlo_slice_dim(B, gm, 1, 0, 1, 1), 2, 0, 1, 1);
    tpu_hlo_value g10 = tpu_hlo_slice_dim(B, tpu_hlo_slice_dim(B, gm, 1, 1, 2, 1), 2, 0, 1, 1);
    hi = add(c, mul(c, at_row(c, r1, plus(c, pos, 1)), g00), mul(c, at_row(c, r1, plus(c, pos, 2)), g10));
    tpu_hlo_value mag = absv(c, hi), rz = fill(c, mag, 0.0);
    endsc = and_(c, and_(c, chase, cmp(c, TPU_HLO_EQ, k, plus(c, i, -1))), cmp(c, TPU_HLO_NE, imag_of(c, hi), rz));
    t2 = sel(c, endsc, dvd(c, hi, as_type_of(c, sel(c, endsc, mag, fill(c, mag, 1.0)), hi)), fill(c, hi, 1.0));
    hi = as_type_of(c, mag, hi);
    tpu_hlo_value past = and_(c, cmpb(c, TPU_HLO_EQ, index_along(c, rows, 1), fill(c, zero_i, 1.0)),
                              cmpb(c, TPU_HLO_GT, index_along(c, rows, 2), plus(c, i, 1)));
    rows = selb(c, past, bin(c, TPU_HLO_MUL, rows, conj_of(c, t2)), rows);
  }
  h = put_window(c, h, pos, true, rows);
  tpu_hlo_value cols = turn(c, window(c, h, pos, false), gm, chase, false); /* [batch, N, 3] */
  if (cplx) {
    tpu_hlo_value above = and_(c, cmpb(c, TPU_HLO_EQ, index_along(c, cols, 2), fill(c, zero_i, 1.0)),
                               cmpb(c, TPU_HLO_LT, index_along(c, cols, 1), plus(c, i, 1)));
    cols = selb(c, above, bin(c, TPU_HLO_MUL, cols, t2), cols);
    cols = set_in(c, cols, endsc, plus(c, i, 1), zero_i, hi);
  }
  h = put_window(c, h, pos, false, cols);
  if (vectors) {
    tpu_hlo_value zc = turn(c, window(c, z, pos, false), gm, chase, false);
    if (cplx)
      zc = selb(c, cmpb(c, TPU_HLO_EQ, index_along(c, zc, 2), fill(c, zero_i, 1.0)), bin(c, TPU_HLO_MUL, zc, t2), zc);
    z = put_window(c, z, pos, false, zc);
  }
  f[R_K] = sel(c, chase, plus(c, k, 1), k);
  s[0] = h;
  if (vectors) s[1] = z;
  s[vectors ? 2 : 1] = pack(c, f, R_COUNT);
}
static void chase_vectors(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { chase_step(c, k, s, true); }
static void chase_values(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { chase_step(c, k, s, false); }

static tpu_hlo_value chase_more_of(tpu_lower_ctx *c, tpu_hlo_value regs) {
  tpu_hlo_value i = field(c, regs, R_I), ilo = field(c, regs, R_ILO), info = field(c, regs, R_INFO),
                k = field(c, regs, R_K);
  return any(c, and_(c, and_(c, cmp(c, TPU_HLO_GE, i, ilo), cmp(c, TPU_HLO_EQ, info, fill(c, info, 0.0))),
                     cmp(c, TPU_HLO_LE, k, plus(c, i, -1))));
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
  tpu_hlo_value nh = plus(c, sub(c, ihi, ilo), 1);
  tpu_hlo_value smlnum = mul(c, tpu_hlo_const_f64(B, &st, safmin_of(rt)),
                             dvd(c, tpu_hlo_convert(B, nh, rt), tpu_hlo_const_f64(B, &st, ulp)));
  tpu_hlo_value itmax = mul(c, maxv(c, nh, fill(c, i, 10.0)), fill(c, i, 30.0));
  tpu_hlo_value zero_i = fill(c, i, 0.0);
  tpu_hlo_value done = or_(c, cmp(c, TPU_HLO_LT, i, ilo), cmp(c, TPU_HLO_NE, info, zero_i));
  tpu_hlo_value start = not_(c, done);
  tpu_hlo_value fail = and_(c, start, cmp(c, TPU_HLO_GT, its, itmax));
  start = and_(c, start, not_(c, fail));

  tpu_hlo_value sd, dg, ud;
  bands(c, h, n, &sd, &dg, &ud);
  tpu_hlo_value ll = deflation(c, dg, sd, ud, i, l, ilo, ihi, smlnum, ulp);
  tpu_hlo_value split_all = cmp(c, TPU_HLO_GE, ll, cplx ? i : plus(c, i, -1));
  tpu_hlo_value conv = and_(c, start, split_all);
  tpu_hlo_value two = and_(c, conv, cmp(c, TPU_HLO_EQ, ll, plus(c, i, -1))); /* real only */
  tpu_hlo_value iter = and_(c, start, not_(c, split_all));
  tpu_hlo_value kd = plus(c, kdefl, 1);
  tpu_hlo_value ex20 = cmp(c, TPU_HLO_EQ, tpu_hlo_binary(B, TPU_HLO_REM, kd, fill(c, kd, 20.0)), zero_i);
  tpu_hlo_value ex10 = and_(c, not_(c, ex20),
                            cmp(c, TPU_HLO_EQ, tpu_hlo_binary(B, TPU_HLO_REM, kd, fill(c, kd, 10.0)), zero_i));
  tpu_hlo_value j = index_along(c, dg, 2);
  tpu_hlo_value sp1 = shift(c, sd, -1), dp1 = shift(c, dg, -1), dm1 = shift(c, dg, 1);
  tpu_hlo_value m, v1, v2, v3, std[6] = {TPU_HLO_NONE};
  if (!cplx) {
    /* the bottom 2x2 block, and Francis' double shift (exceptional ones
     * every 10th iteration without deflation) */
    tpu_hlo_value a0 = at_row(c, dg, plus(c, i, -1)), b0 = at_row(c, ud, i), c0 = at_row(c, sd, i),
                  d0 = at_row(c, dg, i);
    lanv2(c, a0, b0, c0, d0, std);
    tpu_hlo_value ex = or_(c, ex20, ex10);
    tpu_hlo_value sx = sel(c, ex20, add(c, absv(c, c0), absv(c, at_row(c, sd, plus(c, i, -1)))),
                           add(c, absv(c, at_row(c, sd, plus(c, ll, 1))), absv(c, at_row(c, sd, plus(c, ll, 2)))));
    tpu_hlo_value hx = add(c, mul(c, fill(c, sx, 0.75), sx), sel(c, ex20, d0, at_row(c, dg, ll)));
    tpu_hlo_value h11 = sel(c, ex, hx, a0), h12 = sel(c, ex, mul(c, fill(c, sx, -0.4375), sx), b0);
    tpu_hlo_value h21 = sel(c, ex, sx, c0), h22 = sel(c, ex, hx, d0);
    tpu_hlo_value sn = add(c, add(c, add(c, absv(c, h11), absv(c, h12)), absv(c, h21)), absv(c, h22));
    tpu_hlo_value sns = sel(c, cmp(c, TPU_HLO_EQ, sn, fill(c, sn, 0.0)), fill(c, sn, 1.0), sn);
    h11 = dvd(c, h11, sns), h21 = dvd(c, h21, sns), h12 = dvd(c, h12, sns), h22 = dvd(c, h22, sns);
    tpu_hlo_value tr = dvd(c, add(c, h11, h22), fill(c, h11, 2.0));
    tpu_hlo_value det = sub(c, mul(c, sub(c, h11, tr), sub(c, h22, tr)), mul(c, h12, h21));
    tpu_hlo_value rtdisc = un(c, TPU_HLO_SQRT, absv(c, det));
    tpu_hlo_value cpx = cmp(c, TPU_HLO_GE, det, fill(c, det, 0.0));
    tpu_hlo_value r1 = add(c, tr, rtdisc), r2 = sub(c, tr, rtdisc);
    tpu_hlo_value nearer = cmp(c, TPU_HLO_LE, absv(c, sub(c, r1, h22)), absv(c, sub(c, r2, h22)));
    tpu_hlo_value rr = mul(c, sel(c, nearer, r1, r2), sn);
    tpu_hlo_value rt1r = sel(c, cpx, mul(c, tr, sn), rr), rt2r = rt1r;
    tpu_hlo_value rt1i = sel(c, cpx, mul(c, rtdisc, sn), fill(c, sn, 0.0)), rt2i = neg(c, rt1i);
    /* where to start: two consecutive small subdiagonals */
    tpu_hlo_value sp2 = shift(c, sd, -2), up1 = shift(c, ud, -1);
    tpu_hlo_value dr1 = bin(c, TPU_HLO_SUB, dg, rt1r), dr2 = bin(c, TPU_HLO_SUB, dg, rt2r);
    tpu_hlo_value sm = add(c, bin(c, TPU_HLO_ADD, absv(c, dr2), absv(c, rt2i)), absv(c, sp1));
    sm = sel(c, cmp(c, TPU_HLO_EQ, sm, fill(c, sm, 0.0)), fill(c, sm, 1.0), sm);
    tpu_hlo_value h21s = dvd(c, sp1, sm);
    v1 = sub(c, add(c, mul(c, h21s, up1), mul(c, dr1, dvd(c, dr2, sm))),
             bin(c, TPU_HLO_MUL, dvd(c, as_shape(c, rt2i, sm), sm), rt1i));
    v2 = mul(c, h21s, bin(c, TPU_HLO_SUB, bin(c, TPU_HLO_SUB, add(c, dg, dp1), rt1r), rt2r));
    v3 = mul(c, h21s, sp2);
    tpu_hlo_value sv = add(c, add(c, absv(c, v1), absv(c, v2)), absv(c, v3));
    sv = sel(c, cmp(c, TPU_HLO_EQ, sv, fill(c, sv, 0.0)), fill(c, sv, 1.0), sv);
    v1 = dvd(c, v1, sv), v2 = dvd(c, v2, sv), v3 = dvd(c, v3, sv);
    tpu_hlo_value h00 = mul(c, absv(c, sd), add(c, absv(c, v2), absv(c, v3)));
    tpu_hlo_value h01 = mul(c, absv(c, v1), add(c, add(c, absv(c, dm1), absv(c, dg)), absv(c, dp1)));
    tpu_hlo_value okm = or_(c, cmpb(c, TPU_HLO_EQ, j, ll), cmp(c, TPU_HLO_LE, h00, mul(c, fill(c, h01, ulp), h01)));
    tpu_hlo_value candm = and_(c, okm, and_(c, cmpb(c, TPU_HLO_GE, j, ll), cmpb(c, TPU_HLO_LE, j, plus(c, i, -2))));
    m = reduce_keep(c, selb(c, candm, j, tpu_hlo_scalar_i64(B, TPU_S64, -1)), TPU_HLO_MAX, 2);
  } else {
    tpu_hlo_value t = complex_shift(c, dg, sd, ud, i, ll, ex20, ex10);
    tpu_hlo_value h11s = bin(c, TPU_HLO_SUB, dg, t), h21 = real_of(c, sp1);
    tpu_hlo_value sm = add(c, cabs1(c, h11s), absv(c, h21));
    sm = sel(c, cmp(c, TPU_HLO_EQ, sm, fill(c, sm, 0.0)), fill(c, sm, 1.0), sm);
    h11s = dvd(c, h11s, as_type_of(c, sm, h11s));
    h21 = dvd(c, h21, sm);
    tpu_hlo_value okm = cmp(c, TPU_HLO_LE, mul(c, absv(c, real_of(c, sd)), absv(c, h21)),
                            mul(c, fill(c, sm, ulp), mul(c, cabs1(c, h11s), add(c, cabs1(c, dg), cabs1(c, dp1)))));
    tpu_hlo_value candm = and_(c, okm, and_(c, cmpb(c, TPU_HLO_GT, j, ll), cmpb(c, TPU_HLO_LE, j, plus(c, i, -1))));
    m = maxv(c, reduce_keep(c, selb(c, candm, j, tpu_hlo_scalar_i64(B, TPU_S64, -1)), TPU_HLO_MAX, 2), ll);
    v1 = h11s, v2 = as_type_of(c, h21, h11s), v3 = fill(c, h11s, 0.0);
  }

  /* the first reflector (at m), lanv2's rotation (at i - 1), or nothing */
  tpu_hlo_value pos = sel(c, iter, m, sel(c, two, plus(c, i, -1), zero_i));
  /* the negligible subdiagonal first */
  tpu_hlo_value defl = and_(c, start, cmp(c, TPU_HLO_GT, ll, ilo));
  tpu_hlo_value s_ll = at_row(c, sd, ll);
  h = put_element(c, h, ll, plus(c, ll, -1), sel(c, defl, fill(c, s_ll, 0.0), s_ll));
  tpu_hlo_value rows = window(c, h, pos, true); /* [batch, 3, N] */
  tpu_hlo_value alpha = at_row(c, v1, m), xa = at_row(c, v2, m), xb = at_row(c, v3, m);
  tpu_hlo_value beta, tau, scal;
  tpu_hlo_value xa2 = absv(c, xa), xb2 = absv(c, xb);
  larfg(c, alpha, add(c, mul(c, xa2, xa2), mul(c, xb2, xb2)), &beta, &tau, &scal);
  tpu_hlo_value one = fill(c, tau, 1.0), zr = fill(c, tau, 0.0);
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
  rows = set_in(c, rows, iter, plus(c, zero_i, 1), pos, zr);
  rows = set_in(c, rows, iter, plus(c, zero_i, 2), pos, zr);
  h = put_window(c, h, pos, true, rows);
  /* columns by G; then lanv2's block */
  tpu_hlo_value cols = turn(c, window(c, h, pos, false), gm, moves, false); /* [batch, N, 3] */
  if (!cplx) {
    tpu_hlo_value r0 = plus(c, pos, 1), r1 = plus(c, pos, 2);
    tpu_hlo_value c0 = zero_i, c1 = plus(c, zero_i, 1);
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
    tpu_hlo_value temp = dvd(c, omt, as_type_of(c, sel(c, mscale, mag_omt, fill(c, mag_omt, 1.0)), omt));
    temp = sel(c, mscale, temp, one);
    tpu_hlo_value last = and_(c, iter, cmp(c, TPU_HLO_EQ, m, plus(c, i, -1)));
    /* H(i, i-1) now: the window's row i + 1 (padded), column 0 */
    tpu_hlo_value col0 = tpu_hlo_slice_dim(B, cols, 2, 0, 1, 1);
    tpu_hlo_value hi = row_where(c, col0, cmpb(c, TPU_HLO_EQ, index_along(c, col0, 1), plus(c, i, 1)), 1);
    hi = mul(c, hi, sel(c, and_(c, mscale, cmp(c, TPU_HLO_EQ, m, plus(c, i, -1))), conj_of(c, temp), one));
    tpu_hlo_value mag_hi = absv(c, hi);
    tpu_hlo_value endsc = and_(c, last, cmp(c, TPU_HLO_NE, imag_of(c, hi), fill(c, mag_hi, 0.0)));
    tpu_hlo_value t2 = sel(c, endsc, dvd(c, hi, as_type_of(c, sel(c, endsc, mag_hi, fill(c, mag_hi, 1.0)), hi)), one);
    tpu_hlo_type vt = *tpu_hlo_type_of(B, h);
    vt.dims[1] = 1;
    tpu_hlo_type vit = with_dtype(&vt, TPU_S64);
    tpu_hlo_value jj = plus(c, tpu_hlo_iota(B, &vit, 2), -1); /* logical index of each padded column */
    tpu_hlo_value in_m = and_(c, and_(c, cmpb(c, TPU_HLO_GE, jj, m), cmpb(c, TPU_HLO_LE, jj, i)),
                              cmpb(c, TPU_HLO_NE, jj, plus(c, m, 1)));
    tpu_hlo_value dvec = selb(c, and_(c, in_m, as_shape(c, mscale, in_m)), conj_of(c, temp), one);
    dvec = tpu_hlo_broadcast_to(B, dvec, &vt);
    dvec = mul(c, dvec, selb(c, and_(c, cmpb(c, TPU_HLO_EQ, jj, i), as_shape(c, endsc, jj)), t2, fill(c, dvec, 1.0)));
    tpu_hlo_value factor = mul(c, as_shape(c, conj_of(c, mT(c, dvec, false)), h), as_shape(c, dvec, h));
    tpu_hlo_value hr = index_along(c, h, 1), hc = index_along(c, h, 2);
    /* H(m, m-1) kept, H(i, i-1) := |H(i, i-1)| */
    tpu_hlo_value keep_m = and_(c, and_(c, cmpb(c, TPU_HLO_EQ, hr, plus(c, m, 1)), cmpb(c, TPU_HLO_EQ, hc, m)),
                                as_shape(c, mscale, hr));
    factor = sel(c, keep_m, fill(c, factor, 1.0), factor);
    tpu_hlo_value at_i = and_(c, and_(c, cmpb(c, TPU_HLO_EQ, hr, plus(c, i, 1)), cmpb(c, TPU_HLO_EQ, hc, i)),
                              as_shape(c, endsc, hr));
    h = sel(c, at_i, as_shape(c, as_type_of(c, mag_hi, h), h), mul(c, h, factor));
    if (vectors) z = mul(c, z, as_shape(c, dvec, z));
  }

  /* the registers */
  tpu_hlo_value big = fill(c, i, (double)(n + 8));
  f[R_I] = sel(c, conv, plus(c, ll, -1), i);
  f[R_L] = sel(c, conv, ilo, sel(c, iter, ll, l));
  f[R_K] = sel(c, iter, plus(c, m, 1), big);
  f[R_ITS] = sel(c, conv, zero_i, sel(c, iter, plus(c, its, 1), its));
  f[R_KDEFL] = sel(c, conv, zero_i, sel(c, iter, kd, kdefl));
  f[R_INFO] = sel(c, fail, plus(c, i, 1), info);
  s[0] = h;
  if (vectors) s[1] = z;
  s[vectors ? 2 : 1] = pack(c, f, R_COUNT);
  tpu_lower_loop_while(c, n, vectors ? 3 : 2, s, vectors ? chase_vectors : chase_values,
                       vectors ? chase_more_vectors : chase_more_values);
}
static void hqr_vectors(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { hqr_step(c, k, s, true); }
static void hqr_values(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s) { hqr_step(c, k, s, false); }

static tpu_hlo_value hqr_more_of(tpu_lower_ctx *c, tpu_hlo_value regs) {
  tpu_hlo_value i = field(c, regs, R_I), ilo = field(c, regs, R_ILO), info = field(c, regs, R_INFO);
  return any(c, and_(c, cmp(c, TPU_HLO_GE, i, ilo), cmp(c, TPU_HLO_EQ, info, fill(c, info, 0.0))));
}
static tpu_hlo_value hqr_more_vectors(tpu_lower_ctx *c, const tpu_hlo_value *s) { return hqr_more_of(c, s[2]); }
static tpu_hlo_value hqr_more_values(tpu_lower_ctx *c, const tpu_hlo_value *s) { return hqr_more_of(c, s[1]); }

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
  tpu_hlo_value hs[3] = {a, vectors ? identity(c, &at) : fill(c, ilo, 0.0), pack(c, hregs, 2)};
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
    tpu_lower_loop_while(c, max, 3, qs, hqr_vectors, hqr_more_vectors);
  } else {
    tpu_hlo_value q2[2] = {qs[0], qs[2]};
    tpu_lower_loop_while(c, max, 2, q2, hqr_values, hqr_more_values);
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
  tpu_hlo_value zero = fill(c, dg, 0.0), one = fill(c, dg, 1.0);
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
    u = selb(c, and_(c, cmp(c, TPU_HLO_EQ, ri, plus(c, ci, 1)), as_shape(c, first, ri)), g1, u);
    u = selb(c, and_(c, cmp(c, TPU_HLO_EQ, plus(c, ri, 1), ci), as_shape(c, second, ri)), shift(c, g1, 1), u);
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
  tpu_hlo_value smin = maxv(c, mul(c, aw, fill(c, aw, ulp)), fill(c, aw, smlnum));
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
  nrm = sel(c, cmp(c, TPU_HLO_EQ, nrm, fill(c, nrm, 0.0)), fill(c, nrm, 1.0), nrm);
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
  tpu_hlo_value zero = fill(c, f, 0.0);
  tpu_hlo_value rr = mag;
  if (lartg) {
    tpu_hlo_value negative = and_(c, cmp(c, TPU_HLO_GT, absv(c, f), absv(c, g)), cmp(c, TPU_HLO_LT, f, zero));
    rr = sel(c, negative, neg(c, mag), mag);
    rr = sel(c, cmp(c, TPU_HLO_EQ, g, zero), f, sel(c, cmp(c, TPU_HLO_EQ, f, zero), g, rr));
  }
  tpu_hlo_value turn = and_(c, rotate, cmp(c, TPU_HLO_NE, rr, zero));
  tpu_hlo_value safe = sel(c, turn, rr, fill(c, rr, 1.0));
  tpu_hlo_value factor = sel(c, turn, dvd(c, complex_of(c, f, neg(c, g)), complex_of(c, safe, zero)),
                             complex_of(c, fill(c, f, 1.0), zero));
  v = mul(c, v, as_shape(c, factor, v));
  /* the turned element is real exactly */
  tpu_hlo_value exact = and_(c, at_k, as_shape(c, turn, at_k));
  return sel(c, exact, complex_of(c, un(c, TPU_HLO_REAL, v), fill(c, re, 0.0)), v);
}

/* Undoes gebal on the rows of |v|: scale, then the row order. */
static tpu_hlo_value unbalance(tpu_lower_ctx *c, tpu_hlo_value v, tpu_hlo_value perm, tpu_hlo_value scale) {
  int r = tpu_hlo_rank(B, v);
  tpu_dtype_t dt = tpu_hlo_dtype(B, v);
  v = mul(c, v, as_shape(c, tpu_hlo_convert(B, mT(c, scale, false), dt), v));
  /* P[q, j] = (perm[j] == q): original row q is balanced row j */
  tpu_hlo_value rows = index_along(c, v, r - 2);
  tpu_hlo_value p = sel(c, cmp(c, TPU_HLO_EQ, as_shape(c, perm, rows), rows), fill(c, v, 1.0), fill(c, v, 0.0));
  return matmul(c, p, v);
}

/* linalg_eig(A) -> (eigenvalues, eigenvectors); _linalg_eigvals(A) ->
 * eigenvalues; linalg_eigvals.out. */
static tpu_status_t eig_rule(tpu_lower_ctx *c) {
  tpu_dtype_t in = c->args[0].dtype;
  if (in != TPU_F32 && in != TPU_F64 && in != TPU_C64 && in != TPU_C128)
    return tpu_lower_error(c, TPU_ERR_NOT_IMPLEMENTED, "\"linalg_eig_out_cpu\" not implemented for '%s'",
                           tpu_dtype_scalar_type(in));
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
    v = sel(c, pair, v, complex_of(c, un(c, TPU_HLO_REAL, v), fill(c, un(c, TPU_HLO_REAL, v), 0.0)));
    v = normalize_columns(c, v, first, true);
    v = sel(c, as_shape(c, second, v), conj_of(c, shift(c, v, 1)), v);
  }
  tpu_lower_set_output(c, 1, v);
  return NULL;
}

const tpu_lower_rule tpu_rules_eig[] = {
    {{"linalg_eig", "linalg_eig.out"}, eig_rule, 0, 0},
    {{"_linalg_eigvals", "linalg_eigvals.out"}, eig_rule, 0, 0},
};
TPU_COUNT_RULES(eig);
