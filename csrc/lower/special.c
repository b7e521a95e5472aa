/* Special-function rules: orthogonal polynomials, Bessel functions and the
 * other torch.special functions StableHLO has no op for.
 *
 * The formulas are PyTorch's CPU ones (ATen's Math.h, mostly from Cephes):
 * the same series, coefficients and branch points, so results round like
 * the CPU's. Everything is computed in the output's opmath type. */
#include <math.h>

#include "lower/rules.h"

static tpu_dtype_t out_math(tpu_lower_ctx *c) { return tpu_lower_opmath(c->out_types[0].dtype); }

static tpu_hlo_value in(tpu_lower_ctx *c, int i) { return tpu_lower_operand(c, i, out_math(c), OUT); }

/* A constant shaped like |like|. */
static tpu_hlo_value kl(tpu_lower_ctx *c, tpu_hlo_value like, double v) {
  return tpu_hlo_const_f64(B, tpu_hlo_type_of(B, like), v);
}

static tpu_hlo_value k(tpu_lower_ctx *c, double v) {
  tpu_hlo_type t = *OUT;
  t.dtype = out_math(c);
  return tpu_hlo_const_f64(B, &t, v);
}

static tpu_hlo_value eq(tpu_lower_ctx *c, tpu_hlo_value x, double v) { return cmp(c, TPU_HLO_EQ, x, kl(c, x, v)); }
static tpu_hlo_value lt(tpu_lower_ctx *c, tpu_hlo_value x, double v) { return cmp(c, TPU_HLO_LT, x, kl(c, x, v)); }
static tpu_hlo_value gt(tpu_lower_ctx *c, tpu_hlo_value x, double v) { return cmp(c, TPU_HLO_GT, x, kl(c, x, v)); }

/* --- orthogonal polynomials -------------------------------------------------------- */

/* Each family is P0 = 1, P1 = first(x), P(k+1) = step(k, P(k-1), P(k), x),
 * run elementwise for k = 1 .. n-1 in a while loop over the largest n, with
 * PyTorch's closed forms and end-point values selected afterwards. */
enum {
  CHEB_T, CHEB_U, CHEB_V, CHEB_W,
  SHIFTED_T, SHIFTED_U, SHIFTED_V, SHIFTED_W,
  HERMITE_H, HERMITE_HE, LAGUERRE, LEGENDRE,
};

static bool is_chebyshev(int kind) { return kind <= SHIFTED_W; }
static bool is_shifted(int kind) { return kind >= SHIFTED_T && kind <= SHIFTED_W; }

/* The Chebyshev argument: x, or 2x - 1 for the shifted ones. */
static tpu_hlo_value cheb_arg(tpu_lower_ctx *c, int kind, tpu_hlo_value x) {
  return is_shifted(kind) ? sub(c, add(c, x, x), kl(c, x, 1.0)) : x;
}

static tpu_hlo_value poly_first(tpu_lower_ctx *c, int kind, tpu_hlo_value x) {
  tpu_hlo_value y = cheb_arg(c, kind, x), one = kl(c, x, 1.0);
  switch (kind) {
    case CHEB_T: case SHIFTED_T: case HERMITE_HE: case LEGENDRE: return y;
    case CHEB_U: case SHIFTED_U: case HERMITE_H: return add(c, y, y);
    case CHEB_V: case SHIFTED_V: return sub(c, add(c, y, y), one);
    case CHEB_W: case SHIFTED_W: return add(c, add(c, y, y), one);
    default: return sub(c, one, x); /* LAGUERRE */
  }
}

/* P(k+1) from p = P(k-1), q = P(k); |kf| is k as a float. */
static tpu_hlo_value poly_step(tpu_lower_ctx *c, int kind, tpu_hlo_value kf, tpu_hlo_value p, tpu_hlo_value q,
                               tpu_hlo_value x) {
  tpu_hlo_value one = kl(c, x, 1.0);
  if (is_chebyshev(kind)) {
    tpu_hlo_value y = cheb_arg(c, kind, x);
    return sub(c, mul(c, add(c, y, y), q), p);
  }
  switch (kind) {
    case HERMITE_H: return sub(c, mul(c, add(c, x, x), q), mul(c, add(c, kf, kf), p));
    case HERMITE_HE: return sub(c, mul(c, x, q), mul(c, kf, p));
    case LAGUERRE:
      return dvd(c, sub(c, mul(c, add(c, add(c, kf, kf), sub(c, one, x)), q), mul(c, kf, p)), add(c, kf, one));
    default: /* LEGENDRE */
      return dvd(c, sub(c, mul(c, mul(c, add(c, add(c, kf, kf), one), x), q), mul(c, kf, p)), add(c, kf, one));
  }
}

/* P(n) by the recurrence where n >= 2 (elsewhere P1): a while loop whose
 * state is (k, P(k-1), P(k), x, n) and which runs while some element still
 * has k < n and a P(k) that is not NaN (PyTorch's loop stops at NaN). */
