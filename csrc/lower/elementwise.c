/* Elementwise rules: arithmetic, math, comparisons, logic, where/masked_fill,
 * clamp, fills, copies (activations and their backwards: activation.c).
 *
 * Every rule broadcasts its operands to the output shape PyTorch computed and
 * computes in the output's "opmath" type (float32 for half types, as
 * PyTorch's CPU and CUDA kernels do), so one rounding happens at the end.
 * Formulas follow PyTorch's CPU kernels where the order of operations changes
 * the rounding. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/rules.h"

/* --- unary math --------------------------------------------------------------- */

/* data: the tpu_hlo_unary_t. Computed in the output's opmath type. */
static tpu_status_t unary(tpu_lower_ctx *c) {
  return done(c, un(c, (tpu_hlo_unary_t)c->data, in(c, 0)));
}

static bool is_integral_out(tpu_lower_ctx *c) {
  tpu_dtype_t t = OUT->dtype;
  return tpu_dtype_is_int(t) || t == TPU_BOOL;
}

/* floor/ceil/round/trunc: identity on integers. */
static tpu_status_t rounding(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  if (is_integral_out(c)) return done(c, x);
  return done(c, un(c, (tpu_hlo_unary_t)c->data, x));
}


static tpu_status_t trunc_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  return done(c, is_integral_out(c) ? x : trunc_of(c, x));
}

static tpu_status_t frac_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  return done(c, sub(c, x, trunc_of(c, x)));
}

/* round(self, *, decimals): round-half-even of x * 10^d, scaled back. */
static tpu_status_t round_decimals(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  int64_t d = tpu_lower_int(c, 1, 0);
  if (is_integral_out(c)) return done(c, x);
  if (d == 0) return done(c, un(c, TPU_HLO_ROUND_EVEN, x));
  double ten = pow(10.0, (double)(d > 0 ? d : -d));
  if (d > 0) return done(c, dvd(c, un(c, TPU_HLO_ROUND_EVEN, mul(c, x, out_const(c, ten))), out_const(c, ten)));
  return done(c, mul(c, un(c, TPU_HLO_ROUND_EVEN, dvd(c, x, out_const(c, ten))), out_const(c, ten)));
}

/* abs computes in the input's type: abs of a complex is real, of an unsigned
 * integer the value itself (bool is refused, as by the CPU kernel). */
static tpu_status_t abs_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = c->args[0].dtype;
  if (tpu_dtype_is_unsigned_int(t)) return done(c, in(c, 0));
  tpu_hlo_type shape = *OUT;
  tpu_hlo_value x = tpu_lower_operand(c, 0, tpu_lower_opmath(t), &shape);
  return done(c, un(c, TPU_HLO_ABS, x));
}

static tpu_status_t neg_rule(tpu_lower_ctx *c) { return done(c, un(c, TPU_HLO_NEG, in(c, 0))); }

/* sign: (0 < x) - (x < 0), so NaN -> 0 as in PyTorch. */
static tpu_status_t sign_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  if (OUT->dtype == TPU_BOOL) return done(c, x);
  tpu_hlo_value zero = out_const(c, 0.0);
  tpu_hlo_value pos = tpu_hlo_convert(B, cmp(c, TPU_HLO_GT, x, zero), out_math(c));
  tpu_hlo_value neg = tpu_hlo_convert(B, cmp(c, TPU_HLO_LT, x, zero), out_math(c));
  return done(c, sub(c, pos, neg));
}

static tpu_status_t sgn_rule(tpu_lower_ctx *c) {
  if (!tpu_dtype_is_complex(OUT->dtype)) return sign_rule(c);
  tpu_hlo_value x = in(c, 0);
  tpu_hlo_value mag = tpu_hlo_convert(B, un(c, TPU_HLO_ABS, x), OUT->dtype);
  tpu_hlo_value zero = out_const(c, 0.0);
  return done(c, sel(c, cmp(c, TPU_HLO_EQ, mag, zero), zero, dvd(c, x, mag)));
}

static tpu_status_t signbit_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = c->args[0].dtype;
  tpu_hlo_type shape = *OUT;
  if (!tpu_dtype_is_float(t)) {
    tpu_hlo_value x = tpu_lower_operand(c, 0, t, &shape);
    if (tpu_dtype_is_unsigned_int(t) || t == TPU_BOOL) return done(c, tpu_hlo_const_i64(B, OUT, 0));
    shape.dtype = t;
    return done(c, cmp(c, TPU_HLO_LT, x, tpu_hlo_const_i64(B, &shape, 0)));
  }
  tpu_dtype_t f = tpu_lower_opmath(t); /* widening keeps the sign bit */
  shape.dtype = f;
  tpu_hlo_value x = tpu_lower_operand(c, 0, f, &shape);
  tpu_dtype_t u = tpu_dtype_same_width_uint(f);
  tpu_hlo_type ut = shape;
  ut.dtype = u;
  tpu_hlo_value bits = tpu_hlo_bitcast(B, x, &ut);
  tpu_hlo_value top = tpu_hlo_binary(B, TPU_HLO_SHR_LOGIC, bits,
                                     tpu_hlo_const_i64(B, &ut, 8 * (int64_t)tpu_dtype_size(u) - 1));
  return done(c, cmp(c, TPU_HLO_NE, top, tpu_hlo_const_i64(B, &ut, 0)));
}

static tpu_status_t reciprocal_rule(tpu_lower_ctx *c) { return done(c, dvd(c, out_const(c, 1.0), in(c, 0))); }

static tpu_status_t log_base(tpu_lower_ctx *c) {
  double base = c->data == 2 ? 2.0 : 10.0;
  return done(c, dvd(c, un(c, TPU_HLO_LOG, in(c, 0)), out_const(c, log(base))));
}

static tpu_status_t exp2_rule(tpu_lower_ctx *c) {
  return done(c, tpu_hlo_binary(B, TPU_HLO_POW, out_const(c, 2.0), in(c, 0)));
}

static tpu_status_t sigmoid_rule(tpu_lower_ctx *c) { return done(c, sigmoid_of(c, in(c, 0))); }

static tpu_status_t bitwise_not_rule(tpu_lower_ctx *c) {
  return done(c, un(c, TPU_HLO_NOT, tpu_lower_operand(c, 0, OUT->dtype, OUT)));
}

