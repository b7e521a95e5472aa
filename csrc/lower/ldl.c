/* The Bunch-Kaufman LDL factorization and solve (torchtpu::ldl_factor,
 * linalg_ldl_solve).
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

const tpu_lower_rule tpu_rules_ldl[] = {
    {{"torchtpu::ldl_factor"}, ldl_factor_rule, 0, 0, {TPU_DTS_F32_F64 | TPU_DTS_COMPLEX, 0, "ldl_factor_kernel_cpu"}},
    {{"linalg_ldl_solve", "linalg_ldl_solve.out"}, ldl_solve_rule, 0, 0,
     {TPU_DTS_F32_F64 | TPU_DTS_COMPLEX, TPU_ADMIT_OUTPUT, "ldl_solve_kernel_cpu"}},
};
TPU_COUNT_RULES(ldl);
