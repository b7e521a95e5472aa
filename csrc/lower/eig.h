/* Helpers the general eigenproblem files (eig.c, hqr.c) share: per-matrix
 * scalars and registers, LAPACK's small kernels, the QR iterations' entry
 * points. Private to csrc/lower. */
#ifndef TPU_LOWER_EIG_H_
#define TPU_LOWER_EIG_H_

#include <math.h>

#include "lower/matrix.h"

/* The [batch, 1, 1] type of the matrices |x| with |dtype|. */
static inline tpu_hlo_type scalar_type(tpu_lower_ctx *c, tpu_hlo_value x, tpu_dtype_t dtype) {
  tpu_hlo_type t = with_dtype(tpu_hlo_type_of(B, x), dtype);
  t.dims[t.rank - 2] = t.dims[t.rank - 1] = 1;
  return t;
}


/* |x| spread to the shape of |like|. */
static inline tpu_hlo_value as_shape(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value like) {
  return spread(c, x, tpu_hlo_type_of(B, like));
}

/* |x| and |y| brought to one shape: the smaller spread to the larger. */
static inline void match(tpu_lower_ctx *c, tpu_hlo_value *x, tpu_hlo_value *y) {
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
static inline tpu_hlo_value bin_matched(tpu_lower_ctx *c, tpu_hlo_binary_t op, tpu_hlo_value x, tpu_hlo_value y) {
  match(c, &x, &y);
  return tpu_hlo_binary(B, op, x, y);
}
static inline tpu_hlo_value cmpb(tpu_lower_ctx *c, tpu_hlo_cmp_t d, tpu_hlo_value x, tpu_hlo_value y) {
  match(c, &x, &y);
  return cmp(c, d, x, y);
}
static inline tpu_hlo_value selb(tpu_lower_ctx *c, tpu_hlo_value p, tpu_hlo_value t, tpu_hlo_value f) {
  match(c, &t, &f);
  match(c, &p, &t);
  match(c, &t, &f);
  return sel(c, p, t, f);
}
static inline tpu_hlo_value not_(tpu_lower_ctx *c, tpu_hlo_value x) { return un(c, TPU_HLO_NOT, x); }
static inline tpu_hlo_value absv(tpu_lower_ctx *c, tpu_hlo_value x) { return un(c, TPU_HLO_ABS, x); }
static inline tpu_hlo_value maxv(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return bin_matched(c, TPU_HLO_MAX, x, y); }
static inline tpu_hlo_value minv(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return bin_matched(c, TPU_HLO_MIN, x, y); }
static inline tpu_hlo_value real_of(tpu_lower_ctx *c, tpu_hlo_value x) {
  return tpu_dtype_is_complex(tpu_hlo_dtype(B, x)) ? un(c, TPU_HLO_REAL, x) : x;
}
static inline tpu_hlo_value imag_of(tpu_lower_ctx *c, tpu_hlo_value x) { return un(c, TPU_HLO_IMAG, x); }
static inline tpu_hlo_value complex_of(tpu_lower_ctx *c, tpu_hlo_value re, tpu_hlo_value im) {
  return tpu_hlo_binary(B, TPU_HLO_COMPLEX, re, im);
}
/* |re| + |im| (LAPACK's cabs1; |x| for real x). */
static inline tpu_hlo_value cabs1(tpu_lower_ctx *c, tpu_hlo_value x) {
  if (!tpu_dtype_is_complex(tpu_hlo_dtype(B, x))) return absv(c, x);
  return add(c, absv(c, un(c, TPU_HLO_REAL, x)), absv(c, un(c, TPU_HLO_IMAG, x)));
}

/* Element |idx| (per matrix, s64 [batch, 1, 1]) of the vectors |v| along
 * |dim| (the size-1 dim kept); zero where |idx| is out of range. */
static inline tpu_hlo_value at(tpu_lower_ctx *c, tpu_hlo_value v, tpu_hlo_value idx, int dim) {
  tpu_hlo_value hit = cmpb(c, TPU_HLO_EQ, index_along(c, v, dim), idx);
  return row_where(c, v, hit, dim);
}
/* Row vectors [batch, 1, n]. */
static inline tpu_hlo_value at_row(tpu_lower_ctx *c, tpu_hlo_value v, tpu_hlo_value idx) {
  return at(c, v, idx, tpu_hlo_rank(B, v) - 1);
}

/* u[j] = v[j - by] along the last dim, zero past the ends. */
static inline tpu_hlo_value shift(tpu_lower_ctx *c, tpu_hlo_value v, int64_t by) {
  int r = tpu_hlo_rank(B, v);
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0}, in[TPU_HLO_MAX_RANK] = {0};
  lo[r - 1] = by;
  hi[r - 1] = -by;
  return tpu_hlo_pad(B, v, tpu_hlo_scalar_f64(B, tpu_hlo_dtype(B, v), 0.0), lo, hi, in);
}

/* The elements h[j + d, j] as a row vector [batch, 1, n] (zero where j + d
 * is out of range): d 0 the diagonal, 1 the first subdiagonal (at its
 * column), -1 the first superdiagonal (at its column). */
static inline tpu_hlo_value band(tpu_lower_ctx *c, tpu_hlo_value h, int64_t d) {
  int r = tpu_hlo_rank(B, h);
  tpu_hlo_value diff = sub(c, index_along(c, h, r - 2), index_along(c, h, r - 1));
  return row_where(c, h, cmpb(c, TPU_HLO_EQ, diff, tpu_hlo_scalar_i64(B, TPU_S64, d)), r - 2);
}