static tpu_status_t logical_not_rule(tpu_lower_ctx *c) {
  return done(c, un(c, TPU_HLO_NOT, tpu_lower_operand(c, 0, TPU_BOOL, OUT)));
}

/* isnan / isinf / isposinf / isneginf / isfinite; data selects. */
enum { IS_NAN, IS_INF, IS_POSINF, IS_NEGINF, IS_FINITE };
static tpu_status_t is_class(tpu_lower_ctx *c) {
  tpu_dtype_t t = c->args[0].dtype;
  if (!tpu_dtype_is_float(t) && !tpu_dtype_is_complex(t))
    return done(c, tpu_hlo_const_i64(B, OUT, c->data == IS_FINITE ? 1 : 0));
  tpu_hlo_type shape = *OUT;
  tpu_hlo_value x = tpu_lower_operand(c, 0, t, &shape);
  if (tpu_dtype_is_complex(t) && c->data != IS_FINITE && c->data != IS_NAN && c->data != IS_INF)
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "%s is not supported for complex inputs", c->op);
  switch (c->data) {
    case IS_NAN:
      return done(c, cmp(c, TPU_HLO_NE, x, x));
    case IS_FINITE: {
      if (tpu_dtype_is_complex(t)) {
        tpu_hlo_value r = un(c, TPU_HLO_IS_FINITE, un(c, TPU_HLO_REAL, x));
        tpu_hlo_value i = un(c, TPU_HLO_IS_FINITE, un(c, TPU_HLO_IMAG, x));
        return done(c, tpu_hlo_binary(B, TPU_HLO_AND, r, i));
      }
      return done(c, un(c, TPU_HLO_IS_FINITE, x));
    }
    case IS_INF: {
      tpu_hlo_value a = tpu_hlo_convert(B, un(c, TPU_HLO_ABS, x), tpu_dtype_real(t));
      tpu_hlo_type at = *tpu_hlo_type_of(B, a);
      return done(c, cmp(c, TPU_HLO_EQ, a, tpu_hlo_const_f64(B, &at, INFINITY)));
    }
    default: {
      tpu_hlo_type xt = *tpu_hlo_type_of(B, x);
      double inf = c->data == IS_POSINF ? INFINITY : -INFINITY;
      return done(c, cmp(c, TPU_HLO_EQ, x, tpu_hlo_const_f64(B, &xt, inf)));
    }
  }
}

/* nan_to_num(self, nan?, posinf?, neginf?) */
static tpu_status_t nan_to_num_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_operand(c, 0, OUT->dtype, OUT);
  if (!tpu_dtype_is_float(OUT->dtype)) return done(c, x);
  tpu_dtype_t t = OUT->dtype;
  /* PyTorch's defaults: the dtype's largest finite values. */
  double big = t == TPU_F16 ? 65504.0 : t == TPU_BF16 ? 3.3895313892515355e38
               : t == TPU_F32 ? 3.4028234663852886e38 : 1.7976931348623157e308;
  tpu_hlo_value nan = tpu_hlo_const_f64(B, OUT, tpu_lower_float(c, 1, 0.0));
  tpu_hlo_value pinf = tpu_hlo_const_f64(B, OUT, tpu_lower_float(c, 2, big));
  tpu_hlo_value ninf = tpu_hlo_const_f64(B, OUT, tpu_lower_float(c, 3, -big));
  x = sel(c, cmp(c, TPU_HLO_NE, x, x), nan, x);
  x = sel(c, cmp(c, TPU_HLO_EQ, x, tpu_hlo_const_f64(B, OUT, INFINITY)), pinf, x);
  return done(c, sel(c, cmp(c, TPU_HLO_EQ, x, tpu_hlo_const_f64(B, OUT, -INFINITY)), ninf, x));
}

/* frexp: x = mantissa * 2^exponent, |mantissa| in [0.5, 1); 0, infinities
 * and NaN give (x, 0) as std::frexp does. Integer work on the bits
 * throughout: XLA's CPU code may flush subnormal floats to zero. */
static tpu_status_t frexp_rule(tpu_lower_ctx *c) {
  tpu_dtype_t f = out_math(c), t = OUT->dtype;
  bool dbl = f == TPU_F64;
  int64_t width = dbl ? 64 : 32, mant = dbl ? 52 : 23, bias = dbl ? 1022 : 126, emask = dbl ? 0x7ff : 0xff;
  tpu_hlo_type ut = *OUT, it = *OUT, ft = *OUT;
  ut.dtype = tpu_dtype_same_width_uint(f);
  it.dtype = TPU_S32;
  ft.dtype = f;
  tpu_hlo_value x = tpu_lower_operand(c, 0, t, OUT), bits;
  if (t == TPU_BF16) { /* bfloat16 is the top half of a float32 */
    tpu_hlo_type ht = *OUT;
    ht.dtype = TPU_U16;
    bits = tpu_hlo_binary(B, TPU_HLO_SHL, tpu_hlo_convert(B, tpu_hlo_bitcast(B, x, &ht), ut.dtype),
                          tpu_hlo_const_i64(B, &ut, 16));
  } else {
    bits = tpu_hlo_bitcast(B, tpu_hlo_convert(B, x, f), &ut);
  }
  tpu_hlo_value xf = tpu_hlo_bitcast(B, bits, &ft);
  tpu_hlo_value u0 = tpu_hlo_const_i64(B, &ut, 0);
  tpu_hlo_value e = and_(c, tpu_hlo_binary(B, TPU_HLO_SHR_LOGIC, bits, tpu_hlo_const_i64(B, &ut, mant)),
                         tpu_hlo_const_i64(B, &ut, emask));
  tpu_hlo_value frac = and_(c, bits, tpu_hlo_const_i64(B, &ut, ((int64_t)1 << mant) - 1));
  tpu_hlo_value width_1 = tpu_hlo_const_i64(B, &ut, width - 1);
  tpu_hlo_value sign = tpu_hlo_binary(B, TPU_HLO_SHL, tpu_hlo_binary(B, TPU_HLO_SHR_LOGIC, bits, width_1), width_1);
  tpu_hlo_value half = or_(c, sign, tpu_hlo_const_i64(B, &ut, bias << mant)); /* ±0.5's bits */
  /* subnormal: the leading fraction bit p becomes the hidden bit */
  tpu_hlo_value p = sub(c, width_1, un(c, TPU_HLO_CLZ, frac));
  tpu_hlo_value shifted = tpu_hlo_binary(B, TPU_HLO_SHL, frac, sub(c, tpu_hlo_const_i64(B, &ut, mant), p));
  tpu_hlo_value sub_m = or_(c, and_(c, shifted, tpu_hlo_const_i64(B, &ut, ((int64_t)1 << mant) - 1)), half);
  tpu_hlo_value sub_e = sub(c, tpu_hlo_convert(B, p, TPU_S32), tpu_hlo_const_i64(B, &it, bias + mant - 1));
  tpu_hlo_value is_sub = cmp(c, TPU_HLO_EQ, e, u0);
  tpu_hlo_value m = sel(c, is_sub, sub_m, or_(c, frac, half));
  tpu_hlo_value exponent = sel(c, is_sub, sub_e, sub(c, tpu_hlo_convert(B, e, TPU_S32), tpu_hlo_const_i64(B, &it, bias)));
  tpu_hlo_value plain = or_(c, and_(c, is_sub, cmp(c, TPU_HLO_EQ, frac, u0)),
                            cmp(c, TPU_HLO_EQ, e, tpu_hlo_const_i64(B, &ut, emask)));
  tpu_lower_set_output(c, 0, sel(c, plain, xf, tpu_hlo_bitcast(B, m, &ft)));
  tpu_lower_set_output(c, 1, sel(c, plain, tpu_hlo_const_i64(B, &it, 0), exponent));
  return NULL;
}