static tpu_hlo_value poly_loop(tpu_lower_ctx *c, int kind, tpu_hlo_value x, tpu_hlo_value n) {
  /* Copies: the builder's type table moves as it grows. */
  tpu_hlo_type xv = *tpu_hlo_type_of(B, x), nv = *tpu_hlo_type_of(B, n);
  const tpu_hlo_type *xt = &xv, *nt = &nv;
  tpu_hlo_type ts[5] = {tpu_hlo_make_type(TPU_S64, 0, NULL), xv, xv, xv, nv};
  int64_t dims[8];
  for (int i = 0; i < xt->rank; i++) dims[i] = i;
  tpu_hlo_value init[5] = {tpu_hlo_scalar_i64(B, TPU_S64, 1), kl(c, x, 1.0), poly_first(c, kind, x), x, n};

  tpu_hlo_value a[5];
  tpu_hlo_region regions[2];
  tpu_hlo_region_begin(B, 5, ts, a);
  tpu_hlo_value kb = tpu_hlo_broadcast_to(B, a[0], nt);
  tpu_hlo_value live = and_(c, cmp(c, TPU_HLO_LT, kb, a[4]), cmp(c, TPU_HLO_EQ, a[2], a[2]));
  tpu_hlo_value any = tpu_hlo_reduce_simple(B, live, tpu_hlo_scalar_i64(B, TPU_BOOL, 0), TPU_HLO_OR, dims, xt->rank);
  tpu_hlo_region_end(B, &any, 1, &regions[0]);

  tpu_hlo_region_begin(B, 5, ts, a);
  kb = tpu_hlo_broadcast_to(B, a[0], nt);
  tpu_hlo_value active = cmp(c, TPU_HLO_LT, kb, a[4]);
  tpu_hlo_value kf = tpu_hlo_convert(B, kb, xt->dtype);
  tpu_hlo_value r = poly_step(c, kind, kf, a[1], a[2], a[3]);
  tpu_hlo_value next[5] = {add(c, a[0], tpu_hlo_scalar_i64(B, TPU_S64, 1)), sel(c, active, a[2], a[1]),
                           sel(c, active, r, a[2]), a[3], a[4]};
  tpu_hlo_region_end(B, next, 5, &regions[1]);

  tpu_hlo_value out[5];
  tpu_hlo_op(B, "stablehlo.while", init, 5, regions, 2, NULL, ts, 5, out);
  return out[2];
}

/* (-1)^n * v for integral n held as a float. */
static tpu_hlo_value alternate(tpu_lower_ctx *c, tpu_hlo_value nf, tpu_hlo_value v) {
  tpu_hlo_value odd = cmp(c, TPU_HLO_NE, tpu_hlo_binary(B, TPU_HLO_REM, nf, kl(c, nf, 2.0)), kl(c, nf, 0.0));
  return sel(c, odd, neg(c, v), v);
}

/* The Chebyshev closed forms for |y| < 1 and large n, as PyTorch writes them. */
static tpu_hlo_value cheb_closed(tpu_lower_ctx *c, int kind, tpu_hlo_value y, tpu_hlo_value nf) {
  tpu_hlo_value th = un(c, TPU_HLO_ACOS, y), one = kl(c, y, 1.0);
  tpu_hlo_value n1 = add(c, nf, one), nh = add(c, nf, kl(c, y, 0.5)), half = dvd(c, th, kl(c, y, 2.0));
  tpu_hlo_value odd_n = add(c, add(c, nf, nf), one); /* 2n + 1 */
  switch (kind % 4) {
    case 0: return un(c, TPU_HLO_COS, mul(c, nf, th));
    case 1: {
      tpu_hlo_value s = un(c, TPU_HLO_SIN, th);
      tpu_hlo_value v = dvd(c, un(c, TPU_HLO_SIN, mul(c, n1, th)), s);
      return sel(c, eq(c, s, 0.0), dvd(c, mul(c, n1, un(c, TPU_HLO_COS, mul(c, n1, th))), y), v);
    }
    case 2: {
      tpu_hlo_value v = dvd(c, un(c, TPU_HLO_COS, mul(c, nh, th)), un(c, TPU_HLO_COS, half));
      return sel(c, eq(c, un(c, TPU_HLO_SIN, half), 1.0), alternate(c, nf, odd_n), v);
    }
    default: {
      tpu_hlo_value v = dvd(c, un(c, TPU_HLO_SIN, mul(c, nh, th)), un(c, TPU_HLO_SIN, half));
      tpu_hlo_value end = sel(c, gt(c, y, 0.0), odd_n, alternate(c, nf, one));
      return sel(c, eq(c, un(c, TPU_HLO_COS, half), 1.0), end, v);
    }
  }
}

