/* The rule tables, one per op family (one source file each), and the
 * helpers the families share. Private to csrc/lower. */
#ifndef TPU_LOWER_RULES_H_
#define TPU_LOWER_RULES_H_

#include <math.h>

#include "lower/lower.h"

#define TPU_RULE_TABLE(family)                  \
  extern const tpu_lower_rule tpu_rules_##family[]; \
  extern const int tpu_rules_##family##_count

TPU_RULE_TABLE(elementwise);
TPU_RULE_TABLE(activation);
TPU_RULE_TABLE(reduce);
TPU_RULE_TABLE(shape);
TPU_RULE_TABLE(linalg);
TPU_RULE_TABLE(nn);
TPU_RULE_TABLE(norm);
TPU_RULE_TABLE(loss);
TPU_RULE_TABLE(index);
TPU_RULE_TABLE(random);
TPU_RULE_TABLE(conv);
TPU_RULE_TABLE(pool);
TPU_RULE_TABLE(resample);
TPU_RULE_TABLE(view);
TPU_RULE_TABLE(fft);
TPU_RULE_TABLE(sort);
TPU_RULE_TABLE(special);
TPU_RULE_TABLE(factor);
TPU_RULE_TABLE(svd);
TPU_RULE_TABLE(ldl);
TPU_RULE_TABLE(qr);
TPU_RULE_TABLE(eig);
TPU_RULE_TABLE(attention);
TPU_RULE_TABLE(paged_attention);
TPU_RULE_TABLE(rnn);
TPU_RULE_TABLE(ctc);
TPU_RULE_TABLE(optim);

/* Shorthands every family uses: the builder, the first output's type, and
 * the arithmetic a formula is written in. */
#define B (c->b)
#define OUT (&c->out_types[0])

static inline tpu_hlo_value add(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return tpu_hlo_binary(B, TPU_HLO_ADD, x, y); }
static inline tpu_hlo_value sub(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return tpu_hlo_binary(B, TPU_HLO_SUB, x, y); }
static inline tpu_hlo_value mul(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return tpu_hlo_binary(B, TPU_HLO_MUL, x, y); }
static inline tpu_hlo_value dvd(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return tpu_hlo_binary(B, TPU_HLO_DIV, x, y); }
static inline tpu_hlo_value and_(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return tpu_hlo_binary(B, TPU_HLO_AND, x, y); }
static inline tpu_hlo_value or_(tpu_lower_ctx *c, tpu_hlo_value x, tpu_hlo_value y) { return tpu_hlo_binary(B, TPU_HLO_OR, x, y); }
static inline tpu_hlo_value bin(tpu_lower_ctx *c, tpu_hlo_binary_t op, tpu_hlo_value x, tpu_hlo_value y) { return tpu_hlo_binary(B, op, x, y); }
static inline tpu_hlo_value un(tpu_lower_ctx *c, tpu_hlo_unary_t op, tpu_hlo_value x) { return tpu_hlo_unary(B, op, x); }
static inline tpu_hlo_value neg(tpu_lower_ctx *c, tpu_hlo_value x) { return tpu_hlo_unary(B, TPU_HLO_NEG, x); }
static inline tpu_hlo_value cmp(tpu_lower_ctx *c, tpu_hlo_cmp_t d, tpu_hlo_value x, tpu_hlo_value y) { return tpu_hlo_compare(B, d, x, y); }
static inline tpu_hlo_value sel(tpu_lower_ctx *c, tpu_hlo_value p, tpu_hlo_value t, tpu_hlo_value f) { return tpu_hlo_select(B, p, t, f); }
static inline tpu_hlo_value is_nan(tpu_lower_ctx *c, tpu_hlo_value x) { return cmp(c, TPU_HLO_NE, x, x); }

/* |t|'s shape with element type |dtype|. */
static inline tpu_hlo_type with_dtype(const tpu_hlo_type *t, tpu_dtype_t dtype) {
  tpu_hlo_type to = *t;
  to.dtype = dtype;
  return to;
}

/* A constant of |x|'s type and shape: the one spelling of "v shaped like x". */
static inline tpu_hlo_value const_like(tpu_lower_ctx *c, tpu_hlo_value x, double v) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, x);
  return tpu_hlo_const_f64(B, &t, v);
}

/* The type elementwise math runs in for output 0 (tpu_lower_opmath). */
static inline tpu_dtype_t out_math(tpu_lower_ctx *c) { return tpu_lower_opmath(c->out_types[0].dtype); }

/* Operand |i| in out_math, broadcast to the output's shape. */
static inline tpu_hlo_value in(tpu_lower_ctx *c, int i) { return tpu_lower_operand(c, i, out_math(c), OUT); }

/* A constant of out_math and the output's shape. */
static inline tpu_hlo_value out_const(tpu_lower_ctx *c, double v) {
  tpu_hlo_type t = *OUT;
  t.dtype = out_math(c);
  return tpu_hlo_const_f64(B, &t, v);
}