/* --- binary arithmetic ---------------------------------------------------------- */

/* add/sub: self ± alpha * other; rsub: other - alpha * self. */
enum { ADD, SUB, RSUB };
static tpu_status_t add_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = in(c, 0), x = in(c, 1);
  if (c->data == RSUB) {
    tpu_hlo_value t = a;
    a = x;
    x = t;
  }
  if (!tpu_lower_is_none(c, 2)) {
    tpu_hlo_value alpha = tpu_lower_operand(c, 2, out_math(c), OUT);
    x = OUT->dtype == TPU_BOOL ? tpu_hlo_binary(B, TPU_HLO_AND, x, alpha) : mul(c, alpha, x);
  }
  if (OUT->dtype == TPU_BOOL) {
    if (c->data != ADD) return tpu_lower_error(c, TPU_ERR_RUNTIME, "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.");
    return done(c, tpu_hlo_binary(B, TPU_HLO_OR, a, x));
  }
  return done(c, c->data == ADD ? add(c, a, x) : sub(c, a, x));
}

static tpu_status_t mul_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = in(c, 0), x = in(c, 1);
  return done(c, OUT->dtype == TPU_BOOL ? tpu_hlo_binary(B, TPU_HLO_AND, a, x) : mul(c, a, x));
}

/* |x| (computed in float32) rounded to the output's half type, where
 * PyTorch's CPU kernels compute in the half type itself, rounding every step
 * (rounding-mode division); identity for other outputs. reduce_precision,
 * not a convert pair, which XLA drops as excess precision. */
static tpu_hlo_value half_step(tpu_lower_ctx *c, tpu_hlo_value x) {
  int exponent = OUT->dtype == TPU_BF16 ? 8 : 5, mantissa = OUT->dtype == TPU_BF16 ? 7 : 10;
  if (OUT->dtype != TPU_BF16 && OUT->dtype != TPU_F16) return x;
  char attrs[80];
  snprintf(attrs, sizeof attrs, "exponent_bits = %d : i32, mantissa_bits = %d : i32", exponent, mantissa);
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  tpu_hlo_value out;
  tpu_hlo_op(B, "stablehlo.reduce_precision", &x, 1, NULL, 0, attrs, &t, 1, &out);
  return out;
}

/* Python floor division of floats, as PyTorch's div_floor_floating (in the
 * half type's steps for half outputs, as its CPU kernel). */
static tpu_hlo_value div_floor_float(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value b) {
  tpu_hlo_value zero = out_const(c, 0.0), one = out_const(c, 1.0), half = out_const(c, 0.5);
  tpu_hlo_value mod = tpu_hlo_binary(B, TPU_HLO_REM, a, b); /* exact */
  tpu_hlo_value div = half_step(c, dvd(c, half_step(c, sub(c, a, mod)), b));
  tpu_hlo_value fix = tpu_hlo_binary(B, TPU_HLO_AND, cmp(c, TPU_HLO_NE, mod, zero),
                                     cmp(c, TPU_HLO_NE, cmp(c, TPU_HLO_LT, b, zero), cmp(c, TPU_HLO_LT, mod, zero)));
  div = sel(c, fix, half_step(c, sub(c, div, one)), div);
  tpu_hlo_value fl = un(c, TPU_HLO_FLOOR, div);
  fl = sel(c, cmp(c, TPU_HLO_GT, half_step(c, sub(c, div, fl)), half), half_step(c, add(c, fl, one)), fl);
  /* div == 0: copysign(0, a / b) */
  tpu_hlo_value q = half_step(c, dvd(c, a, b));
  tpu_hlo_value negative = or_(c, cmp(c, TPU_HLO_LT, q, zero), cmp(c, TPU_HLO_LT, dvd(c, one, q), zero)); /* -0 too */
  tpu_hlo_value signed_zero = sel(c, negative, out_const(c, -0.0), zero);
  fl = sel(c, cmp(c, TPU_HLO_EQ, div, zero), signed_zero, fl);
  /* b == 0: plain a / b (inf or nan), as PyTorch */
  return sel(c, cmp(c, TPU_HLO_EQ, b, zero), q, fl);
}

static tpu_hlo_value div_floor_int(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value b) {
  tpu_hlo_value zero = out_const(c, 0.0);
  tpu_hlo_value q = dvd(c, a, b), r = tpu_hlo_binary(B, TPU_HLO_REM, a, b);
  tpu_hlo_value fix = tpu_hlo_binary(B, TPU_HLO_AND, cmp(c, TPU_HLO_NE, r, zero),
                                     cmp(c, TPU_HLO_NE, cmp(c, TPU_HLO_LT, a, zero), cmp(c, TPU_HLO_LT, b, zero)));
  return sel(c, fix, sub(c, q, out_const(c, 1.0)), q);
}