/* The Chebyshev values at y = 1 and y = -1 (x = 1 and x = 0 when shifted). */
static tpu_hlo_value cheb_end(tpu_lower_ctx *c, int kind, tpu_hlo_value at_one, tpu_hlo_value nf) {
  tpu_hlo_value one = kl(c, nf, 1.0), n1 = add(c, nf, one), odd_n = add(c, add(c, nf, nf), one);
  switch (kind % 4) {
    case 0: return sel(c, at_one, one, alternate(c, nf, one));
    case 1: return sel(c, at_one, n1, alternate(c, nf, n1));
    case 2: return sel(c, at_one, one, alternate(c, nf, odd_n));
    default: return sel(c, at_one, odd_n, alternate(c, nf, one));
  }
}

/* special_*_polynomial_*(x, n); data: the family. n is truncated to an
 * integer as PyTorch's static_cast does (NaN and infinities count as
 * negative, so give 0). */
static tpu_status_t polynomial_rule(tpu_lower_ctx *c) {
  int kind = (int)c->data;
  tpu_hlo_value x = in(c, 0), n = in(c, 1);
  tpu_hlo_value finite = un(c, TPU_HLO_IS_FINITE, n);
  tpu_hlo_value nf = sel(c, finite, sub(c, n, tpu_hlo_binary(B, TPU_HLO_REM, n, k(c, 1.0))), k(c, -1.0));
  bool has_closed = true, has_end = true;
  tpu_hlo_value closed = 0, closed_val = 0, end = 0, end_val = 0;
  if (is_chebyshev(kind)) {
    static const double closed_from[8] = {6, 8, 8, 8, 6, 6, 6, 4};
    tpu_hlo_value y = cheb_arg(c, kind, x);
    closed = and_(c, gt(c, nf, closed_from[kind]), lt(c, un(c, TPU_HLO_ABS, y), 1.0));
    closed_val = cheb_closed(c, kind, y, nf);
    tpu_hlo_value at_one = eq(c, x, 1.0);
    end = or_(c, at_one, eq(c, x, is_shifted(kind) ? 0.0 : -1.0));
    end_val = cheb_end(c, kind, at_one, nf);
  } else if (kind == HERMITE_H || kind == HERMITE_HE) {
    /* PyTorch gives NaN past a precision-dependent degree. */
    closed = gt(c, nf, OUT->dtype == TPU_F64 ? 512.0 : 128.0);
    closed_val = k(c, NAN);
    has_end = false;
  } else if (kind == LAGUERRE) {
    end = eq(c, x, 0.0);
    end_val = k(c, 1.0);
    has_closed = false;
  } else {
    tpu_hlo_value at_one = eq(c, x, 1.0);
    end = or_(c, at_one, eq(c, x, -1.0));
    end_val = sel(c, at_one, k(c, 1.0), alternate(c, nf, k(c, 1.0)));
    has_closed = false;
  }
  /* Elements a closed form or an end point serves take no loop steps. */
  tpu_hlo_value loop_n = nf;
  if (has_closed) loop_n = sel(c, closed, k(c, 0.0), loop_n);
  if (has_end) loop_n = sel(c, end, k(c, 0.0), loop_n);
  tpu_hlo_value r = poly_loop(c, kind, x, tpu_hlo_convert(B, loop_n, TPU_S64));
  r = sel(c, eq(c, nf, 0.0), k(c, 1.0), r);
  if (has_closed) r = sel(c, closed, closed_val, r);
  if (has_end) r = sel(c, end, end_val, r);
  return done(c, sel(c, lt(c, nf, 0.0), k(c, 0.0), r));
}

#define POLY(n, kind)                                                                           \
  {{"special_" n, "special_" n ".out"}, polynomial_rule, 0, kind},                              \
  {{"special_" n ".x_scalar", "special_" n ".x_scalar_out"}, polynomial_rule, 0, kind},         \
  {{"special_" n ".n_scalar", "special_" n ".n_scalar_out"}, polynomial_rule, 0, kind}

const tpu_lower_rule tpu_rules_special[] = {
    POLY("chebyshev_polynomial_t", CHEB_T),
    POLY("chebyshev_polynomial_u", CHEB_U),
    POLY("chebyshev_polynomial_v", CHEB_V),
    POLY("chebyshev_polynomial_w", CHEB_W),
    POLY("shifted_chebyshev_polynomial_t", SHIFTED_T),
    POLY("shifted_chebyshev_polynomial_u", SHIFTED_U),
    POLY("shifted_chebyshev_polynomial_v", SHIFTED_V),
    POLY("shifted_chebyshev_polynomial_w", SHIFTED_W),
    POLY("hermite_polynomial_h", HERMITE_H),
    POLY("hermite_polynomial_he", HERMITE_HE),
    POLY("laguerre_polynomial_l", LAGUERRE),
    POLY("legendre_polynomial_p", LEGENDRE),
};
TPU_COUNT_RULES(special);