/* Rounds toward zero (floating |x|). */
static inline tpu_hlo_value trunc_of(tpu_lower_ctx *c, tpu_hlo_value x) {
  return sel(c, cmp(c, TPU_HLO_LT, x, const_like(c, x, 0.0)), un(c, TPU_HLO_CEIL, x), un(c, TPU_HLO_FLOOR, x));
}

/* The polynomial with coefficients |k| (highest power first) at |x| (Horner). */
static inline tpu_hlo_value horner(tpu_lower_ctx *c, tpu_hlo_value x, const double *k, int n) {
  tpu_hlo_value r = const_like(c, x, k[0]);
  for (int i = 1; i < n; i++) r = add(c, mul(c, r, x), const_like(c, x, k[i]));
  return r;
}

/* maximum or minimum (|op| MAX or MIN) with NaN propagating, as torch.maximum. */
static inline tpu_hlo_value extreme_of(tpu_lower_ctx *c, tpu_hlo_binary_t op, tpu_hlo_value a, tpu_hlo_value x) {
  tpu_hlo_value r = tpu_hlo_binary(B, op, a, x);
  if (!tpu_dtype_is_float(tpu_hlo_dtype(B, r))) return r;
  return sel(c, is_nan(c, x), x, sel(c, is_nan(c, a), a, r));
}

/* torch.lerp(a, b, w) of values of one type: PyTorch's two-sided formula, for
 * accuracy at both ends. */
static inline tpu_hlo_value lerp_of(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value b, tpu_hlo_value w) {
  tpu_hlo_type t = *tpu_hlo_type_of(B, a);
  tpu_hlo_value diff = sub(c, b, a);
  tpu_hlo_value size = un(c, TPU_HLO_ABS, w); /* a complex weight's magnitude, of its real type */
  tpu_hlo_value small = cmp(c, TPU_HLO_LT, size, tpu_hlo_const_f64(B, tpu_hlo_type_of(B, size), 0.5));
  tpu_hlo_value lo = add(c, a, mul(c, w, diff));
  tpu_hlo_value hi = sub(c, b, mul(c, diff, sub(c, tpu_hlo_const_f64(B, &t, 1.0), w)));
  return sel(c, small, lo, hi);
}

/* logaddexp of complex values as the CPU's kernels (logaddexp, and each step
 * of logcumsumexp): the one of larger real part is the shift; equal
 * infinite real parts give the -inf one or log(exp(a) + exp(x)); a NaN
 * anywhere gives NaN. */
static inline tpu_hlo_value complex_logaddexp_of(tpu_lower_ctx *c, tpu_hlo_value a, tpu_hlo_value x) {
  tpu_hlo_value lt = cmp(c, TPU_HLO_LT, un(c, TPU_HLO_REAL, a), un(c, TPU_HLO_REAL, x));
  tpu_hlo_value lo = sel(c, lt, a, x), hi = sel(c, lt, x, a);
  tpu_hlo_value lo_re = un(c, TPU_HLO_REAL, lo), hi_re = un(c, TPU_HLO_REAL, hi);
  tpu_hlo_value r = add(c, un(c, TPU_HLO_LOG1P, un(c, TPU_HLO_EXP, sub(c, lo, hi))), hi);
  tpu_hlo_value both_inf = and_(c, cmp(c, TPU_HLO_EQ, lo_re, hi_re),
                                cmp(c, TPU_HLO_EQ, un(c, TPU_HLO_ABS, lo_re), const_like(c, lo_re, INFINITY)));
  tpu_hlo_value at_inf = sel(c, cmp(c, TPU_HLO_LT, lo_re, const_like(c, lo_re, 0.0)), lo,
                             un(c, TPU_HLO_LOG, add(c, un(c, TPU_HLO_EXP, lo), un(c, TPU_HLO_EXP, hi))));
  r = sel(c, both_inf, at_inf, r);
  tpu_hlo_value nan = or_(c, is_nan(c, a), is_nan(c, x)), nan_re = const_like(c, lo_re, NAN);
  return sel(c, nan, tpu_hlo_binary(B, TPU_HLO_COMPLEX, nan_re, nan_re), r);
}

/* Tensor argument |i| as |dtype|. */
static inline tpu_hlo_value tensor_as(tpu_lower_ctx *c, int i, tpu_dtype_t dtype) {
  return tpu_hlo_convert(B, tpu_lower_tensor(c, i), dtype);
}

/* Sets output 0: the end of most rules. */
/* 1 / (1 + exp(-x)), PyTorch's sigmoid formula. */
static inline tpu_hlo_value sigmoid_of(tpu_lower_ctx *c, tpu_hlo_value x) {
  tpu_hlo_value one = const_like(c, x, 1.0);
  return dvd(c, one, add(c, one, un(c, TPU_HLO_EXP, un(c, TPU_HLO_NEG, x))));
}

static inline tpu_status_t done(tpu_lower_ctx *c, tpu_hlo_value v) {
  tpu_lower_set_output(c, 0, v);
  return NULL;
}

#define TPU_COUNT_RULES(family) \
  const int tpu_rules_##family##_count = (int)(sizeof tpu_rules_##family / sizeof tpu_rules_##family[0])

#endif /* TPU_LOWER_RULES_H_ */