/* |x|, a divisor, checked not to be zero anywhere when the division is an
 * integer one: PyTorch's CPU kernels raise RuntimeError "ZeroDivisionError"
 * there (CUDA's give whatever the hardware does; XLA's integer division by
 * zero gives -1). A data check: the op raises when its flag comes back.
 * Floats divide to inf or NaN. */
static tpu_hlo_value checked_divisor(tpu_lower_ctx *c, tpu_hlo_value x) {
  if (!is_integral_out(c)) return x;
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int i = 0; i < OUT->rank; i++) dims[i] = i;
  tpu_hlo_value nonzero = cmp(c, TPU_HLO_NE, x, out_const(c, 0.0));
  tpu_lower_require(c, tpu_lower_reduce(B, nonzero, TPU_HLO_AND, dims, OUT->rank), TPU_ERR_RUNTIME,
                    "ZeroDivisionError");
  return x;
}

/* div(self, other, *, rounding_mode=None|"trunc"|"floor"); floor_divide
 * always floors. */
enum { DIV, FLOOR_DIVIDE };
static tpu_status_t div_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = in(c, 0), x = in(c, 1);
  const char *mode = c->data == FLOOR_DIVIDE ? "floor"
                     : (!tpu_lower_is_none(c, 2) && c->args[2].kind == TPU_ARG_STRING) ? c->args[2].s : NULL;
  bool integral = is_integral_out(c);
  if (mode == NULL) return done(c, dvd(c, a, x));
  x = checked_divisor(c, x);
  if (strcmp(mode, "trunc") == 0) return done(c, integral ? dvd(c, a, x) : trunc_of(c, half_step(c, dvd(c, a, x))));
  if (strcmp(mode, "floor") == 0) return done(c, integral ? div_floor_int(c, a, x) : div_floor_float(c, a, x));
  return tpu_lower_error(c, TPU_ERR_RUNTIME,
                         "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'", mode);
}

/* remainder: Python modulo (the result takes the divisor's sign). */
static tpu_status_t remainder_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = in(c, 0), x = checked_divisor(c, in(c, 1));
  tpu_hlo_value r = tpu_hlo_binary(B, TPU_HLO_REM, a, x), zero = out_const(c, 0.0);
  tpu_hlo_value fix = tpu_hlo_binary(B, TPU_HLO_AND, cmp(c, TPU_HLO_NE, r, zero),
                                     cmp(c, TPU_HLO_NE, cmp(c, TPU_HLO_LT, x, zero), cmp(c, TPU_HLO_LT, r, zero)));
  return done(c, sel(c, fix, add(c, r, x), r));
}

/* data: a tpu_hlo_binary_t applied as is (fmod, atan2, bitwise ops …). */
static tpu_status_t binary(tpu_lower_ctx *c) {
  tpu_hlo_binary_t op = (tpu_hlo_binary_t)c->data;
  bool bitwise = op == TPU_HLO_AND || op == TPU_HLO_OR || op == TPU_HLO_XOR || op == TPU_HLO_SHL ||
                 op == TPU_HLO_SHR_ARITH;
  /* Bitwise ops and nextafter work on the output type's bits (the next half
   * after x is not the next float32 after it). */
  bool own_type = bitwise || op == TPU_HLO_NEXTAFTER;
  tpu_hlo_value a = own_type ? tpu_lower_operand(c, 0, OUT->dtype, OUT) : in(c, 0);
  tpu_hlo_value x = own_type ? tpu_lower_operand(c, 1, OUT->dtype, OUT) : in(c, 1);
  if (op == TPU_HLO_SHR_ARITH && tpu_dtype_is_unsigned_int(OUT->dtype)) op = TPU_HLO_SHR_LOGIC;
  if (op == TPU_HLO_REM) x = checked_divisor(c, x); /* fmod */
  return done(c, tpu_hlo_binary(B, op, a, x));
}

/* maximum/minimum propagate NaN; on bool they are or/and. data: MAX or MIN. */
static tpu_status_t minmax_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = in(c, 0), x = in(c, 1);
  bool is_max = c->data == TPU_HLO_MAX;
  if (OUT->dtype == TPU_BOOL) return done(c, tpu_hlo_binary(B, is_max ? TPU_HLO_OR : TPU_HLO_AND, a, x));
  return done(c, extreme_of(c, is_max ? TPU_HLO_MAX : TPU_HLO_MIN, a, x));
}

/* fmax/fmin: NaN only when both are NaN. */
static tpu_status_t fminmax_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = in(c, 0), x = in(c, 1);
  bool is_max = c->data == TPU_HLO_MAX;
  tpu_hlo_value r = tpu_hlo_binary(B, is_max ? TPU_HLO_MAX : TPU_HLO_MIN, a, x);
  if (tpu_dtype_is_float(out_math(c))) {
    r = sel(c, cmp(c, TPU_HLO_NE, a, a), x, r);
    r = sel(c, cmp(c, TPU_HLO_NE, x, x), a, r);
  }
  return done(c, r);
}

/* pow; with a constant exponent, PyTorch's CPU special cases keep exact
 * results (x*x for 2, sqrt for 0.5 …). */