/* 2^e for the integer-valued s64 |e| (within the type's normal range), as
 * |dtype|, exactly. */
static inline tpu_hlo_value pow2(tpu_lower_ctx *c, tpu_hlo_value e, tpu_dtype_t dtype) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, e);
  bool f64 = dtype == TPU_F64;
  tpu_hlo_value bits = add(c, e, tpu_hlo_const_i64(B, &t, f64 ? 1023 : 127));
  bits = tpu_hlo_binary(B, TPU_HLO_SHL, bits, tpu_hlo_const_i64(B, &t, f64 ? 52 : 23));
  if (!f64) bits = tpu_hlo_convert(B, bits, TPU_S32);
  tpu_hlo_type ft = with_dtype(&t, dtype);
  return tpu_hlo_bitcast(B, bits, &ft);
}

/* The complex type of real |t| (complex types are their own). */
static inline tpu_dtype_t complex_type(tpu_dtype_t t) {
  return t == TPU_F64 || t == TPU_C128 ? TPU_C128 : TPU_C64;
}

/* The constants of LAPACK's lamch for the real type |rt|. */
static inline double ulp_of(tpu_dtype_t rt) { return rt == TPU_F64 ? 0x1p-52 : 0x1p-23; }
static inline double safmin_of(tpu_dtype_t rt) { return rt == TPU_F64 ? 0x1p-1022 : 0x1p-126; }

/* Per-matrix integer registers: fields of one s64 [batch, 1, count]. */
static inline tpu_hlo_value field(tpu_lower_ctx *c, tpu_hlo_value regs, int f) {
  return tpu_hlo_slice_dim(B, regs, tpu_hlo_rank(B, regs) - 1, f, f + 1, 1);
}
static inline tpu_hlo_value pack(tpu_lower_ctx *c, const tpu_hlo_value *fields, int n) {
  return tpu_hlo_concatenate(B, fields, n, tpu_hlo_rank(B, fields[0]) - 1);
}
/* Whether any matrix's |flag| (i1 [batch, 1, 1]) holds, rank 0. */
static inline tpu_hlo_value any(tpu_lower_ctx *c, tpu_hlo_value flag) {
  int r = tpu_hlo_rank(B, flag);
  int64_t all[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) all[d] = d;
  return tpu_lower_reduce(B, flag, TPU_HLO_OR, all, r);
}

/* LAPACK's larfg of [alpha; x] with |x|^2 = |xnorm2| (real, per matrix):
 * beta (real), tau, and the factor taking x to v (v = [1; x * scale]); no
 * reflection (tau 0, beta alpha) where x is zero and alpha real. */
static inline void larfg(tpu_lower_ctx *c, tpu_hlo_value alpha, tpu_hlo_value xnorm2, tpu_hlo_value *out_beta,
                  tpu_hlo_value *out_tau, tpu_hlo_value *out_scale) {
  bool cplx = tpu_dtype_is_complex(tpu_hlo_dtype(B, alpha));
  tpu_hlo_value ar = real_of(c, alpha);
  tpu_hlo_value zero = const_like(c, ar, 0.0);
  tpu_hlo_value skip = cmp(c, TPU_HLO_EQ, xnorm2, zero);
  tpu_hlo_value amag2 = mul(c, ar, ar);
  if (cplx) {
    tpu_hlo_value ai = imag_of(c, alpha);
    skip = and_(c, skip, cmp(c, TPU_HLO_EQ, ai, zero));
    amag2 = add(c, amag2, mul(c, ai, ai));
  }
  tpu_hlo_value norm = un(c, TPU_HLO_SQRT, add(c, amag2, xnorm2));
  tpu_hlo_value beta = sel(c, cmp(c, TPU_HLO_GE, ar, zero), neg(c, norm), norm);
  tpu_hlo_value safe = sel(c, skip, const_like(c, beta, 1.0), beta);
  tpu_hlo_value bc = as_type_of(c, safe, alpha);
  *out_tau = sel(c, skip, const_like(c, alpha, 0.0), dvd(c, sub(c, bc, alpha), bc));
  tpu_hlo_value den = sel(c, skip, const_like(c, alpha, 1.0), sub(c, alpha, bc));
  *out_scale = sel(c, skip, const_like(c, alpha, 0.0), dvd(c, const_like(c, alpha, 1.0), den));
  *out_beta = sel(c, skip, ar, beta);
}

/* The QR iterations' registers per matrix (hqr.c). */
enum { R_I, R_L, R_K, R_ITS, R_KDEFL, R_INFO, R_ILO, R_IHI, R_COUNT };

/* The QR iterations (lahqr, hqr.c) as tpu_lower_loop_while's step and
 * condition, with Schur vectors accumulated (|vectors|) or not. State: H,
 * Z when |vectors|, then the registers. */
void tpu_lower_hqr_vectors(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s);
void tpu_lower_hqr_values(tpu_lower_ctx *c, tpu_hlo_value k, tpu_hlo_value *s);
tpu_hlo_value tpu_lower_hqr_more_vectors(tpu_lower_ctx *c, const tpu_hlo_value *s);
tpu_hlo_value tpu_lower_hqr_more_values(tpu_lower_ctx *c, const tpu_hlo_value *s);

#endif /* TPU_LOWER_EIG_H_ */