static tpu_status_t pow_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0);
  const tpu_lower_arg *e = &c->args[1];
  if (e->kind == TPU_ARG_SCALAR && e->is_const && !tpu_dtype_is_complex(out_math(c))) {
    double p = tpu_dtype_is_float(e->dtype) ? e->f : (double)e->i;
    bool fl = tpu_dtype_is_float(out_math(c));
    if (p == 1.0) return done(c, x);
    if (p == 2.0) return done(c, mul(c, x, x));
    if (p == 3.0) return done(c, mul(c, mul(c, x, x), x));
    if (p == 0.0) return done(c, out_const(c, 1.0));
    if (fl && p == 0.5) return done(c, un(c, TPU_HLO_SQRT, x));
    if (fl && p == -0.5) return done(c, un(c, TPU_HLO_RSQRT, x));
    if (fl && p == -1.0) return done(c, dvd(c, out_const(c, 1.0), x));
    if (fl && p == -2.0) return done(c, dvd(c, out_const(c, 1.0), mul(c, x, x)));
    if (!fl && p < 0)
      return tpu_lower_error(c, TPU_ERR_RUNTIME, "Integers to negative integer powers are not allowed.");
  }
  tpu_hlo_value y = in(c, 1), r = tpu_hlo_binary(B, TPU_HLO_POW, x, y);
  if (tpu_dtype_is_complex(out_math(c))) {
    /* The CPU's std::pow is C's cpow, exp(y log x), with C's infinities:
     * 0 ** y is 0 where y's real part is positive (exp of -inf - inf i is
     * 0; XLA's exp gave NaN). */
    tpu_hlo_value re = un(c, TPU_HLO_REAL, y);
    tpu_hlo_value zero = and_(c, cmp(c, TPU_HLO_EQ, x, const_like(c, x, 0.0)), cmp(c, TPU_HLO_GT, re, const_like(c, re, 0.0)));
    r = sel(c, zero, const_like(c, r, 0.0), r);
  }
  return done(c, r);
}

/* complex(real, imag) and polar(abs, angle): a complex number from two real
 * tensors of one dtype (the meta function refuses others), broadcast; polar
 * is abs * cos(angle) + i abs * sin(angle), as the CPU's kernel computes it.
 * data: COMPLEX or POLAR. */
enum { COMPLEX, POLAR };
static tpu_status_t complex_rule(tpu_lower_ctx *c) {
  tpu_hlo_type part = *OUT;
  part.dtype = tpu_dtype_real(OUT->dtype);
  tpu_hlo_value a = tpu_lower_operand(c, 0, part.dtype, &part), x = tpu_lower_operand(c, 1, part.dtype, &part);
  if (c->data == POLAR) {
    tpu_hlo_value re = mul(c, a, un(c, TPU_HLO_COS, x));
    x = mul(c, a, un(c, TPU_HLO_SIN, x));
    a = re;
  }
  return done(c, tpu_hlo_binary(B, TPU_HLO_COMPLEX, a, x));
}

/* hypot(a, x) as the CPU's kernel (std::hypot, Sleef's hypot): no overflow
 * or underflow in the squares (hypot(2e19, 2e19) is 2.8e19, not inf), and
 * inf where either is infinite, a NaN other included. float32 and the half
 * types square in float64, where their squares fit, and round the root once;
 * float64 scales by the larger. */
static tpu_status_t hypot_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = un(c, TPU_HLO_ABS, in(c, 0)), x = un(c, TPU_HLO_ABS, in(c, 1));
  const tpu_dtype_t t = out_math(c);
  tpu_hlo_value r;
  if (t != TPU_F64) {
    tpu_hlo_value a2 = tpu_hlo_convert(B, a, TPU_F64), x2 = tpu_hlo_convert(B, x, TPU_F64);
    r = tpu_hlo_convert(B, un(c, TPU_HLO_SQRT, add(c, mul(c, a2, a2), mul(c, x2, x2))), t);
  } else {
    tpu_hlo_value big = tpu_hlo_binary(B, TPU_HLO_MAX, a, x), small = tpu_hlo_binary(B, TPU_HLO_MIN, a, x);
    tpu_hlo_value zero = const_like(c, a, 0.0), q = dvd(c, small, big);
    r = mul(c, big, un(c, TPU_HLO_SQRT, add(c, const_like(c, a, 1.0), mul(c, q, q))));
    r = sel(c, or_(c, is_nan(c, a), is_nan(c, x)), add(c, a, x), sel(c, cmp(c, TPU_HLO_EQ, big, zero), zero, r));
  }
  tpu_hlo_value inf = const_like(c, a, INFINITY);
  return done(c, sel(c, or_(c, cmp(c, TPU_HLO_EQ, a, inf), cmp(c, TPU_HLO_EQ, x, inf)), inf, r));
}

static tpu_status_t copysign_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = un(c, TPU_HLO_ABS, in(c, 0)), x = in(c, 1);
  tpu_hlo_type t = *OUT;
  t.dtype = out_math(c);
  tpu_hlo_type ut = t;
  ut.dtype = tpu_dtype_same_width_uint(t.dtype);
  tpu_hlo_value sx = tpu_hlo_binary(B, TPU_HLO_SHR_LOGIC, tpu_hlo_bitcast(B, x, &ut),
                                    tpu_hlo_const_i64(B, &ut, 8 * (int64_t)tpu_dtype_size(ut.dtype) - 1));
  return done(c, sel(c, cmp(c, TPU_HLO_NE, sx, tpu_hlo_const_i64(B, &ut, 0)), un(c, TPU_HLO_NEG, a), a));
}

/* xlogy(x, y) = 0 where x == 0 (unless y is NaN), else x * log(y). */
static tpu_status_t xlogy_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = in(c, 0), y = in(c, 1), zero = out_const(c, 0.0);
  tpu_hlo_value r = mul(c, x, un(c, TPU_HLO_LOG, y));
  r = sel(c, cmp(c, TPU_HLO_EQ, x, zero), zero, r);
  return done(c, sel(c, cmp(c, TPU_HLO_NE, y, y), y, r));
}

/* logaddexp(a, b) = max + log1p(exp(-|a - b|)), and logaddexp2 in base 2. */
enum { LOGADDEXP, LOGADDEXP2 };
static tpu_status_t logaddexp_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = in(c, 0), x = in(c, 1);
  if (tpu_dtype_is_complex(out_math(c))) return done(c, complex_logaddexp_of(c, a, x));
  tpu_hlo_value m = tpu_hlo_binary(B, TPU_HLO_MAX, a, x);
  tpu_hlo_value d = un(c, TPU_HLO_NEG, un(c, TPU_HLO_ABS, sub(c, a, x)));
  tpu_hlo_value r;
  if (c->data == LOGADDEXP2) {
    tpu_hlo_value ln2 = out_const(c, M_LN2);
    r = add(c, m, dvd(c, un(c, TPU_HLO_LOG1P, tpu_hlo_binary(B, TPU_HLO_POW, out_const(c, 2.0), d)), ln2));
  } else {
    r = add(c, m, un(c, TPU_HLO_LOG1P, un(c, TPU_HLO_EXP, d)));
  }
  /* equal infinities: the value itself (avoids inf - inf = nan) */
  tpu_hlo_value same_inf = tpu_hlo_binary(B, TPU_HLO_AND, cmp(c, TPU_HLO_EQ, a, x),
                                          cmp(c, TPU_HLO_EQ, un(c, TPU_HLO_ABS, a), out_const(c, INFINITY)));
  return done(c, sel(c, same_inf, a, r));
}

/* --- comparisons and logic --------------------------------------------------- */

/* data: tpu_hlo_cmp_t; compared in PyTorch's promoted type. */
static tpu_status_t compare_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = c->common_dtype;
  return done(c, cmp(c, (tpu_hlo_cmp_t)c->data, tpu_lower_operand(c, 0, t, OUT), tpu_lower_operand(c, 1, t, OUT)));
}

/* data: AND, OR, XOR on truth values. */
static tpu_status_t logical_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = tpu_lower_operand(c, 0, TPU_BOOL, OUT), x = tpu_lower_operand(c, 1, TPU_BOOL, OUT);
  return done(c, tpu_hlo_binary(B, (tpu_hlo_binary_t)c->data, a, x));
}

/* where(condition, self, other) */
static tpu_status_t where_rule(tpu_lower_ctx *c) {
  tpu_hlo_value p = tpu_lower_operand(c, 0, TPU_BOOL, OUT);
  return done(c, sel(c, p, tpu_lower_operand(c, 1, OUT->dtype, OUT), tpu_lower_operand(c, 2, OUT->dtype, OUT)));
}

/* masked_fill(self, mask, value) */
static tpu_status_t masked_fill_rule(tpu_lower_ctx *c) {
  tpu_hlo_value x = tpu_lower_operand(c, 0, OUT->dtype, OUT);
  tpu_hlo_value m = tpu_lower_operand(c, 1, TPU_BOOL, OUT);
  return done(c, sel(c, m, tpu_lower_operand(c, 2, OUT->dtype, OUT), x));
}

/* clamp(self, min?, max?), clamp_min(self, min), clamp_max(self, max). NaN in any
 * operand propagates, as in PyTorch. Computed in the promoted type of all
 * three: an uint8 clamp_ with an int32 bound of -7 compares in int32. */
enum { CLAMP, CLAMP_MIN, CLAMP_MAX };
static tpu_status_t clamp_rule(tpu_lower_ctx *c) {
  tpu_dtype_t t = tpu_lower_opmath(c->common_dtype != TPU_INVALID ? c->common_dtype : OUT->dtype);
  tpu_hlo_value x = tpu_lower_operand(c, 0, t, OUT);
  int lo_arg = c->data == CLAMP_MAX ? -1 : 1, hi_arg = c->data == CLAMP ? 2 : c->data == CLAMP_MAX ? 1 : -1;
  if (lo_arg >= 0 && !tpu_lower_is_none(c, lo_arg))
    x = extreme_of(c, TPU_HLO_MAX, x, tpu_lower_operand(c, lo_arg, t, OUT));
  if (hi_arg >= 0 && !tpu_lower_is_none(c, hi_arg))
    x = extreme_of(c, TPU_HLO_MIN, x, tpu_lower_operand(c, hi_arg, t, OUT));
  if (c->data == CLAMP && tpu_lower_is_none(c, 1) && tpu_lower_is_none(c, 2))
    return tpu_lower_error(c, TPU_ERR_RUNTIME, "torch.clamp: At least one of 'min' or 'max' must not be None");
  return done(c, x);
}

/* lerp(self, end, weight) */
static tpu_status_t lerp_rule(tpu_lower_ctx *c) { return done(c, lerp_of(c, in(c, 0), in(c, 1), in(c, 2))); }

/* addcmul/addcdiv(self, tensor1, tensor2, *, value); data: MUL or DIV. */
static tpu_status_t addc_rule(tpu_lower_ctx *c) {
  tpu_hlo_value a = in(c, 0), t1 = in(c, 1), t2 = in(c, 2);
  tpu_hlo_value v = tpu_lower_is_none(c, 3) ? out_const(c, 1.0) : tpu_lower_operand(c, 3, out_math(c), OUT);
  tpu_hlo_value prod = tpu_hlo_binary(B, (tpu_hlo_binary_t)c->data, t1, t2);
  return done(c, add(c, a, mul(c, v, prod)));
}

/* --- fills and copies ----------------------------------------------------- */

static tpu_status_t fill_rule(tpu_lower_ctx *c) {
  return done(c, tpu_lower_operand(c, 1, OUT->dtype, OUT));
}

static tpu_status_t zero_rule(tpu_lower_ctx *c) { return done(c, tpu_hlo_const_f64(B, OUT, 0.0)); }

/* copy(self=src, dst): the source converted and broadcast to the target's
 * type. Run by the torch layer's copy kernel; arg 0 is the source. */
static tpu_status_t copy_rule(tpu_lower_ctx *c) {
  return done(c, tpu_lower_operand(c, 0, OUT->dtype, OUT));
}

/* --- the table ------------------------------------------------------------- */

#define UNARY(n, op) {{n, n "_", n ".out"}, unary, 0, op}
#define CMP(n, op) \
  {{n ".Tensor", n "_.Tensor", n ".Tensor_out"}, compare_rule, 0, op}, \
  {{n ".Scalar", n "_.Scalar", n ".Scalar_out"}, compare_rule, 0, op}

/* Bitwise ops take integers and bools only, with the CPU kernel's error
 * (PyTorch's meta functions let a float through). */
#define BITWISE(kernel) {TPU_DTS_INT | TPU_DT(TPU_BOOL), TPU_ADMIT_OUTPUT, kernel}

const tpu_lower_rule tpu_rules_elementwise[] = {
    UNARY("exp", TPU_HLO_EXP),
    UNARY("expm1", TPU_HLO_EXPM1),
    UNARY("log", TPU_HLO_LOG),
    UNARY("log1p", TPU_HLO_LOG1P),
    UNARY("sqrt", TPU_HLO_SQRT),
    UNARY("rsqrt", TPU_HLO_RSQRT),
    UNARY("sin", TPU_HLO_SIN),
    UNARY("cos", TPU_HLO_COS),
    UNARY("tan", TPU_HLO_TAN),
    UNARY("tanh", TPU_HLO_TANH),
    UNARY("asin", TPU_HLO_ASIN),
    UNARY("acos", TPU_HLO_ACOS),
    UNARY("atan", TPU_HLO_ATAN),
    UNARY("sinh", TPU_HLO_SINH),
    UNARY("cosh", TPU_HLO_COSH),
    UNARY("asinh", TPU_HLO_ASINH),
    UNARY("acosh", TPU_HLO_ACOSH),
    UNARY("atanh", TPU_HLO_ATANH),
    UNARY("erfc", TPU_HLO_ERFC),
    UNARY("erfinv", TPU_HLO_ERF_INV),
    UNARY("lgamma", TPU_HLO_LGAMMA),
    {{"log2", "log2_", "log2.out"}, log_base, 0, 2},
    {{"log10", "log10_", "log10.out"}, log_base, 0, 10},
    {{"exp2", "exp2_", "exp2.out"}, exp2_rule, 0, 0},
    {{"reciprocal", "reciprocal_", "reciprocal.out"}, reciprocal_rule, 0, 0},
    {{"sigmoid", "sigmoid_", "sigmoid.out"}, sigmoid_rule, 0, 0},
    {{"floor", "floor_", "floor.out"}, rounding, 0, TPU_HLO_FLOOR},
    {{"ceil", "ceil_", "ceil.out"}, rounding, 0, TPU_HLO_CEIL},
    {{"round", "round_", "round.out"}, rounding, 0, TPU_HLO_ROUND_EVEN},
    {{"round.decimals", "round_.decimals", "round.decimals_out"}, round_decimals, 0, 0},
    {{"trunc", "trunc_", "trunc.out"}, trunc_rule, 0, 0},
    {{"frac", "frac_", "frac.out"}, frac_rule, 0, 0},
    {{"abs", "abs_", "abs.out"}, abs_rule, 0, 0, {~TPU_DT(TPU_BOOL), 0, "abs_cpu"}},
    {{"neg", "neg_", "neg.out"}, neg_rule, 0, 0},
    {{"sign", "sign_", "sign.out"}, sign_rule, 0, 0},
    {{"sgn", "sgn_", "sgn.out"}, sgn_rule, 0, 0},
    {{"signbit", "signbit.out"}, signbit_rule, 0, 0},
    {{"bitwise_not", "bitwise_not_", "bitwise_not.out"}, bitwise_not_rule, 0, 0, BITWISE("bitwise_not_cpu")},
    {{"logical_not", "logical_not_", "logical_not.out"}, logical_not_rule, 0, 0},
    {{"isnan"}, is_class, 0, IS_NAN},
    {{"isinf"}, is_class, 0, IS_INF},
    {{"isposinf", "isposinf.out"}, is_class, 0, IS_POSINF},
    {{"isneginf", "isneginf.out"}, is_class, 0, IS_NEGINF},
    {{"isfinite"}, is_class, 0, IS_FINITE},
    {{"nan_to_num", "nan_to_num_", "nan_to_num.out"}, nan_to_num_rule, 0, 0},
    {{"frexp.Tensor", "frexp.Tensor_out"}, frexp_rule, 0, 0},

    {{"add.Tensor", "add_.Tensor", "add.out"}, add_rule, 0, ADD},
    {{"add.Scalar", "add_.Scalar", "add.Scalar_out"}, add_rule, 0, ADD},
    {{"sub.Tensor", "sub_.Tensor", "sub.out"}, add_rule, 0, SUB},
    {{"sub.Scalar", "sub_.Scalar", "sub.Scalar_out"}, add_rule, 0, SUB},
    {{"rsub.Tensor", "rsub.Tensor_out"}, add_rule, 0, RSUB},
    {{"rsub.Scalar", "rsub.Scalar_out"}, add_rule, 0, RSUB},
    {{"mul.Tensor", "mul_.Tensor", "mul.out"}, mul_rule, 0, 0},
    {{"mul.Scalar", "mul_.Scalar", "mul.Scalar_out"}, mul_rule, 0, 0},
    {{"div.Tensor", "div_.Tensor", "div.out"}, div_rule, 0, DIV},
    {{"div.Scalar", "div_.Scalar", "div.Scalar_out"}, div_rule, 0, DIV},
    {{"div.Tensor_mode", "div_.Tensor_mode", "div.out_mode"}, div_rule, 0, DIV},
    {{"div.Scalar_mode", "div_.Scalar_mode", "div.Scalar_mode_out"}, div_rule, 0, DIV},
    {{"floor_divide", "floor_divide_.Tensor", "floor_divide.out"}, div_rule, 0, FLOOR_DIVIDE},
    {{"floor_divide.Scalar", "floor_divide_.Scalar", "floor_divide.Scalar_out"}, div_rule, 0, FLOOR_DIVIDE},
    {{"remainder.Tensor", "remainder_.Tensor", "remainder.Tensor_out"}, remainder_rule, 0, 0},
    {{"remainder.Scalar", "remainder_.Scalar", "remainder.Scalar_out"}, remainder_rule, 0, 0},
    {{"remainder.Scalar_Tensor", "remainder.Scalar_Tensor_out"}, remainder_rule, 0, 0},
    {{"fmod.Tensor", "fmod_.Tensor", "fmod.Tensor_out"}, binary, 0, TPU_HLO_REM},
    {{"fmod.Scalar", "fmod_.Scalar", "fmod.Scalar_out"}, binary, 0, TPU_HLO_REM},
    {{"pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out"}, pow_rule, 0, 0},
    {{"pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out"}, pow_rule, TPU_RULE_CONST_SCALARS, 0},
    {{"pow.Scalar", "pow.Scalar_out"}, pow_rule, 0, 0},
    {{"atan2", "atan2_", "atan2.out"}, binary, 0, TPU_HLO_ATAN2},
    {{"maximum", "maximum.out"}, minmax_rule, 0, TPU_HLO_MAX},
    {{"minimum", "minimum.out"}, minmax_rule, 0, TPU_HLO_MIN},
    {{"fmax", "fmax.out"}, fminmax_rule, 0, TPU_HLO_MAX},
    {{"fmin", "fmin.out"}, fminmax_rule, 0, TPU_HLO_MIN},
    {{"hypot", "hypot_", "hypot.out"}, hypot_rule, 0, 0},
    {{"complex", "complex.out"}, complex_rule, 0, COMPLEX, {TPU_DTS_F32_F64, 0, "complex_cpu"}},
    {{"polar", "polar.out"}, complex_rule, 0, POLAR, {TPU_DTS_F32_F64, 0, "polar_cpu"}},
    {{"copysign.Tensor", "copysign_.Tensor", "copysign.out"}, copysign_rule, 0, 0},
    {{"copysign.Scalar", "copysign_.Scalar", "copysign.Scalar_out"}, copysign_rule, 0, 0},
    {{"nextafter", "nextafter_", "nextafter.out"}, binary, 0, TPU_HLO_NEXTAFTER},
    {{"xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor"}, xlogy_rule, 0, 0},
    {{"xlogy.Scalar_Other", "xlogy_.Scalar_Other", "xlogy.OutScalar_Other"}, xlogy_rule, 0, 0},
    {{"xlogy.Scalar_Self", "xlogy.OutScalar_Self"}, xlogy_rule, 0, 0},
    {{"logaddexp", "logaddexp.out"}, logaddexp_rule, 0, LOGADDEXP},
    {{"logaddexp2", "logaddexp2.out"}, logaddexp_rule, 0, LOGADDEXP2},
    {{"bitwise_and.Tensor", "bitwise_and_.Tensor", "bitwise_and.Tensor_out"}, binary, 0, TPU_HLO_AND, BITWISE("bitwise_and_cpu")},
    {{"bitwise_and.Scalar", "bitwise_and_.Scalar", "bitwise_and.Scalar_out"}, binary, 0, TPU_HLO_AND, BITWISE("bitwise_and_cpu")},
    {{"bitwise_or.Tensor", "bitwise_or_.Tensor", "bitwise_or.Tensor_out"}, binary, 0, TPU_HLO_OR, BITWISE("bitwise_or_cpu")},
    {{"bitwise_or.Scalar", "bitwise_or_.Scalar", "bitwise_or.Scalar_out"}, binary, 0, TPU_HLO_OR, BITWISE("bitwise_or_cpu")},
    {{"bitwise_xor.Tensor", "bitwise_xor_.Tensor", "bitwise_xor.Tensor_out"}, binary, 0, TPU_HLO_XOR, BITWISE("bitwise_xor_cpu")},
    {{"bitwise_xor.Scalar", "bitwise_xor_.Scalar", "bitwise_xor.Scalar_out"}, binary, 0, TPU_HLO_XOR, BITWISE("bitwise_xor_cpu")},
    {{"bitwise_left_shift.Tensor", "bitwise_left_shift_.Tensor", "bitwise_left_shift.Tensor_out"}, binary, 0, TPU_HLO_SHL, BITWISE("lshift_cpu")},
    {{"bitwise_right_shift.Tensor", "bitwise_right_shift_.Tensor", "bitwise_right_shift.Tensor_out"}, binary, 0, TPU_HLO_SHR_ARITH, BITWISE("rshift_cpu")},
    {{"__lshift__.Tensor", "__ilshift__.Tensor"}, binary, 0, TPU_HLO_SHL},
    {{"__lshift__.Scalar", "__ilshift__.Scalar"}, binary, 0, TPU_HLO_SHL},
    {{"__rshift__.Tensor", "__irshift__.Tensor"}, binary, 0, TPU_HLO_SHR_ARITH},
    {{"__rshift__.Scalar", "__irshift__.Scalar"}, binary, 0, TPU_HLO_SHR_ARITH},
    {{"logical_and", "logical_and_", "logical_and.out"}, logical_rule, 0, TPU_HLO_AND},
    {{"logical_or", "logical_or_", "logical_or.out"}, logical_rule, 0, TPU_HLO_OR},
    {{"logical_xor", "logical_xor_", "logical_xor.out"}, logical_rule, 0, TPU_HLO_XOR},
    CMP("eq", TPU_HLO_EQ),
    CMP("ne", TPU_HLO_NE),
    CMP("lt", TPU_HLO_LT),
    CMP("le", TPU_HLO_LE),
    CMP("gt", TPU_HLO_GT),
    CMP("ge", TPU_HLO_GE),
    {{"where.self", "where.self_out"}, where_rule, 0, 0},
    {{"masked_fill.Scalar", "masked_fill_.Scalar"}, masked_fill_rule, TPU_RULE_CHECKED_SCALARS, 0},
    {{"masked_fill.Tensor", "masked_fill_.Tensor"}, masked_fill_rule, 0, 0},
    {{"clamp", "clamp_", "clamp.out"}, clamp_rule, 0, CLAMP},
    {{"clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out"}, clamp_rule, 0, CLAMP},
    {{"clamp_min", "clamp_min_", "clamp_min.out"}, clamp_rule, 0, CLAMP_MIN},
    {{"clamp_min.Tensor", "clamp_min_.Tensor", "clamp_min.Tensor_out"}, clamp_rule, 0, CLAMP_MIN},
    {{"clamp_max", "clamp_max_", "clamp_max.out"}, clamp_rule, 0, CLAMP_MAX},
    {{"clamp_max.Tensor", "clamp_max_.Tensor", "clamp_max.Tensor_out"}, clamp_rule, 0, CLAMP_MAX},
    {{"lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out"}, lerp_rule, 0, 0},
    {{"lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out"}, lerp_rule, 0, 0},
    {{"addcmul", "addcmul_", "addcmul.out"}, addc_rule, 0, TPU_HLO_MUL},
    {{"addcdiv", "addcdiv_", "addcdiv.out"}, addc_rule, 0, TPU_HLO_DIV},


    {{"fill_.Scalar", "fill.Scalar"}, fill_rule, TPU_RULE_CHECKED_SCALARS, 0},
    {{"fill_.Tensor", "fill.Tensor"}, fill_rule, 0, 0},
    {{"zero_", "zero"}, zero_rule, 0, 0},
    {{"_copy_from"}, copy_rule, TPU_RULE_INTERNAL, 0},
};
TPU_COUNT_RULES(elementwise);
